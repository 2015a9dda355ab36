"""Symbolic tensor dims: `Dim`, an integer polynomial of named dims (ONNX
`dim_param`s) and of floor-divisions of such polynomials by constants.

A `Dim` is kept in a canonical form (terms sorted, a floor-division's divisible
part taken out, nested floor-divisions folded, gcds cancelled), so the shapes the
shape rules compute alike are `==`, hash alike and print alike; two forms equal for
every value but written apart (rare: H floordiv 2 + (H + 1) floordiv 2 is H) are
different dims, which errs towards refusing. A constant is a plain `int`, so static
shapes never hold a `Dim` and keep every fast path. `Dim`s mix with ints in `+ - *
// %` as shape code writes them (the graph ops' shape rules run on them unchanged).

Comparisons (`<`, `max`, `abs`, `bool`) decide with interval arithmetic over the
symbols' range [1, DIM_MAX] (`symbolic_bounds`); what that cannot decide is decided
as if every symbol were large (validity checks such as "the kernel fits the padded
input" pass), and the fact assumed is recorded (`collect_assumptions`) so that a
run-time check or a range can hold a shape to it. What stays undecidable (`b - s <
0`), and any step that needs a number (`int()`, numpy), raises SymbolicDimError
naming the expression.

Text form (the graph dialect's `#graph.dims`; `symbolic_text.parse` reads it):
`batch`, `3*H*W`, `(H + 1) floordiv 2`; a name that is not an identifier is quoted:
`'sequence length'`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from smelt.errors import UnsupportedModel

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")  # a name printed without quotes

DIM_MAX = (1 << 31) - 1
"""The largest value a symbol is assumed to take (the smallest is 1)."""


class SymbolicDimError(UnsupportedModel):
    """A step that cannot be done with a symbolic dim (it needs a number, or a
    comparison that the expressions do not decide)."""


@dataclass(frozen=True)
class _Div:
    """The atom `num floordiv den` (den >= 2, num not divisible term by term)."""

    num: Dim
    den: int

    def key(self) -> tuple:
        return (1, str(self.num), self.den)

    def __str__(self) -> str:
        inner = str(self.num)
        if not _NAME.fullmatch(inner):
            inner = f"({inner})"
        return f"{inner} floordiv {self.den}"


_Atom = str | _Div  # a symbol's name, or a floor-division
_Mono = tuple  # sorted atoms (repeated for powers); () is the constant term


def _atom_key(a: _Atom) -> tuple:
    return (0, a) if isinstance(a, str) else a.key()


def _mono_key(m: _Mono) -> tuple:
    return (-len(m), tuple(_atom_key(a) for a in m))


class Dim:
    """A symbolic dim (see the module's text); build with `sym(name)`."""

    __slots__ = ("_hash", "terms")

    def __init__(self, terms: tuple[tuple[_Mono, int], ...]) -> None:
        self.terms = terms  # canonical: sorted by _mono_key, no zero coefficient
        self._hash = hash(terms)

    # --- arithmetic -----------------------------------------------------------------

    def __add__(self, other: DimLike) -> DimLike:
        return _make(_merge(_poly(self), _poly(other), 1))

    __radd__ = __add__

    def __sub__(self, other: DimLike) -> DimLike:
        return _make(_merge(_poly(self), _poly(other), -1))

    def __rsub__(self, other: DimLike) -> DimLike:
        return _make(_merge(_poly(other), _poly(self), -1))

    def __neg__(self) -> DimLike:
        return _make({m: -c for m, c in self.terms})

    def __pos__(self) -> Dim:
        return self

    def __mul__(self, other: DimLike) -> DimLike:
        out: dict = {}
        for m1, c1 in _poly(self).items():
            for m2, c2 in _poly(other).items():
                m = tuple(sorted(m1 + m2, key=_atom_key))
                out[m] = out.get(m, 0) + c1 * c2
        return _make(out)

    __rmul__ = __mul__

    def __floordiv__(self, other: DimLike) -> DimLike:
        return floordiv(self, other)

    def __rfloordiv__(self, other: DimLike) -> DimLike:
        return floordiv(other, self)

    def __mod__(self, other: DimLike) -> DimLike:
        return mod(self, other)

    def __rmod__(self, other: DimLike) -> DimLike:
        return mod(other, self)

    def __abs__(self) -> DimLike:
        return self if decide(self, ">=") else -self

    # --- comparisons ----------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dim) and self.terms == other.terms

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: DimLike) -> bool:
        return decide(self - other, "<")

    def __le__(self, other: DimLike) -> bool:
        return decide(self - other, "<=")

    def __gt__(self, other: DimLike) -> bool:
        return decide(self - other, ">")

    def __ge__(self, other: DimLike) -> bool:
        return decide(self - other, ">=")

    def __bool__(self) -> bool:
        return decide(self, "!=")

    # --- no number --------------------------------------------------------------------

    def _no_number(self, *_args) -> int:
        raise SymbolicDimError(
            f"dim '{self}' is symbolic, and this step needs a number; fix it with "
            "input_shapes= (or import without symbolic dims)"
        )

    __index__ = __int__ = __float__ = __round__ = __trunc__ = _no_number
    __floor__ = __ceil__ = __truediv__ = __rtruediv__ = _no_number
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = _no_number

    # --- text and values --------------------------------------------------------------

    def __str__(self) -> str:
        parts = []
        for i, (m, c) in enumerate(self.terms):
            text = _mono_str(m, abs(c))
            if i == 0 and c < 0:  # a unary minus binds tighter than floordiv
                parts.append(f"-({text})" if "floordiv" in text else f"-{text}")
            elif i == 0:
                parts.append(text)
            else:
                parts.append(f" - {text}" if c < 0 else f" + {text}")
        return "".join(parts)

    def __repr__(self) -> str:
        return f"Dim({self})"

    def symbols(self) -> set[str]:
        """The names this expression reads."""
        out: set[str] = set()
        for m, _ in self.terms:
            for a in m:
                out |= {a} if isinstance(a, str) else a.num.symbols()
        return out

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        """The value with each symbol bound to a number (KeyError: one unbound)."""
        return int(substitute(self, bindings))


