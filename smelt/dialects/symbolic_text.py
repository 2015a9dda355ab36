"""The text form of symbolic dims (`symbolic.Dim`): `parse` reads what
`str(Dim)` writes: integers, names (quoted 'like this' when not identifiers),
`+ - *`, `floordiv` by a number, parentheses."""

from __future__ import annotations

import re

from smelt.dialects.symbolic import _NAME, Dim, DimLike, floordiv, substitute, sym

_TOKEN = re.compile(r"\s*(?:(\d+)|('[^']*')|([A-Za-z_][A-Za-z0-9_.$]*)|(.))")


def parse(text: str) -> DimLike:
    """The expression `text` (as `str(Dim)` writes it); ValueError if malformed."""
    tokens = [
        next(g for g in m.groups() if g is not None)
        for m in _TOKEN.finditer(text.strip())
    ]
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(f"dim expression '{text}' ends early")
        pos += 1
        return tokens[pos - 1]

    def expr() -> DimLike:
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term() -> DimLike:
        value = factor()
        while peek() in ("*", "floordiv"):
            if take() == "*":
                value = value * factor()
            else:
                den = factor()
                if isinstance(den, Dim) or den == 0:
                    raise ValueError(f"'{text}': floordiv needs a nonzero number")
                value = floordiv(value, den)
        return value

    def factor() -> DimLike:
        t = take()
        if t == "-":
            return -factor()
        if t == "(":
            value = expr()
            if take() != ")":
                raise ValueError(f"dim expression '{text}': ')' expected")
            return value
        if t.isdigit():
            return int(t)
        if t.startswith("'") or (_NAME.fullmatch(t) and t != "floordiv"):
            return sym(t.strip("'"))
        raise ValueError(f"dim expression '{text}': unexpected '{t}'")

    value = expr()
    if pos != len(tokens):
        raise ValueError(f"dim expression '{text}': unexpected '{tokens[pos]}'")
    return value


_RELATIONS = {
    ">": lambda v: v > 0, ">=": lambda v: v >= 0, "<": lambda v: v < 0,
    "<=": lambda v: v <= 0, "!=": lambda v: v != 0, "==": lambda v: v == 0,
}  # fmt: skip


def holds(fact: str, bindings: dict[str, int]) -> bool:
    """Whether an assumption `expr op 0` (as `collect_assumptions` writes it), or
    `name in {1, n}` (a broadcast's), holds with the symbols bound to numbers."""
    if " in {" in fact:
        expr, values = fact.split(" in {")
        allowed = {int(v) for v in values.rstrip("}").split(",")}
        return substitute(parse(expr), bindings) in allowed
    expr, op, zero = fact.rsplit(" ", 2)
    if zero != "0" or op not in _RELATIONS:
        raise ValueError(f"'{fact}' is not an assumption")
    return _RELATIONS[op](substitute(parse(expr), bindings))
