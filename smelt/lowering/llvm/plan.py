"""Where @main's buffers live: arena offsets of `loop.alloc`, the weight blob."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, UnitAttr
from xdsl.ir import SSAValue

from smelt.dialects import locations
from smelt.dialects.loop import AllocOp, ConstantOp
from smelt.errors import ResourceLimit, SmeltError
from smelt.lowering.llvm.program import ALIGN, aligned_empty
from smelt.lowering.llvm.types import buffer_info
from smelt.targets.memory import describe_limit, gib, machine_memory, resolve_limit

__all__ = ["MemoryPlan", "check_memory", "machine_memory", "plan_memory"]

RELEASE_ELEMENTS = 4096
"""Constants above this many elements leave the IR when `plan_memory(release=True)`."""


def align_up(n: int, alignment: int = ALIGN) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of @main's buffers in the arena and in the weight blob."""

    arena_bytes: int
    weights: np.ndarray = field(repr=False)
    arena_offsets: dict[SSAValue, int] = field(repr=False)
    weight_offsets: dict[SSAValue, int] = field(repr=False)

    @property
    def weight_bytes(self) -> int:
        return self.weights.nbytes if self.weight_offsets else 0


RELEASED = "smelt.released"
"""Marks a loop.constant whose bytes went to a weight blob and left the IR."""


def plan_memory(
    main: func.FuncOp, release: bool = False, memory_limit: int = 0
) -> MemoryPlan:
    """Honors `loop.alloc` offsets set by buffer-plan; places the others after them;
    refuses a model that needs more than `memory_limit` bytes (0: the machine's
    memory) before the weight blob is allocated (`check_memory`).

    `release` (the module is consumed by this compile) drops each large
    constant's bytes from the IR once they are copied into the weight blob, so
    that the weights are never held twice: without it, a compile's peak memory
    is the IR's copy plus the blob."""
    allocs = [op for op in main.body.walk() if isinstance(op, AllocOp)]
    constants = [op for op in main.body.walk() if isinstance(op, ConstantOp)]

    arena_offsets: dict[SSAValue, int] = {}
    end = 0
    for op in allocs:
        if op.offset is not None:
            offset = op.offset.data
            if offset < 0 or offset % buffer_info(op.result.type).element_bytes:
                raise ResourceLimit(
                    f"loop.alloc offset {offset} is negative or misaligned"
                )
            arena_offsets[op.result] = offset
            end = max(end, offset + buffer_info(op.result.type).nbytes)
    for op in allocs:
        if op.offset is None:
            end = align_up(end)
            arena_offsets[op.result] = end
            end += buffer_info(op.result.type).nbytes

    weight_offsets: dict[SSAValue, int] = {}
    total = 0
    for op in constants:
        total = align_up(total)
        weight_offsets[op.result] = total
        total += buffer_info(op.result.type).nbytes
    check_memory(main, align_up(end), total, memory_limit)
    weights = aligned_empty(total)
    released = 0
    for op in constants:
        start = weight_offsets[op.result]
        weights[start : start + buffer_info(op.result.type).nbytes] = _constant_bytes(
            op
        )
        if release and len(op.value) > RELEASE_ELEMENTS:
            op.properties["value"] = DenseIntOrFPElementsAttr(
                op.value.type, BytesAttr(b"")
            )
            op.attributes[RELEASED] = UnitAttr()
            released += buffer_info(op.result.type).nbytes
            if released > TRIM_BYTES:
                released = return_freed_memory()
    if released:
        return_freed_memory()
    return MemoryPlan(align_up(end), weights, arena_offsets, weight_offsets)


TRIM_BYTES = 64 << 20


def return_freed_memory() -> int:
    """Gives the C heap's free pages back to the OS (glibc's malloc_trim; nothing
    elsewhere) and returns 0. Freed weights below glibc's mmap threshold (up to
    32 MiB) stay in the heap otherwise, and a compile's resident memory would
    hold them beside the weight blob that replaced them."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return 0


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def check_memory(main: func.FuncOp, arena: int, weights: int, limit: int = 0) -> None:
    """Refuses a model whose arena, weights and inputs / outputs together exceed
    `limit` bytes (0: the machine's memory) before anything is allocated, naming
    its largest buffers (a model of a 100 GB tensor died at allocation before)."""
    io = sum(buffer_info(a.type).nbytes for a in main.body.block.args)
    need = arena + weights + io
    allowed = resolve_limit(limit)
    if not allowed or need <= allowed:
        return
    names = [
        f"'{a.data}' "
        for key in ("smelt.input_names", "smelt.output_names")
        for a in getattr(main.attributes.get(key), "data", ())
    ]
    args = list(main.body.block.args)
    if len(names) != len(args):
        names = [""] * len(args)
    sizes = [
        (buffer_info(v.type).nbytes, f"{name}{v.type}")
        for name, v in zip(names, args)
    ] + [
        (buffer_info(op.result.type).nbytes, _temporary(op))
        for op in main.body.walk()
        if isinstance(op, AllocOp | ConstantOp)
    ]
    top = sorted(sizes, key=lambda s: s[0])[-3:][::-1]
    largest = ", ".join(f"{t} ({gib(n)})" for n, t in top)
    raise ResourceLimit(
        f"the model needs {gib(need)} (arena {gib(arena)}, weights {gib(weights)}, "
        f"inputs and outputs {gib(io)}), more than {describe_limit(limit)}; its "
        f"largest buffers: {largest}; use smaller input shapes"
    )


def _temporary(op: AllocOp | ConstantOp) -> str:
    """How a message names a buffer of @main: its type and its ONNX nodes."""
    where = locations.describe(op)
    return f"a temporary {op.result.type}" + (f" of {where}" if where else "")


def _constant_bytes(op: ConstantOp) -> np.ndarray:
    """The bytes of a loop.constant, as a view of the attribute (no copy per element)."""
    if RELEASED in op.attributes:
        raise SmeltError(
            "this loop.constant's bytes went to the weight blob of an earlier "
            "compile of the same module: compile again from the model"
        )
    info = buffer_info(op.result.type)
    data = np.frombuffer(op.value.data.data, dtype=np.uint8)
    if data.size == info.nbytes:
        return data
    if data.size == info.element_bytes:  # a splat stored once
        return np.tile(data, info.numel)
    raise ResourceLimit(
        f"loop.constant holds {data.size} bytes but {op.result.type} needs {info.nbytes}"
    )
