"""Elementwise arithmetic shorthand for handlers that decompose an ONNX op into
many graph ops (sampling at computed coordinates, spectral ops): Python numbers
become constants of the working element type, and every call emits one graph op
(folded at import when its operands are constants)."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import SSAValue

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of

Operand = Value | float | int | np.ndarray


class Arith:
    """Emits elementwise graph ops for one node; numbers and arrays given as
    operands become constants of `dtype` (the working element type)."""

    def __init__(self, ctx: NodeContext, dtype: np.dtype) -> None:
        self.ctx, self.dtype = ctx, np.dtype(dtype)

    def const(self, value: Any, dtype: Any = None) -> Const:
        return Const(np.asarray(value, dtype or self.dtype))

    def value(self, a: Operand) -> Value:
        return a if isinstance(a, Const | SSAValue) else self.const(a)

    def op(self, cls: type[g.GraphOp], *args: Operand, **attrs: Any) -> Value:
        return self.ctx.emit(cls, [self.value(a) for a in args], **attrs)[0]

    def add(self, a: Operand, b: Operand) -> Value:
        return self.op(g.AddOp, a, b)

    def sub(self, a: Operand, b: Operand) -> Value:
        return self.op(g.SubOp, a, b)

    def mul(self, a: Operand, b: Operand) -> Value:
        return self.op(g.MulOp, a, b)

    def div(self, a: Operand, b: Operand) -> Value:
        return self.op(g.DivOp, a, b)

    def floor(self, a: Operand) -> Value:
        return self.op(g.FloorOp, a)

    def less(self, a: Operand, b: Operand) -> Value:
        return self.op(g.LessOp, a, b)

    def greater(self, a: Operand, b: Operand) -> Value:
        return self.op(g.GreaterOp, a, b)

    def both(self, a: Value, b: Value) -> Value:
        return self.op(g.AndOp, a, b)

    def either(self, a: Value, b: Value) -> Value:
        return self.op(g.OrOp, a, b)

    def where(self, cond: Value, a: Operand, b: Operand) -> Value:
        return self.op(g.WhereOp, cond, a, b)

    def clip(self, a: Value, lo: float, hi: float) -> Value:
        dtype = numpy_type_of(a)
        return self.op(g.ClipOp, a, self.const(lo, dtype), self.const(hi, dtype))

    def cast(self, a: Value, dtype: Any) -> Value:
        dtype = np.dtype(dtype)
        if numpy_type_of(a) == dtype:
            return a
        return self.op(g.CastOp, a, to=dtypes.from_numpy(dtype))
