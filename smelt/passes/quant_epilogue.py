"""The float chain after an integer depthwise conv or GEMM, fused into its kernel
(#32):

    %y = quant.dwconv(...) or quant.qgemm(...)          (its only use: %d; a
                                                        qgemm's epilogue the
                                                        plain requantize)
    %d = quant.dequantize(%y, s, z)                     s, z scalar constants
    %e… = graph.add / sub / mul / div / min / max / relu / clip …
                                                        f32, the result's shape;
          operands: %d, the chain's values, constants (scalar or one per
          channel), tensors of the result's shape (a residual; a dequantize of
          an 8-bit one is read as the 8-bit tensor and dequantized in the body)
    %q = quant.quantize(%e_last, s', z')                s', z' scalar constants
  becomes
    %q = quant.dwconv(..., post…) {epilogue = "deq y s z; …; quant v s' z' T"}
      (a qgemm likewise, its per-channel operands padded to the panel width:
       the chain after a pointwise conv or a matmul runs in its store step)

(`dialects/quant_epilogue.py`): the dequantize → BatchNorm's affine → HardSwish
(→ + residual) → QuantizeLinear of a QDQ block (BatchNorm stays between a Q/DQ
pair when the quantizer put one after the conv, so graph-fold-batchnorm cannot
fold it; each rounding is kept, so the result is the unfused graph's, bit for
bit) runs in the conv's loop nest instead of an elementwise kernel of its own.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint

from smelt.dialects import dtypes, graph, locations
from smelt.dialects import quant as q
from smelt.dialects import quant_epilogue as epi
from smelt.dialects.graph_base import shape_of
from smelt.dialects.quant_conv import DwConvOp
from smelt.dialects.quant_gemm import QGemmOp
from smelt.passes.quant_gemm_chain import const

STEPS = {
    graph.AddOp: "add",
    graph.SubOp: "sub",
    graph.MulOp: "mul",
    graph.DivOp: "div",
    graph.MinOp: "min",
    graph.MaxOp: "max",
}
UNARY = (graph.ReluOp, graph.ClipOp)  # max(x, 0); max(x, lo) then min(·, hi)
MAX_STEPS = 32
_TYPES = {dtypes.ui8: "ui8", dtypes.i8: "i8"}


def _scalar(value: SSAValue) -> float | None:
    c = const(value)
    if c is None or c.size != 1 or c.dtype != np.float32:
        return None
    return float(c.reshape(-1)[0])


def _zero(value: SSAValue) -> int | None:
    c = const(value)
    if c is None or c.size != 1 or c.dtype not in (np.uint8, np.int8):
        return None
    return int(c.reshape(-1)[0])


def _chain(
    start: SSAValue, float_end: bool = False
) -> tuple[list[Operation], q.QuantizeOp | SSAValue] | None:
    """The elementwise ops reached from `start` up to the one quantize that ends
    them, in block order; None when a value leaves the chain elsewhere. With
    `float_end` (a qgemm: it can write f32), a chain without a quantize may end
    in one value read outside it, its last op's (then that value for the end)."""
    shape = shape_of(start.type)
    ops: list[Operation] = []
    end: q.QuantizeOp | None = None
    exits: set[SSAValue] = set()
    inside, todo = {start}, [start]
    while todo:
        value = todo.pop()
        for use in list(value.uses):
            user = use.operation
            if user in ops or user is end:
                continue
            if float_end and not isinstance(user, q.QuantizeOp) and (
                type(user) not in (*STEPS, *UNARY)
            ):
                exits.add(value)  # read outside the chain
                continue
            if isinstance(user, q.QuantizeOp) and use.index == 0:
                if end is not None:
                    return None
                end = user
            elif type(user) in (*STEPS, *UNARY) and len(ops) < MAX_STEPS:
                out = user.results[0]
                if out.type.element_type != dtypes.f32 or shape_of(out.type) != shape:
                    return None
                ops.append(user)
                inside.add(out)
                todo.append(out)
            else:
                return None
    block = start.owner.parent_block()
    order = {op: i for i, op in enumerate(block.ops)} if block else {}
    if end is None:  # a float end: one value, the last op's, read outside
        if len(exits) != 1 or not ops or any(op not in order for op in ops):
            return None
        ops.sort(key=order.__getitem__)
        (out,) = exits
        return (ops, out) if out is ops[-1].results[0] else None
    if exits or any(op not in order for op in [*ops, end]):
        return None
    ops.sort(key=order.__getitem__)
    return ops, end


