"""Lowerings of contractions: matmul (numpy semantics) and gemm."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph, loop, target
from smelt.lowering.kernel_io import Anchor, KernelIO, writes_own_type
from smelt.lowering.loop_builder import (
    BATCH_ROLE,
    MATMUL_PATTERN,
    Index,
    mark_pattern,
    tag_loops,
)
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import broadcast_index
from smelt.lowering.scalar_ops import Arith, memref_type
from smelt.targets import cpu as schedules
from smelt.targets.cpu_spec import of_module

# (batch ivs, row or column iv, contraction iv) -> buffer indices
OperandIndex = Callable[[list[Index], Index, Index], list[Index]]
Epilogue = Callable[[SSAValue, list[Index], Index, Index], SSAValue]


@dataclass(frozen=True)
class Contraction:
    """out[b, m, n] = epilogue(sum_k lhs[b, m, k] * rhs[b, k, n]) over static sizes."""

    batch: tuple[int, ...]
    m: int
    n: int
    k: int
    lhs: OperandIndex  # (batch, m, k)
    rhs: OperandIndex  # (batch, n, k)
    out: OperandIndex  # (batch, m, n)
    rhs_contiguous_in_k: bool  # rhs[.., k] is unit stride: use the dot-product form
    streamed: bool = False  # the dot form on a weight too big to pack (`_streamed`)


def emit_contraction(
    io: KernelIO, a: Arith, c: Contraction, finish: Epilogue | None = None
) -> None:
    """Dot form (scalar iter_arg over k innermost) when n is 1, `c.streamed`, the
    type is a 16-bit float or no output can hold partial sums (nor a scratch from
    `prepare`, the one extra input); else the axpy form (a zero fill, an
    m-k-n band accumulating in the output with n innermost, then the epilogue),
    which LLVM vectorizes along n and `loop-schedule` register-blocks. `finish(acc, b, m, n)` maps a finished sum (gemm's alpha,
    beta * C) before the fused epilogue sees it."""
    k = io.k
    finishes = finish is not None
    finish = finish or (lambda v, _b, _m, _n: v)
    scratch = io.result_buffer(0)
    if scratch is None and len(io.extra) == 1:  # from `prepare`
        scratch = io.extra[0]
    if c.n == 1 or c.streamed or a.type != a.storage or scratch is None:
        with k.nest([*c.batch, c.m, c.n]) as ivs:
            tag_loops(ivs, [BATCH_ROLE] * len(c.batch) + ["m", "n"])
            b, m, n = ivs[:-2], ivs[-2], ivs[-1]

            def step(kk: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
                x = io.read(0, c.lhs(b, m, kk[0]))
                y = io.read(1, c.rhs(b, n, kk[0]))
                return [a.add(acc[0], a.mul(x, y))]

            (total,) = k.reduce([c.k], [a.zero()], step)
            tag_loops([total.owner.iv], ["k"])
            if c.streamed:  # independent FMA chains keep up with the stream
                total.owner.attributes[loop.ACCUMULATORS_ATTR] = IntegerAttr(
                    schedules.STREAM_ACCUMULATORS, 64
                )
            io.write(0, finish(total, b, m, n), c.out(b, m, n))
        return
    # Three nests (fill, the m-k-n band accumulating in the output, epilogue), so
    # that the band is a perfect nest the loop scheduling passes can tile, reorder
    # and register-block (`loop.role` names its loops).
    roles = [BATCH_ROLE] * len(c.batch)
    mark_pattern(k, MATMUL_PATTERN)
    with k.nest([*c.batch, c.m, c.n]) as ivs:
        tag_loops(ivs, [*roles, "m", "n"])
        b, m, n = ivs[:-2], ivs[-2], ivs[-1]
        k.store_value(a.zero(), scratch, c.out(b, m, n))
    with k.nest([*c.batch, c.m]) as ivs:
        tag_loops(ivs, [*roles, "m"])
        b, m = ivs[:-1], ivs[-1]
        with k.loop(c.k, loop.REDUCTION) as kk, k.loop(c.n) as n:
            tag_loops([kk, n], ["k", "n"])
            x = io.read(0, c.lhs(b, m, kk))
            y = io.read(1, c.rhs(b, n, kk))
            acc = k.load_value(scratch, c.out(b, m, n))
            k.store_value(a.add(acc, a.mul(x, y)), scratch, c.out(b, m, n))
    if io.has_epilogue or finishes:
        with k.nest([*c.batch, c.m, c.n]) as ivs:
            tag_loops(ivs, [*roles, "m", "n"])
            b, m, n = ivs[:-2], ivs[-2], ivs[-1]
            value = k.load_value(scratch, c.out(b, m, n))
            io.write(0, finish(value, b, m, n), c.out(b, m, n))


def emit_matmul(io: KernelIO, op: graph.MatMulOp) -> None:
    """numpy matmul: rank-1 operands gain (then lose) a unit dim, batches broadcast."""
    k = io.k
    a = Arith(k, graph.element_type_of(op.lhs))
    ls, rs = graph.shape_of(op.lhs), graph.shape_of(op.rhs)
    l2 = (1, *ls) if len(ls) == 1 else ls
    r2 = (*rs, 1) if len(rs) == 1 else rs
    batch = graph.broadcast_shapes(l2[:-2], r2[:-2])

    def lhs(b: list[Index], m: Index, kk: Index) -> list[Index]:
        return [kk] if len(ls) == 1 else [*broadcast_index(k, b, l2[:-2]), m, kk]

    def rhs(b: list[Index], n: Index, kk: Index) -> list[Index]:
        return [kk] if len(rs) == 1 else [*broadcast_index(k, b, r2[:-2]), kk, n]

    def out(b: list[Index], m: Index, n: Index) -> list[Index]:
        return [*b, *([m] if len(ls) > 1 else []), *([n] if len(rs) > 1 else [])]

    c = Contraction(batch, l2[-2], r2[-1], l2[-1], lhs, rhs, out, len(rs) == 1)
    emit_contraction(io, a, c)


def _cpu_module(op: Operation) -> ModuleOp | None:
    """The module of `op` when it is compiled for a CPU (`#target.cpu`), else None."""
    module = op.get_toplevel_object()
    if isinstance(module, ModuleOp) and target.cpu_target(module) is not None:
        return module
    return None


def _streamed(op: Operation, m: int, n: int, k: int) -> bool:
    """A CPU target's single-row contraction over a weight (n × k, contiguous in
    k) that `schedules.streams_weight` reads in the dot form, unpacked."""
    module = _cpu_module(op)
    if module is None:
        return False
    size = n * k * dtypes.byte_size(graph.element_type_of(op.rhs))
    return schedules.streams_weight(of_module(module), m, size)


def emit_gemm(io: KernelIO, op: graph.GemmOp) -> None:
    """alpha * A' @ B' (+ beta * C unless beta = 0), as the ONNX reference orders it."""
    a = Arith(io.k, graph.element_type_of(op.lhs))
    trans_a, trans_b = bool(op.attr("trans_a")), bool(op.attr("trans_b"))
    m, kk = graph.shape_of(op.lhs)[::-1] if trans_a else graph.shape_of(op.lhs)
    n = graph.shape_of(op.result)[1]
    alpha, beta = op.attr("alpha"), op.attr("beta")
    c_shape = graph.shape_of(op.addend)

    def finish(acc: SSAValue, _b: list[Index], i: Index, j: Index) -> SSAValue:
        if alpha != 1.0:
            acc = a.mul(acc, a.const(alpha))
        if beta == 0.0:
            return acc
        term = io.read(2, broadcast_index(io.k, [i, j], c_shape))
        return a.add(acc, term if beta == 1.0 else a.mul(term, a.const(beta)))

    c = Contraction(
        (),
        m,
        n,
        kk,
        lambda _b, i, p: [p, i] if trans_a else [i, p],
        lambda _b, j, p: [j, p] if trans_b else [p, j],
        lambda _b, i, j: [i, j],
        trans_b,
        trans_b and _streamed(op, m, n, kk),
    )
    emit_contraction(io, a, c, finish)


def prepare(
    ctx: LoweringContext, op: Operation, _operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """[an f32 scratch of the result's shape] when `op` is a float matmul / gemm
    whose kernel writes no output of its own type (a fused epilogue casts, e.g.
    the quantize of a QDQ attention matmul): the axpy form can then accumulate
    in it instead of falling back to the dot form, which no schedule tiles.
    CPU targets only (`#target.cpu`): the triton target keeps the dot form."""
    if _cpu_module(op) is None:
        return []
    result = op.results[0]
    vector_rhs = isinstance(op, graph.MatMulOp) and len(graph.shape_of(op.rhs)) == 1
    if graph.element_type_of(result) != dtypes.f32 or vector_rhs:
        return []
    if graph.shape_of(result)[-1] == 1:
        return []  # n = 1: the dot form
    if writes_own_type(op):
        return []
    return [ctx.alloc(memref_type(result.type))]  # type: ignore[arg-type]


ANCHORS: dict[type[Operation], Anchor] = {
    graph.MatMulOp: Anchor(emit_matmul, prepare),  # type: ignore[arg-type]
    graph.GemmOp: Anchor(emit_gemm, prepare),  # type: ignore[arg-type]
}