DimLike = int | Dim
T = TypeVar("T")


def sym(name: str) -> Dim:
    """The symbolic dim named `name`."""
    if not name:
        raise ValueError("a symbolic dim needs a name")
    return Dim((((name,), 1),))


def is_symbolic(d: object) -> bool:
    return isinstance(d, Dim)


def substitute(d: DimLike, bindings: Mapping[str, DimLike]) -> DimLike:
    """`d` with the bound symbols replaced (by numbers or expressions)."""
    if not isinstance(d, Dim):
        return d
    total: DimLike = 0
    for m, c in d.terms:
        term: DimLike = c
        for a in m:
            if isinstance(a, str):
                term = term * bindings[a] if a in bindings else term * sym(a)
            else:
                term = term * floordiv(substitute(a.num, bindings), a.den)
        total = total + term
    return total


def fold(
    d: DimLike,
    symbol: Callable[[str], T],
    const: Callable[[int], T],
    add: Callable[[T, T], T],
    mul: Callable[[T, T], T],
    floordiv: Callable[[T, int], T],
) -> T:
    """`d` built from the given operations, term by term in canonical order: the
    loop level builds a dim's value from the entry's dims with it (symbol: the
    SSA index of a name; const, add, mul, floordiv: arith ops; floordiv's divisor
    is a positive constant, its dividend may be negative)."""
    if not isinstance(d, Dim):
        return const(d)
    total: T | None = None
    for m, c in d.terms:
        term: T | None = None if c == 1 else const(c)
        for a in m:
            v = symbol(a) if isinstance(a, str) else floordiv(
                fold(a.num, symbol, const, add, mul, floordiv), a.den
            )
            term = v if term is None else mul(term, v)
        term = const(c) if term is None else term
        total = term if total is None else add(total, term)
    assert total is not None
    return total


def _poly(x: DimLike) -> dict:
    if isinstance(x, Dim):
        return dict(x.terms)
    if isinstance(x, bool) or not isinstance(x, int):
        x = int(x)  # numpy integers; anything else fails here
    return {(): x} if x else {}


def _merge(a: dict, b: dict, scale: int) -> dict:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + scale * c
    return out


def _make(poly: dict) -> DimLike:
    kept = ((m, c) for m, c in poly.items() if c)
    terms = tuple(sorted(kept, key=lambda t: _mono_key(t[0])))
    if not terms:
        return 0
    if len(terms) == 1 and terms[0][0] == ():
        return terms[0][1]
    return Dim(terms)


