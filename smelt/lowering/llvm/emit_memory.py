"""Per-op emitters of the llvm target for memory ops inside kernels.

Loads and stores address `base + Σ index·stride` (`KernelEmitter.address`); i1 is
stored as one byte (load i8 + trunc, zext + store i8).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.ir import Operation

from smelt.lowering.llvm.emit_kernel import OpEmitter, op_table, result_type
from smelt.lowering.llvm.program import STATUS_GLOBAL
from smelt.lowering.llvm.types import I32, buffer_info, constant, memory_type

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter


def emit_load(em: KernelEmitter, op: Operation) -> None:
    buffer, *indices = op.operands
    info = buffer_info(buffer.type)
    value = em.builder.load(
        em.address(buffer, list(indices)),
        typ=memory_type(info.element),
        align=info.element_bytes,
    )
    ty = result_type(op)
    if value.type != ty:  # i1 is stored as i8
        value = em.builder.trunc(value, ty)
    em.bind(op.results[0], value)


def emit_store(em: KernelEmitter, op: Operation) -> None:
    stored, buffer, *indices = op.operands
    info = buffer_info(buffer.type)
    value = em.get(stored)
    mem = memory_type(info.element)
    if value.type != mem:
        value = em.builder.zext(value, mem)
    em.builder.store(value, em.address(buffer, list(indices)), align=info.element_bytes)


def emit_alloca(em: KernelEmitter, op: Operation) -> None:
    info = buffer_info(op.results[0].type)
    em.bind(op.results[0], em.alloca(info))


def emit_view(em: KernelEmitter, op: Operation) -> None:
    em.bind(op.results[0], em.get(op.operands[0]))


def emit_check(em: KernelEmitter, op: Operation) -> None:
    """`loop.check %ok`: where %ok is false, the check's code goes to the status
    global (an atomic store: threads may fail checks at once; any code will do)."""
    b = em.builder
    ok = em.get(op.operands[0])
    status = em.module.get_global(STATUS_GLOBAL)
    with b.if_then(b.not_(ok), likely=False):
        b.store_atomic(constant(I32, em.checks[op]), status, "monotonic", 4)


MEMORY_EMITTERS: dict[str, OpEmitter] = op_table(
    [
        (emit_check, ["loop.check"]),
        (emit_load, ["memref.load"]),
        (emit_store, ["memref.store"]),
        (emit_alloca, ["memref.alloca"]),
        (emit_view, ["loop.view"]),
    ]
)
"""Op name → emitter for memref ops (and loop.view) inside kernels."""