def _fusable(kernel: Operation) -> bool:
    if isinstance(kernel, DwConvOp):
        return not kernel.attrs().get("epilogue")
    if isinstance(kernel, QGemmOp):
        return str(kernel.attrs().get("epilogue", "requantize")) == "requantize"
    return False


def _rebuild(kernel: Operation, post: list[SSAValue], program: str) -> Operation:
    a = kernel.attrs()
    if isinstance(kernel, QGemmOp):
        a["epilogue"] = program
        return QGemmOp.build([*kernel.operands[:5], *post], **a)
    return DwConvOp.build(
        [*kernel.operands[:5], *post],
        kernel_shape=list(a["kernel_shape"]), strides=list(a["strides"]),
        dilations=list(a["dilations"]), relu=int(a.get("relu", 0)),
        epilogue=program,
    )  # fmt: skip


class FuseDwEpilogue(RewritePattern):
    """The chain of the module docstring → one quant.dwconv or quant.qgemm with
    an epilogue program."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, q.DequantizeOp):
            return
        dw = op.operands[0].owner
        if not _fusable(dw):
            return
        assert isinstance(dw, DwConvOp | QGemmOp)
        if not dw.result.has_one_use():
            return
        s, z = _scalar(op.operands[1]), _zero(op.operands[2])
        if s is None or z is None or op.result.type.element_type != dtypes.f32:
            return
        found = _chain(op.result, float_end=isinstance(dw, QGemmOp))
        if found is None:
            return
        ops, end = found
        if isinstance(end, q.QuantizeOp):
            s_out, z_out = _scalar(end.operands[1]), _zero(end.operands[2])
            storage = _TYPES.get(end.result.type.element_type)
            if s_out is None or z_out is None or storage is None:
                return
        out_shape = shape_of(dw.result.type)
        c = out_shape[-1]
        # a qgemm reads whole vectors of a per-column operand: padded to N_p
        width = shape_of(dw.bias.type)[0] if isinstance(dw, QGemmOp) else c
        names = {op.result: "v0"}
        steps = [f"deq y {epi.literal(s)} {z}"]
        post: list[SSAValue] = []
        new_consts: list[Operation] = []

        def operand(value: SSAValue) -> str | None:
            if value in names:
                return names[value]
            data = const(value)
            if data is not None:
                if data.dtype != np.float32:
                    return None
                if data.size == 1:
                    return epi.literal(float(data.reshape(-1)[0]))
                if data.shape[-1] != c or data.size != c:
                    return None
                column = np.zeros(width, np.float32)
                column[:c] = data.reshape(c)
                made = graph.ConstantOp.from_array(column)
                new_consts.append(made)
                post.append(made.results[0])
                return f"p{len(post) - 1}"
            if shape_of(value.type) != out_shape:
                return None
            deq = value.owner
            if isinstance(deq, q.DequantizeOp) and (
                deq.operands[0].type.element_type in _TYPES
            ):
                rs, rz = _scalar(deq.operands[1]), _zero(deq.operands[2])
                if rs is not None and rz is not None:
                    post.append(deq.operands[0])
                    steps.append(f"deq p{len(post) - 1} {epi.literal(rs)} {rz}")
                    names[value] = f"v{len(steps) - 1}"
                    return names[value]
            if value.type.element_type != dtypes.f32:
                return None
            post.append(value)
            names[value] = f"p{len(post) - 1}"
            return names[value]

        for step_op in ops:
            args = [operand(v) for v in step_op.operands]
            if any(a is None for a in args):
                return
            if isinstance(step_op, graph.ReluOp):
                steps.append(f"max {args[0]} {epi.literal(0.0)}")
            elif isinstance(step_op, graph.ClipOp):
                if not all(a.startswith("#") for a in args[1:]):
                    return  # bounds: scalar constants
                steps.append(f"max {args[0]} {args[1]}")
                steps.append(f"min v{len(steps) - 1} {args[2]}")
            else:
                steps.append(f"{STEPS[type(step_op)]} {args[0]} {args[1]}")
            names[step_op.results[0]] = f"v{len(steps) - 1}"
        if isinstance(end, q.QuantizeOp):
            last = names[end.operands[0]]
            steps.append(f"quant {last} {epi.literal(s_out)} {z_out} {storage}")
            replaced: Operation = end
        else:  # the program's last value, in f32
            replaced = ops.pop()
        new = _rebuild(dw, post, "; ".join(steps))
        locations.inherit([*new_consts, new], dw, op, *ops, replaced)
        rewriter.insert([*new_consts, new], InsertPoint.before(replaced))
        rewriter.replace(replaced, [], [new.results[0]])
        for dead in [*reversed(ops), op, dw]:
            rewriter.erase(dead)
