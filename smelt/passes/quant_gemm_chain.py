"""The integer chains that quant-pack-gemm packs, matched: an i32 matmul or an
NHWC conv (quant-fold-qdq's forms, after graph-convert-layout), cast to f32 and
scaled per column; what a qgemm needs to replace them (its rows, weight [K, N]
and i32 bias)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph
from smelt.dialects import quant as q
from smelt.dialects.quant_gemm import Im2ColOp


def const(value: SSAValue) -> np.ndarray | None:
    owner = value.owner
    return owner.to_array() if isinstance(owner, graph.ConstantOp) else None


def single(value: SSAValue, cls: type[Operation]) -> Operation | None:
    """The op of type `cls` that produces `value`, used only once."""
    owner = value.owner
    return owner if isinstance(owner, cls) and value.has_one_use() else None


Prep = Callable[[], tuple[list[Operation], SSAValue]]
"""Builds the ops that make a qgemm's rows (called once the rewrite is sure)."""


@dataclass
class Chain:
    """The integer contraction before cast f32 → mul(mult), matched: rows [..., K]
    (made by `prep`) times w [K, N] + bias."""

    prep: Prep
    w: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    mul: graph.MulOp
    signed: bool


def match_chain(mul: Operation) -> Chain | None:
    if not isinstance(mul, graph.MulOp) or (mult := const(mul.operands[1])) is None:
        return None
    to_float = single(mul.operands[0], graph.CastOp)
    if to_float is None or to_float.result.type.element_type != dtypes.f32:
        return None
    acc = to_float.operands[0]
    found = _conv_rows(acc) if isinstance(acc.owner, graph.Conv2dOp) else None
    if found is None:
        found = _matmul_rows(acc)
    if found is None:
        return None
    prep, w, bias, signed = found
    n = w.shape[1]
    if bias.size not in (1, n) or mult.size not in (1, n):
        return None
    if mult.size > 1 and mult.shape[-1] != n:
        return None  # a multiplier along another axis than the columns
    return Chain(prep, w, bias, mult, mul, signed)  # type: ignore[arg-type]


Rows = tuple[Prep, np.ndarray, np.ndarray, bool]


def _matmul_rows(acc: SSAValue) -> Rows | None:
    """add(matmul(cast(x_q) to i32, w), bias)."""
    add = single(acc, graph.AddOp)
    if add is None or (bias := const(add.operands[1])) is None:
        return None
    matmul = single(add.operands[0], graph.MatMulOp)
    if matmul is None or (w := const(matmul.operands[1])) is None:
        return None
    widen = matmul.operands[0].owner  # other matmuls may read it too (CSE)
    if not isinstance(widen, graph.CastOp) or w.ndim != 2 or w.dtype != np.int32:
        return None
    x_q = widen.operands[0]
    if len(x_q.type.get_shape()) < 2:
        return None
    if x_q.type.element_type not in (dtypes.i8, dtypes.ui8):
        return None
    return lambda: ([], x_q), w, bias, x_q.type.element_type == dtypes.i8


def conv_input(conv: graph.Conv2dOp) -> tuple[SSAValue, int, list[int] | None] | None:
    """(x_q, z_x, the transpose's perm) of the conv's input sub?(cast(x_q) to i32,
    z_x), the cast and a transpose of x in either order; None unless x_q is 8-bit
    and z_x in its range."""
    value, z_x, perm = conv.input, None, None
    while not isinstance(cast := value.owner, graph.CastOp):
        if isinstance(op := value.owner, graph.TransposeOp) and perm is None:
            value, perm = op.operands[0], list(op.attr("perm"))
        elif isinstance(op, graph.SubOp) and z_x is None:
            z = const(op.operands[1])
            if z is None or z.size != 1:
                return None
            value, z_x = op.operands[0], int(z.reshape(-1)[0])
        else:
            return None
    x_q = cast.operands[0]
    storage = x_q.type.element_type
    if cast.result.type.element_type != dtypes.i32:
        return None
    if storage not in (dtypes.i8, dtypes.ui8):
        return None
    lo, hi = q.storage_range(storage)
    z_x = z_x or 0
    return (x_q, z_x, perm) if lo <= z_x <= hi else None


def _conv_rows(acc: SSAValue) -> Rows | None:
    """conv2d{nhwc, group 1}(sub?(cast(x_q) to i32, z_x), w, bias), the cast and
    a transpose of x in either order: the rows are x_q (transposed in 8 bits),
    padded with z_x (the real zero), through im2col unless the conv is 1×1 with
    stride 1; w [O, KH, KW, C] → [KH·KW·C, O]; z_x folds into the bias."""
    conv = single(acc, graph.Conv2dOp)
    if conv is None or conv.attr("layout") != "nhwc" or conv.attr("group") != 1:
        return None
    w, bias = const(conv.weight), const(conv.bias)
    if w is None or bias is None or w.dtype != np.int32 or bias.dtype != np.int32:
        return None
    # the input side stays as it is (other convs may read it): x_q is read
    # before the cast, the transpose redone on it, the sub folded into the bias
    found = conv_input(conv)
    if found is None:
        return None
    x_q, z_x, perm = found
    storage = x_q.type.element_type
    o, kh, kw, c = w.shape
    pads = list(conv.attr("pads"))
    strides, dilations = list(conv.attr("strides")), list(conv.attr("dilations"))

    def prep() -> tuple[list[Operation], SSAValue]:
        ops: list[Operation] = []
        rows = x_q
        if perm is not None:
            ops.append(graph.TransposeOp.build([rows], perm=perm))
            rows = ops[-1].results[0]
        if any(pads):
            top, left, bottom, right = pads
            fill = graph.ConstantOp.from_array(np.array(z_x, dtypes.to_numpy(storage)))
            ops.append(fill)
            ops.append(graph.PadOp.build(
                [rows, fill.results[0]], pads=[0, top, left, 0, 0, bottom, right, 0],
                mode="constant",
            ))  # fmt: skip
            rows = ops[-1].results[0]
        if (kh, kw) != (1, 1) or strides != [1, 1]:
            ops.append(Im2ColOp.build(
                [rows], kernel_shape=[kh, kw], strides=strides, dilations=dilations
            ))  # fmt: skip
            rows = ops[-1].results[0]
        return ops, rows

    w2d = np.ascontiguousarray(w.reshape(o, kh * kw * c).T)
    bias = bias.astype(np.int64) - z_x * w2d.astype(np.int64).sum(axis=0)
    if np.abs(bias).max(initial=0) > np.iinfo(np.int32).max:
        return None
    return prep, w2d, bias.astype(np.int32), storage == dtypes.i8
