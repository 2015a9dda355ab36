"""The algebra of symbolic dims (`symbolic.Dim`, #34) against Python's integers:
values, canonical text, bounds, the decisions comparisons make, and `fold` (how
the loop level will build a dim's value)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from smelt.dialects.symbolic import Dim, SymbolicDimError, fold, substitute, sym
from smelt.dialects.symbolic_bounds import collect_assumptions, interval
from smelt.dialects.symbolic_text import holds, parse

B, H, W, S = sym("batch"), sym("H"), sym("W"), sym("seq")

# --- the algebra ----------------------------------------------------------------------


def _random_expr(rng: random.Random, env: dict, depth: int = 0):
    """A random expression built both as a Dim and as the integer it must equal."""
    if depth > 3 or rng.random() < 0.3:
        c = rng.choice([*env, rng.randint(-5, 9)])
        return (sym(c), env[c]) if isinstance(c, str) else (c, c)
    (x, xv), (y, yv) = (_random_expr(rng, env, depth + 1) for _ in range(2))
    op = rng.choice("+-*/")
    if op == "/":
        k = rng.choice([1, 2, 3, 4, -2, -3])
        return x // k, xv // k
    return {"+": (x + y, xv + yv), "-": (x - y, xv - yv), "*": (x * y, xv * yv)}[op]


def _add(a, b):
    return a + b


def _mul(a, b):
    return a * b


def _floordiv(a, b):
    return a // b


def test_dim_algebra_matches_integers():
    rng = random.Random(34)
    for _ in range(3000):
        env = {n: rng.randint(1, 40) for n in ("H", "W", "b")}
        e, value = _random_expr(rng, env)
        assert substitute(e, env) == value, str(e)
        if isinstance(e, Dim):
            assert parse(str(e)) == e, str(e)  # one canonical text
            lo, hi = interval(e)
            assert lo <= value <= hi, str(e)
            lo, hi = interval(e, {n: (1, 40) for n in env})  # ranges bound tighter
            assert lo <= value <= hi, str(e)
            built = fold(e, env.__getitem__, int, _add, _mul, _floordiv)
            assert built == value, str(e)  # as the loop level will build it


def test_dim_canonical_forms():
    assert str((H - 1) // 2 + 1) == "(H + 1) floordiv 2"
    assert ((H + 1) // 2 + 1) // 2 == (H + 3) // 4  # nested floor-divisions fold
    assert (2 * H + 1) // 2 == H and B * S == S * B and hash(B * S) == hash(S * B)
    assert B * S * 768 // (B * S * 12) == 64 and B * S * 768 // 768 == B * S
    assert -(-(H - 1) // 2) == H // 2  # ceil((H - 1) / 2)
    assert H - H == 0 and isinstance(H - H, int)  # constants are ints
    assert str(sym("a b") + 1) == "'a b' + 1" and parse("'a b' + 1") == sym("a b") + 1


def test_dim_comparisons_decide_or_refuse():
    with collect_assumptions() as assumed:
        assert min(2**63 - 1, H) == H  # decided over [1, 2**31 - 1]
        assert max(H - 1, 0) == H - 1 and not H - 1 < 0
        assert 2 * ((H + 1) // 2) - H - 2 < 0  # relaxed floor-division: -2 or -1
        assert assumed == []
        assert H - 3 >= 0  # not decided: assumed, as if H were large
    assert assumed == ["H - 3 >= 0"]
    assert holds(assumed[0], {"H": 3}) and not holds(assumed[0], {"H": 2})
    with pytest.raises(SymbolicDimError, match="batch - seq"):
        _ = B - S < 0
    with pytest.raises(SymbolicDimError, match="'batch' is symbolic"):
        np.zeros((B, 3))
    with pytest.raises(SymbolicDimError, match="cannot divide"):
        _ = B * S // (B + 1)
