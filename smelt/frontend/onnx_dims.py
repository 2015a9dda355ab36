"""Shape values that hold symbolic dims (#34): what `Shape` and `Size` give of a
tensor with symbolic dims, and the int64 arithmetic that exports do on it at
import (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, the sizes of heads).

A `DimArray` is a value known at import like a `Const`, whose entries are ints
and `symbolic.Dim`s; its own shape is static. The graph ops that exports apply
to such values fold here, exactly: the data movement ops (reshape, gather,
concat, slice, expand, transpose, split) move entries; + - * and integer
division (truncating toward zero, as ONNX's) compute with the expressions;
comparisons, max / min and Where decide only when the symbols' whole range
decides them (never by an assumption). A result without a symbol is a plain
`Const` again; anything else that needs the entries as numbers (run-time data,
a float cast, an undecided comparison) raises SymbolicDimError naming the dims.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.ir import Block

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.dialects.symbolic import Dim, SymbolicDimError, floordiv
from smelt.dialects.symbolic_bounds import interval
from smelt.frontend.onnx_values import Const, DimArray


def make(entries: Any, dtype: np.dtype = np.dtype(np.int64)):
    """A `DimArray` of `entries` (an array of ints and Dims), or a plain `Const`
    when no entry is symbolic."""
    array = np.asarray(entries, dtype=object)
    flat = [_entry(x) for x in array.reshape(-1)]
    if not any(isinstance(x, Dim) for x in flat):
        info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
        if info and any(not info.min <= x <= info.max for x in flat):
            raise SymbolicDimError(f"a shape value overflows {np.dtype(dtype).name}")
        return Const(np.array(flat, dtype).reshape(array.shape))
    return DimArray(objects(flat, array.shape), dtype)


def objects(entries: Sequence, shape: Sequence[int]) -> np.ndarray:
    """An object array of `entries` (ints and Dims) in `shape`."""
    out = np.empty(len(entries), object)
    out[:] = list(entries)
    return out.reshape(shape)


def _entry(x: Any) -> Any:
    return x if isinstance(x, Dim) else int(x)


# --- folding ----------------------------------------------------------------------

_MOVES = (g.ReshapeOp, g.GatherOp, g.ConcatOp, g.SliceOp, g.ExpandOp,
          g.TransposeOp, g.SplitOp, g.IdentityOp)  # fmt: skip


def fold(cls: type[g.GraphOp], operands: Sequence, result_types, attrs: dict) -> list:
    """The results of graph op `cls` on `operands` (Consts and DimArrays)."""
    if not all(isinstance(v, Const | DimArray) for v in operands):
        shown = next(v for v in operands if isinstance(v, DimArray))
        raise shown.refusal(f"{cls.name} uses it as run-time data")
    scratch = Block(arg_types=[v.type for v in operands])
    op = cls.build(scratch.args, result_types, **attrs)
    arrays = [v.array.astype(object) for v in operands]
    dims = next(v for v in operands if isinstance(v, DimArray))
    if cls in _MOVES:
        if cls is g.GatherOp and isinstance(operands[1], DimArray):
            raise dims.refusal("gather indices must be numbers")
        out = _move(op, arrays)
    elif cls is g.CastOp:
        to = dtypes.to_numpy(op.attr("to"))
        if to.kind != "i" or to.itemsize < 4:
            raise dims.refusal(f"a cast to {to.name} needs numbers")
        return [make(arrays[0], to)]
    elif cls in _BINARY or cls in _COMPARE:
        a, b = np.broadcast_arrays(*arrays)
        fn = _BINARY.get(cls) or _compare(_COMPARE[cls])
        out = [objects([fn(x, y) for x, y in zip(a.flat, b.flat)], a.shape)]
        if cls in _COMPARE:
            return [Const(out[0].astype(np.bool_))]
    elif cls is g.WhereOp:
        if isinstance(operands[0], DimArray):
            raise dims.refusal("a condition must be true or false")
        out = [np.where(arrays[0].astype(bool), arrays[1], arrays[2])]
    elif cls is g.NegOp:
        out = [objects([-x for x in arrays[0].flat], arrays[0].shape)]
    else:
        raise dims.refusal(f"{cls.name} cannot compute with symbolic dims")
    dtype = dtypes.to_numpy(op.results[0].type.element_type)
    return [make(a, dtype) for a in out]


def _move(op: g.GraphOp, arrays: list[np.ndarray]) -> list[np.ndarray]:
    from smelt.reference.kernels import ALL_KERNELS

    out = ALL_KERNELS[type(op)](op, arrays)  # type: ignore[arg-type]
    return out if isinstance(out, list) else [out]


def _sign(d: Any) -> int:
    """-1, 0 or 1 when the symbols' whole range decides it, else SymbolicDimError."""
    if not isinstance(d, Dim):
        return (d > 0) - (d < 0)
    lo, hi = interval(d)
    if lo > 0 or hi < 0:
        return 1 if lo > 0 else -1
    raise SymbolicDimError(
        f"the sign of '{d}' depends on its symbols' values; fix them with "
        "input_shapes="
    )


def _div(a: Any, b: Any) -> Any:
    """ONNX integer Div: truncates toward zero."""
    if isinstance(b, Dim):
        return floordiv(a, b) if _sign(a) >= 0 and _sign(b) > 0 else _no(a, "/", b)
    if b == 0:
        raise SymbolicDimError(f"'{a}' divided by 0")
    if not isinstance(a, Dim):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    s = _sign(a)
    q = floordiv(a if s >= 0 else -a, abs(b))
    return q if (s >= 0) == (b > 0) else -q


def _no(a: Any, op: str, b: Any) -> Any:
    raise SymbolicDimError(f"cannot compute '{a}' {op} '{b}' exactly for every value")


def _compare(op: str):
    def compare(a: Any, b: Any) -> bool:
        diff = a - b
        if not isinstance(diff, Dim):
            return {"==": diff == 0, "<": diff < 0, ">": diff > 0,
                    "<=": diff <= 0, ">=": diff >= 0}[op]  # fmt: skip
        lo, hi = interval(diff)
        true, false = {"==": (False, lo > 0 or hi < 0), "<": (hi < 0, lo >= 0),
                       ">": (lo > 0, hi <= 0), "<=": (hi <= 0, lo > 0),
                       ">=": (lo >= 0, hi < 0)}[op]  # fmt: skip
        if true or false:
            return true
        return _no(a, op, b)

    return compare


def _extreme(pick_first: str):
    def extreme(a: Any, b: Any) -> Any:
        return a if _compare(pick_first)(a, b) else b

    return extreme


_BINARY = {
    g.AddOp: lambda a, b: a + b,
    g.SubOp: lambda a, b: a - b,
    g.MulOp: lambda a, b: a * b,
    g.DivOp: _div,
    g.MaxOp: _extreme(">="),
    g.MinOp: _extreme("<="),
}
_COMPARE = {
    g.EqualOp: "==", g.LessOp: "<", g.GreaterOp: ">",
    g.LessEqualOp: "<=", g.GreaterEqualOp: ">=",
}  # fmt: skip
