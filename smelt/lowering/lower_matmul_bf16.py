"""bf16 matmul / gemm with a constant weight → a call of the AVX512-BF16 GEMM.

When the module's `#target.cpu` has avx512bf16 and a bf16 `graph.matmul` (or a
`graph.gemm` without trans_a) has a compile-time-constant 2-D weight, its kernel is

    func.call @smelt.bf16_gemm(%a, %wp, %scratch)   // f32 C = A @ W, vdpbf16ps
    loop.for m, n: write(epilogue(scratch[m, n]))   // bias, gelu, cast, ...

`%wp` is the weight packed at compile time (`bf16_gemm.pack_b`, a new
`loop.constant`), `%scratch` an f32 [M, Np] buffer of @main; A is read in place
(the kernel handles every M, K tail). Anything else — another target, run-time
weights, f32 operands, a fused prologue on A — lowers through lower_matmul.py.
The llvm target defines the callee (llvm/emit_bf16_gemm.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph, loop, target
from smelt.errors import SmeltError
from smelt.lowering import lower_matmul
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.llvm.bf16_gemm import FEATURE, pack_b
from smelt.lowering.llvm.emit_bf16_gemm import CALLEE
from smelt.lowering.loop_builder import Index
from smelt.lowering.loop_nests import broadcast_index
from smelt.lowering.scalar_ops import Arith, memref_type
from smelt.targets.cpu_spec import CpuSpec


def has_fast_path(op: Operation) -> bool:
    """Whether `op` is a matmul / gemm this file can lower once its operands are
    bf16: a constant 2-D weight (graph.constant), no trans_a, a CPU target with
    avx512bf16. quant-cast asks it too."""
    if not _target_has_bf16(op):
        return False
    if isinstance(op, graph.MatMulOp):
        ok = len(graph.shape_of(op.lhs)) >= 2 and len(graph.shape_of(op.rhs)) == 2
    elif isinstance(op, graph.GemmOp):
        ok = not op.attr("trans_a")
    else:
        return False
    return ok and _constant(op.rhs) is not None


def _constant(value: SSAValue) -> np.ndarray | None:
    """The array of a graph.constant (through a graph.fused region's argument)."""
    owner = value.owner
    if isinstance(owner, graph.ConstantOp):
        return owner.to_array()
    return None


def _bf16(op: Operation) -> bool:
    values = [*op.operands[:2], op.results[0]]
    return all(graph.element_type_of(v) == dtypes.bf16 for v in values)


def prepare(
    ctx: object, op: Operation, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """[packed weight, f32 scratch] when the fast path applies, else []."""
    if not _bf16(op):
        return []
    try:
        a = operand_buffer(0)
        w = operand_buffer(1)
    except SmeltError:  # a fused prologue computes A or W: the generic lowering
        return []
    const = w.owner
    if not isinstance(const, loop.ConstantOp) or not _target_has_bf16(op):
        return []
    if isinstance(op, graph.GemmOp) and op.attr("trans_a"):
        return []
    weight = graph.dense_to_array(const.value)
    if weight.ndim != 2 or len(graph.shape_of(op.lhs)) < 2:
        return []
    if isinstance(op, graph.GemmOp) and op.attr("trans_b"):
        weight = weight.T
    packed = pack_b(weight)
    value = graph.ConstantOp.from_array(packed).value
    wp = ctx.emit(loop.ConstantOp(value, memref_type(value.type)))  # type: ignore[attr-defined]
    m = int(np.prod(_shape(a)[:-1]))
    scratch = ctx.alloc(MemRefType(dtypes.f32, [m, packed.shape[1]]))  # type: ignore[attr-defined]
    return [wp, scratch]


def _shape(buffer: SSAValue) -> list[int]:
    t = buffer.type
    assert isinstance(t, MemRefType)
    return list(t.get_shape())


def _target_has_bf16(op: Operation) -> bool:
    module = op.get_toplevel_object()
    attr = target.cpu_target(module) if isinstance(module, ModuleOp) else None
    return attr is not None and CpuSpec.from_attr(attr).has(FEATURE)


def _emit_call(io: KernelIO) -> SSAValue:
    a = io.operand_buffer(0)
    wp, scratch = io.extra
    io.k.emit(func.CallOp(CALLEE, [a, wp, scratch], []))
    return scratch


def emit_matmul(io: KernelIO, op: graph.MatMulOp) -> None:
    if len(io.extra) != 2:
        lower_matmul.emit_matmul(io, op)
        return
    scratch = _emit_call(io)
    out = graph.shape_of(op.result)
    k = io.k
    with k.nest(list(out)) as ivs:
        row = k.affine(_row_terms(ivs[:-1], out[:-1]))
        value = k.load_value(scratch, [row, ivs[-1]])
        io.write(0, value, ivs)


def _row_terms(ivs: list[Index], dims: list[int]) -> list[tuple[Index, int]]:
    """Row-major flattening of the leading ivs into the scratch row."""
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
        acc = k.load_value(scratch, [i, j])
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
