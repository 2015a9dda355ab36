"""bf16 matmul / gemm → a call of the AVX512-BF16 GEMM (llvm/emit_bf16_gemm.py).

When the module's `#target.cpu` has avx512bf16, a bf16 `graph.matmul` of a rank
>= 2 A by a 2-D B (or by a B with A's batch dims), or a bf16 `graph.gemm` without
trans_a, gets the kernel

    loop.for %u = 0 to U parallel {                 // f32 C = A @ B, vdpbf16ps,
      func.call @smelt.bf16_gemm(%a, %bp, %scratch, %u)  // a band of C per %u
    }
    loop.for ...: write(epilogue(scratch[g, m, n]))  // bias, gelu, cast, ...

`%bp` is B packed in pairs along k (`bf16_gemm.pack_b`): a new `loop.constant`
packed at compile time for a constant B, else the output of a `bf16_pack` kernel
run before; `%scratch` an f32 [G, M, Np] buffer of @main; A is read in place
(the GEMM handles every M, K tail; N pads to Np in bp and scratch). Anything
else — another target, f32 operands, a fused prologue on A or B, broadcast
batches — lowers through lower_matmul.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IntegerAttr, MemRefType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph, loop
from smelt.errors import SmeltError
from smelt.lowering import lower_matmul
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.llvm.bf16_gemm import NR, pack_b
from smelt.lowering.llvm.emit_bf16_gemm import CALLEE, units
from smelt.lowering.loop_builder import Index, KernelBuilder
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import broadcast_index
from smelt.lowering.scalar_ops import Arith, memref_type
from smelt.targets.bf16_path import gemm_plan as _plan
from smelt.targets.bf16_path import target_has_bf16 as _target_has_bf16


def _bf16(op: Operation) -> bool:
    values = [*op.operands[:2], op.results[0]]
    return all(graph.element_type_of(v) == dtypes.bf16 for v in values)


def prepare(
    ctx: LoweringContext, op: Operation, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """[packed B, f32 scratch] when the fast path applies, else what
    `lower_matmul.prepare` gives the generic lowering."""
    return _prepare_fast(ctx, op, operand_buffer) or lower_matmul.prepare(
        ctx, op, operand_buffer
    )


def _prepare_fast(
    ctx: LoweringContext, op: Operation, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    plan = _plan(op)
    if plan is None or not _bf16(op) or not _target_has_bf16(op):
        return []
    if 0 in (*graph.shape_of(op.lhs), *graph.shape_of(op.rhs)):
        return []  # nothing to multiply: the generic lowering writes the zeros
    try:
        operand_buffer(0)
        w = operand_buffer(1)
    except SmeltError:  # a fused prologue computes A or B: the generic lowering
        return []
    trans_b = isinstance(op, graph.GemmOp) and bool(op.attr("trans_b"))
    if isinstance(w.owner, loop.ConstantOp):
        weight = graph.dense_to_array(w.owner.value)
        weight = weight.T if trans_b else weight
        if weight.ndim == 2:
            packed = pack_b(weight)
        else:  # one packed B per GEMM of the batch
            mats = weight.reshape(-1, *weight.shape[-2:])
            packed = np.stack([pack_b(b) for b in mats])
        value = graph.array_to_dense(packed)
        memref = memref_type(value.type)  # type: ignore[arg-type]
        wp = ctx.emit(loop.ConstantOp(value, memref))
    elif isinstance(op, graph.MatMulOp):
        wp = _pack_at_run_time(ctx, w)
    else:
        return []
    g, m = plan
    np_ = _shape(wp)[-4] * NR
    return [wp, ctx.alloc(MemRefType(dtypes.f32, [g, m, np_]))]


def _pack_at_run_time(ctx: LoweringContext, w: SSAValue) -> SSAValue:
    """A kernel packing bf16 B[..., K, N] into Bp[G?, Np / 32, Kh, 32, 2]
    (`pack_b`'s layout; 4-D for a 2-D B), zeros past K and N."""
    shape = _shape(w)
    kk, n = shape[-2:]
    g = int(np.prod(shape[:-2]))
    kh, panels = (kk + 1) // 2, -(-n // NR)
    packed_shape = ([g] if len(shape) > 2 else []) + [panels, kh, NR, 2]
    packed = ctx.alloc(MemRefType(dtypes.bf16, packed_shape))
    k = ctx.kernel("bf16_pack", [w], [packed])
    zero = k.constant(0.0, dtypes.bf16)
    with k.nest(packed_shape) as ivs:
        *batch, q, p, c, t = ivs
        row = k.affine([(p, 2), (t, 1)])
        j = k.affine([(q, NR), (c, 1)])
        ok = k.op(arith.AndIOp, k.cmp_index(row, "slt", kk), k.cmp_index(j, "slt", n))
        src = [*_unflatten(k, batch, shape[:-2]), k.clamp(row, 0, kk - 1),
               k.clamp(j, 0, n - 1)]  # fmt: skip
        value = k.op(arith.SelectOp, ok, k.load(k.inputs[0], src), zero)
        k.store(value, k.outputs[0], ivs)
    return packed


def _unflatten(k: KernelBuilder, batch: list[Index], dims: list[int]) -> list[Index]:
    """B's batch indices from the packed buffer's one flat batch index."""
    if not batch:
        return []
    (flat,) = batch
    out, stride = [], int(np.prod(dims))
    for d in dims:
        stride //= d
        q = k.op(arith.DivUIOp, flat, k.index(stride)) if stride > 1 else flat
        out.append(k.op(arith.RemUIOp, q, k.index(d)) if d > 1 else k.index(0))
    return out


def _shape(buffer: SSAValue) -> list[int]:
    t = buffer.type
    assert isinstance(t, MemRefType)
    return list(t.get_shape())


def _emit_call(io: KernelIO) -> SSAValue:
    """A parallel loop over the GEMM's units (bands of columns), one call each."""
    a = io.operand_buffer(0)
    wp, scratch = io.extra
    g, m, np_ = _shape(scratch)
    count, chunk = units(g, np_)
    kk = _shape(a)[-1]
    with io.k.loop(count) as u:
        call = func.CallOp(CALLEE, [a, wp, scratch, u], [])
        # vector ops per call: 2·MR dp per MR rows, k pair and panel
        call.attributes[loop.WORK_ATTR] = IntegerAttr(m * chunk * (kk + 1), 64)
        io.k.emit(call)
    return scratch


def emit_matmul(io: KernelIO, op: graph.MatMulOp) -> None:
    if len(io.extra) != 2:
        lower_matmul.emit_matmul(io, op)
        return
    scratch = _emit_call(io)
    out = graph.shape_of(op.result)
    k = io.k
    shared = len(graph.shape_of(op.rhs)) == 2
    with k.nest(list(out)) as ivs:
        if shared:  # one GEMM: the leading dims flatten into M
            index = [k.index(0), k.affine(_row_terms(ivs[:-1], out[:-1])), ivs[-1]]
        else:
            index = [k.affine(_row_terms(ivs[:-2], out[:-2])), *ivs[-2:]]
        io.write(0, k.load_value(scratch, index), ivs)


def _row_terms(ivs: list[Index], dims: list[int]) -> list[tuple[Index, int]]:
    """Row-major flattening of ivs over dims."""
    terms, stride = [], 1
    for iv, d in reversed(list(zip(ivs, dims))):
        terms.append((iv, stride))
        stride *= d
    return terms[::-1]


def emit_gemm(io: KernelIO, op: graph.GemmOp) -> None:
    if len(io.extra) != 2:
        lower_matmul.emit_gemm(io, op)
        return
    scratch = _emit_call(io)
    k = io.k
    a = Arith(k, graph.element_type_of(op.lhs))
    m, n = graph.shape_of(op.result)
    alpha, beta = op.attr("alpha"), op.attr("beta")
    c_shape = graph.shape_of(op.addend)
    with k.nest([m, n]) as (i, j):
        acc = k.load_value(scratch, [k.index(0), i, j])
        if alpha != 1.0:
            acc = a.mul(acc, a.const(alpha))
        if beta != 0.0:
            term = io.read(2, broadcast_index(k, [i, j], c_shape))
            acc = a.add(acc, term if beta == 1.0 else a.mul(term, a.const(beta)))
        io.write(0, acc, [i, j])


ANCHORS: dict[type[Operation], Anchor] = {
    graph.MatMulOp: Anchor(emit_matmul, prepare),  # type: ignore[arg-type]
    graph.GemmOp: Anchor(emit_gemm, prepare),  # type: ignore[arg-type]
}
"""Overrides lower_matmul.ANCHORS: the fast path where `prepare` finds one."""