def _mono_str(m: _Mono, coeff: int) -> str:
    factors = [str(coeff)] if coeff != 1 or not m else []
    for a in m:
        text = _quoted(a) if isinstance(a, str) else str(a)
        factors.append(text if isinstance(a, str) or (len(m) == 1 and coeff == 1)
                       else f"({text})")  # fmt: skip
    return "*".join(factors)


def _quoted(name: str) -> str:
    return name if _NAME.fullmatch(name) and name != "floordiv" else f"'{name}'"


# --- division -----------------------------------------------------------------------


def floordiv(a: DimLike, b: DimLike) -> DimLike:
    """floor(a / b): b a nonzero constant, or an expression that divides `a`
    exactly (a Reshape's -1); SymbolicDimError otherwise."""
    if isinstance(b, Dim):
        q = _exact_quotient(_poly(a), b)
        if q is None:
            raise SymbolicDimError(f"cannot divide '{a}' by the symbolic dim '{b}'")
        return q
    b = int(b)
    if not isinstance(a, Dim):
        return int(a) // b
    if b == 0:
        raise ZeroDivisionError(f"'{a}' floordiv 0")
    if b < 0:
        return floordiv(-a, -b)
    if b == 1:
        return a
    # floor((b*Q + R) / b) = Q + floor(R / b): the divisible part comes out
    quotient, rest = {}, {}
    for m, c in a.terms:
        if m == ():
            quotient[m], rest[m] = c // b, c % b
        elif c % b == 0:
            quotient[m] = c // b
        else:
            rest[m] = c
    q, r = _make(quotient), _make(rest)
    if not isinstance(r, Dim):
        return q + r // b
    if all(c < 0 for m, c in r.terms if m):  # floor(-X / b) = -floor((X + b-1) / b)
        return q - floordiv(-r + (b - 1), b)
    g = math.gcd(b, *(c for _, c in r.terms))
    if g > 1:  # floor(g*R / g*b) = floor(R / b)
        r, b = _make({m: c // g for m, c in r.terms}), b // g
    if b == 1:
        return q + r
    assert isinstance(r, Dim)
    constant_only = len(r.terms) == 1 or (len(r.terms) == 2 and r.terms[1][0] == ())
    if constant_only and r.terms[0][1] == 1 and len(r.terms[0][0]) == 1:
        # floor((N floordiv a + k) / b) = floor((N + a*k) / a*b)
        inner = r.terms[0][0][0]
        if isinstance(inner, _Div):
            k = r.terms[1][1] if len(r.terms) == 2 else 0
            return q + floordiv(inner.num + inner.den * k, inner.den * b)
    return q + Dim((((_Div(r, b),), 1),))


def _exact_quotient(a: dict, b: Dim) -> DimLike | None:
    """a / b when `b` divides `a` term by term (or `a` is a multiple of `b`)."""
    if len(b.terms) == 1:
        (bm, bc), out = b.terms[0], {}
        for m, c in a.items():
            rest = list(m)
            for atom in bm:
                if atom not in rest:
                    return None
                rest.remove(atom)
            if c % bc:
                return None
            out[tuple(rest)] = c // bc
        return _make(out)
    lead = sorted(a.items(), key=lambda t: _mono_key(t[0]))[:1]
    q = _exact_quotient(dict(lead), Dim((b.terms[0],))) if lead else 0
    return q if q is not None and _poly(q * b) == a else None


def mod(a: DimLike, b: DimLike) -> DimLike:
    """a mod b when it is a number or exact (0); SymbolicDimError otherwise."""
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        return int(a) % int(b)
    if isinstance(b, Dim):
        if _exact_quotient(_poly(a), b) is not None:
            return 0
    else:
        r = a - b * floordiv(a, b)
        if not isinstance(r, Dim):
            return r
    raise SymbolicDimError(f"cannot tell whether '{b}' divides '{a}'")


def decide(d: DimLike, op: str) -> bool:
    """`d op 0` (`symbolic_bounds.decide`)."""
    from smelt.dialects import symbolic_bounds  # it builds on this module

    return symbolic_bounds.decide(d, op)
