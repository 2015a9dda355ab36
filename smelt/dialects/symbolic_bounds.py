"""Deciding comparisons of symbolic dims (`symbolic.Dim`): integer bounds over the
symbols' ranges (`interval`), the decision `decide` that the Dim comparisons use,
and the record of what was assumed where the bounds do not decide
(`collect_assumptions`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from fractions import Fraction

from smelt.dialects.symbolic import (
    DIM_MAX,
    Dim,
    DimLike,
    SymbolicDimError,
    _atom_key,
)

_ASSUMED: list[list[str]] = []


@contextmanager
def collect_assumptions() -> Iterator[list[str]]:
    """Records (as text, `expr > 0` / `expr < 0`) each fact about the symbols that
    a comparison assumed while the block runs."""
    found: list[str] = []
    _ASSUMED.append(found)
    try:
        yield found
    finally:
        _ASSUMED.remove(found)


def assume(fact: str) -> None:
    """Records `fact` (text) in the assumptions being collected."""
    for found in _ASSUMED:
        if fact not in found:
            found.append(fact)


def interval(
    d: DimLike, ranges: Mapping[str, tuple[int, int]] | None = None
) -> tuple[int, int]:
    """Integer bounds of `d` over symbols in [1, DIM_MAX], or in `ranges` (name:
    (lo, hi), lo >= 0) for those it names (`relax` first writes each
    floor-division as an exact quotient less a remainder, so that what cancels,
    cancels: 2*(X floordiv 2) - X is in [-1, 0])."""
    if not isinstance(d, Dim):
        return d, d
    rems: dict = {}
    lo, hi = _bounds(relax(d, rems), rems, ranges)
    h_lo, h_hi = _horner(dict(d.terms), ranges or {})
    return max(lo, h_lo), min(hi, h_hi)


def _horner(poly: dict, ranges: Mapping) -> tuple[int, int]:
    """Bounds of a polynomial over atoms, the most shared atom factored out first
    (b*a - 2*b is bounded as b*(a - 2)); a floor-division atom is bounded by its
    numerator's bounds."""
    counts: dict = {}
    for m in poly:
        for a in set(m):
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        c = poly.get((), 0)
        return c, c
    atom = max(counts, key=lambda a: (counts[a], _atom_key(a)))
    inner, rest = {}, {}
    for m, c in poly.items():
        if atom in m:
            k = list(m)
            k.remove(atom)
            inner[tuple(k)] = c
        else:
            rest[m] = c
    if isinstance(atom, str):
        a_lo, a_hi = ranges.get(atom, (1, DIM_MAX))
    else:
        n_lo, n_hi = interval(atom.num, ranges)
        a_lo, a_hi = n_lo // atom.den, n_hi // atom.den
    i_lo, i_hi = _horner(inner, ranges)
    r_lo, r_hi = _horner(rest, ranges)
    corners = (a_lo * i_lo, a_lo * i_hi, a_hi * i_lo, a_hi * i_hi)
    return min(corners) + r_lo, max(corners) + r_hi


def relax(d: DimLike, rems: dict) -> dict:
    """`d` as a polynomial with Fraction coefficients over the symbols and one
    remainder variable per floor-division (`rems`: atom -> (index, divisor)):
    N floordiv c = (N - r) / c with r in [0, c - 1]."""
    if not isinstance(d, Dim):
        return {(): Fraction(d)} if d else {}
    out: dict = {}
    for m, c in d.terms:
        term = {(): Fraction(c)}
        for a in m:
            if isinstance(a, str):
                factor = {(("s", a),): Fraction(1)}
            else:
                index = rems.setdefault(a, (len(rems), a.den))[0]
                factor = relax(a.num, rems)
                factor[(("r", index),)] = factor.get((("r", index),), 0) - 1
                factor = {k: v / a.den for k, v in factor.items()}
            term = _rmul(term, factor)
        for k, v in term.items():
            out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v}


def _rmul(a: dict, b: dict) -> dict:
    out: dict = {}
    for m1, c1 in a.items():
        for m2, c2 in b.items():
            m = tuple(sorted(m1 + m2))
            out[m] = out.get(m, 0) + c1 * c2
    return out


def _bounds(poly: dict, rems: dict, ranges: Mapping | None = None) -> tuple:
    """Integer bounds of a relaxed polynomial (it takes integer values only)."""
    rem_ranges = {("r", i): (0, den - 1) for i, den in rems.values()}
    ranges = ranges or {}
    lo = hi = Fraction(0)
    for m, c in poly.items():
        m_lo = m_hi = 1
        for var in m:
            v_lo, v_hi = (
                ranges.get(var[1], (1, DIM_MAX)) if var[0] == "s" else rem_ranges[var]
            )
            m_lo, m_hi = m_lo * v_lo, m_hi * v_hi
        if c > 0:
            lo, hi = lo + c * m_lo, hi + c * m_hi
        else:
            lo, hi = lo + c * m_hi, hi + c * m_lo
    return math.ceil(lo), math.floor(hi)


_DECIDE = {  # (true when the bounds lo, hi say, false when they say)
    ">": (lambda lo, hi: lo > 0, lambda lo, hi: hi <= 0),
    ">=": (lambda lo, hi: lo >= 0, lambda lo, hi: hi < 0),
    "<": (lambda lo, hi: hi < 0, lambda lo, hi: lo >= 0),
    "<=": (lambda lo, hi: hi <= 0, lambda lo, hi: lo > 0),
    "!=": (lambda lo, hi: lo > 0 or hi < 0, lambda lo, hi: lo == hi == 0),
}


def decide(d: DimLike, op: str) -> bool:
    """`d op 0`: decided over the symbols' range [1, DIM_MAX], else as if the
    symbols were large (the fact assumed is recorded), else SymbolicDimError."""
    if not isinstance(d, Dim):
        return {">": d > 0, ">=": d >= 0, "<": d < 0, "<=": d <= 0, "!=": d != 0}[op]
    rems: dict = {}
    poly = relax(d, rems)
    lo, hi = interval(d)
    true, false = _DECIDE[op]
    if true(lo, hi) or false(lo, hi):
        return true(lo, hi)
    # as if the symbols were large: the sign of the terms that grow fastest
    degree = {m: sum(v[0] == "s" for v in m) for m in poly}
    top = max(degree.values())
    lead = {c > 0 for m, c in poly.items() if top and degree[m] == top}
    if len(lead) != 1:
        raise SymbolicDimError(
            f"cannot tell whether '{d}' {op} 0 (its symbols could make it either "
            "way); fix one of its dims with input_shapes="
        )
    answer = op == "!=" or lead.pop() == (op in (">", ">="))
    negated = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "!=": "=="}
    assume(f"{d} {op if answer else negated[op]} 0")
    return answer


def sign(d: DimLike) -> int:
    """-1, 0 or 1 (decided as `decide` does)."""
    return 0 if not decide(d, "!=") else 1 if decide(d, ">") else -1
