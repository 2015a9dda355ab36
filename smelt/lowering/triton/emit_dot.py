"""Contractions as Triton dot tiles: program ids -> (batch, M tile, N tile) with
grouped ordering for L2 reuse, a K loop feeding `tl.dot` (f16/bf16 operands as
loaded, f32 as tf32 unless the module says ieee (`FP32_DOT_ATTR`), i8 into i32),
then the initial value and the epilogue on the finished tile."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.dialects import memref
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation, SSAValue

from smelt.lowering.triton import schedule as sched
from smelt.lowering.triton.contraction import Contraction, dot_types
from smelt.lowering.triton.ops import dtype, is_zero_constant

if TYPE_CHECKING:
    from smelt.lowering.triton.emit import PhaseEmitter


def emit_dot(e: PhaseEmitter, c: Contraction) -> tuple[sched.Schedule, int]:
    (lhs, rhs, bits, precision) = dot_types(c)  # type: ignore[misc]
    if precision == "tf32" and not tf32_allowed(e.kernel):
        precision = "ieee"
    schedule = sched.dot(c.m_total, c.n_total, c.k_total, bits)
    w = e.w
    bm, bn = schedule.block("BLOCK_M"), schedule.block("BLOCK_N")
    num_m, num_n = -(-c.m_total // bm), -(-c.n_total // bn)
    w.line("pid = tl.program_id(0)")
    w.line(f"pid_b = pid // {num_m * num_n}")
    w.line(f"rest = pid % {num_m * num_n}")
    w.line(f"group = GROUP_M * {num_n}")
    w.line("first_m = (rest // group) * GROUP_M")
    w.line(f"group_size = tl.minimum({num_m} - first_m, GROUP_M)")
    w.line("pid_m = first_m + (rest % group) % group_size")
    w.line("pid_n = (rest % group) // group_size")
    w.line("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]")
    w.line("offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]")
    w.line(f"mask_m = offs_m < {c.m_total}")
    w.line(f"mask_n = offs_n < {c.n_total}")
    groups = (
        ("offs_m", c.m_dims, "M"),
        ("offs_n", c.n_dims, "N"),
        ("pid_b", c.batch_dims, ""),
    )
    for flat, dims, axis in groups:
        extents = [c.tile_extents[d] for d in dims]
        ivs = [c.tile_ivs[d] for d in dims]
        e.delinearize(flat, ivs, extents, frozenset({axis} if axis else ()))
    acc_dt = dtype(c.acc_type)
    w.line(f"acc = tl.zeros([BLOCK_M, BLOCK_N], {acc_dt})")
    with w.indented(f"for k0 in range(0, {c.k_total}, BLOCK_K):"), e.scope():
        for ns, shape in (("a", "[None, :]"), ("b", "[:, None]")):
            k = w.assign(f"k0 + tl.arange(0, BLOCK_K){shape}", "k")
            w.line(f"mask_k{ns} = {k} < {c.k_total}")
            e.delinearize(k, c.k_ivs, c.k_extents, frozenset({"K"}), ns.upper())
        with e.namespace("A"):
            a = _operand(e, lhs, frozenset({"M", "K"}))
        with e.namespace("B"):
            b = _operand(e, rhs, frozenset({"K", "N"}))
        a = f"tl.broadcast_to({a}, (BLOCK_M, BLOCK_K))"
        b = f"tl.broadcast_to({b}, (BLOCK_K, BLOCK_N))"
        extra = f', input_precision="{precision}"' if precision else ""
        if acc_dt == "tl.int32":  # Triton 3.6 checks acc against out_dtype (fp32)
            extra += ", out_dtype=tl.int32"
        w.line(f"acc = tl.dot({a}, {b}, acc{extra})")
    total = "acc"
    if c.init is not None and not is_zero_constant(c.init):
        total = w.assign(f"acc + {e.value(c.init)}", "acc")
    e.place(c.result, frozenset({"M", "N"}), total)
    e.statements(c.post)
    if c.final_store is not None:
        out, index = c.final_store
        ptr = f"{e.buffers[out]} + {e.offset(out, index)}"
        ptr = f"tl.broadcast_to({ptr}, (BLOCK_M, BLOCK_N))"
        w.line(f"tl.store({ptr}, {total}, mask=mask_m & mask_n)")
    grid = num_m * num_n * c.batch_total
    return schedule, grid


def _operand(e: PhaseEmitter, v: SSAValue, axes: frozenset[str]) -> str:
    name = e.value(v)
    owner = v.owner
    if isinstance(owner, memref.LoadOp):
        return name
    return f"tl.where({e.mask(axes)}, {name}, 0)"


FP32_DOT_ATTR = "triton.fp32_dot"
"""On the module: "ieee" makes f32 contractions `tl.dot(..., input_precision="ieee")`
(f32 products, as the reference computes them) instead of tf32, the default
(10-bit mantissas in the products; what cuBLAS and torch.compile run where TF32
is allowed)."""


def tf32_allowed(kernel: Operation) -> bool:
    module = kernel.get_toplevel_object()
    attr = (
        module.attributes.get(FP32_DOT_ATTR) if isinstance(module, ModuleOp) else None
    )
    return not (isinstance(attr, StringAttr) and attr.data == "ieee")
