"""Where @main's buffers live: arena offsets of `loop.alloc`, the weight segments
(a blob of the small constants, then each big weight where the IR held it). Both
backends read it: the llvm target and the Triton runner."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, UnitAttr
from xdsl.ir import SSAValue

from smelt.dialects import dtypes, locations, program
from smelt.dialects.loop import AllocOp, ConstantOp
from smelt.dialects.weights import ALIGN, WeightBytes, aligned_empty
from smelt.errors import ResourceLimit, SmeltError
from smelt.targets.memory import describe_limit, gib, machine_memory, resolve_limit

__all__ = ["MemoryPlan", "check_memory", "machine_memory", "plan_memory"]

RELEASE_ELEMENTS = 4096
"""Constants above this many elements leave the IR when `plan_memory(release=True)`."""


def align_up(n: int, alignment: int = ALIGN) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of @main's buffers in the arena and in the weight segments.

    `segments[0]` is the weight blob (`weight_offsets`: where each constant
    starts in it); a constant whose bytes are aligned memory of their own (a
    `WeightBytes`: every big weight) is, when the plan is made `in_place`,
    segment `external[value]`, read where the IR held it (the entry point
    reads a table of the segments' addresses)."""

    arena_bytes: int
    segments: tuple[np.ndarray, ...] = field(repr=False)
    arena_offsets: dict[SSAValue, int] = field(repr=False)
    weight_offsets: dict[SSAValue, int] = field(repr=False)
    external: dict[SSAValue, int] = field(repr=False, default_factory=dict)

    @property
    def weights(self) -> np.ndarray:
        """The weight blob (all the weights unless some are `external`)."""
        return self.segments[0]

    @property
    def weight_bytes(self) -> int:
        blob = self.weights.nbytes if self.weight_offsets else 0
        return blob + sum(s.nbytes for s in self.segments[1:])


RELEASED = "smelt.released"
"""Marks a loop.constant whose bytes went to a weight blob and left the IR."""


def plan_memory(
    main: func.FuncOp,
    release: bool = False,
    memory_limit: int = 0,
    in_place: bool = False,
) -> MemoryPlan:
    """Honors `loop.alloc` offsets set by buffer-plan; places the others after them;
    refuses a model that needs more than `memory_limit` bytes (0: the machine's
    memory) before the weight blob is allocated (`check_memory`).

    `in_place`: constants held in aligned memory of their own (`WeightBytes`)
    stay there, segments the program reads in place, so that the biggest
    weights are never copied. `release` (the module is consumed by this
    compile) drops each large constant's bytes from the IR once they are in the
    weight blob or a segment: without it, a compile's peak memory is the IR's
    copy plus the blob."""
    allocs = [op for op in main.body.walk() if isinstance(op, AllocOp)]
    constants = [op for op in main.body.walk() if isinstance(op, ConstantOp)]

    arena_offsets: dict[SSAValue, int] = {}
    end = 0
    for op in allocs:
        if op.offset is not None:
            offset = op.offset.data
            if offset < 0 or offset % dtypes.byte_size(op.result.type.element_type):
                raise ResourceLimit(
                    f"loop.alloc offset {offset} is negative or misaligned"
                )
            arena_offsets[op.result] = offset
            end = max(end, offset + dtypes.nbytes(op.result.type))
    for op in allocs:
        if op.offset is None:
            end = align_up(end)
            arena_offsets[op.result] = end
            end += dtypes.nbytes(op.result.type)

    weight_offsets: dict[SSAValue, int] = {}
    external: dict[SSAValue, int] = {}
    segments: list[np.ndarray] = []
    numbers: dict[int, int] = {}  # id of a WeightBytes: its segment's number
    total = 0
    for op in constants:
        nbytes = dtypes.nbytes(op.result.type)
        storage = _in_place(op, nbytes) if in_place else None
        if storage is not None:
            if id(storage) not in numbers:  # constants sharing bytes share a segment
                numbers[id(storage)] = len(segments) + 1
                segments.append(storage.view(np.ndarray))
            external[op.result] = numbers[id(storage)]
            continue
        total = align_up(total)
        weight_offsets[op.result] = total
        total += nbytes
    held = sum(s.nbytes for s in segments)
    check_memory(main, align_up(end), total + held, memory_limit)
    weights = aligned_empty(total)
    released = 0
    for op in constants:
        nbytes = dtypes.nbytes(op.result.type)
        if op.result in weight_offsets:
            start = weight_offsets[op.result]
            weights[start : start + nbytes] = _constant_bytes(op)
        if release and len(op.value) > RELEASE_ELEMENTS:
            op.properties["value"] = DenseIntOrFPElementsAttr(
                op.value.type, BytesAttr(b"")
            )
            op.attributes[RELEASED] = UnitAttr()
            released += nbytes if op.result in weight_offsets else 0
            if released > TRIM_BYTES:
                released = return_freed_memory()
    if released:
        return_freed_memory()
    return MemoryPlan(
        align_up(end),
        (weights, *segments),
        arena_offsets,
        weight_offsets,
        external,
    )


def _in_place(op: ConstantOp, nbytes: int) -> WeightBytes | None:
    """The constant's bytes when the program can read them where they are: frozen
    `WeightBytes` holding every element (not a splat stored once)."""
    data = op.value.data.data
    if isinstance(data, WeightBytes) and not data.flags.writeable:
        if len(data) == nbytes and RELEASED not in op.attributes:
            return data
    return None


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
    io = sum(dtypes.nbytes(a.type) for a in main.body.block.args)
    need = arena + weights + io
    allowed = resolve_limit(limit)
    if not allowed or need <= allowed:
        return
    names = [
        f"'{a}' "
        for key in (program.INPUT_NAMES_ATTR, program.OUTPUT_NAMES_ATTR)
        for a in program.io_names(main, key) or ()
    ]
    args = list(main.body.block.args)
    if len(names) != len(args):
        names = [""] * len(args)
    sizes = [
        (dtypes.nbytes(v.type), f"{name}{v.type}")
        for name, v in zip(names, args)
    ] + [
        (dtypes.nbytes(op.result.type), _temporary(op))
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
    t = op.result.type
    nbytes, element_bytes = dtypes.nbytes(t), dtypes.byte_size(t.element_type)
    data = np.frombuffer(op.value.data.data, dtype=np.uint8)
    if data.size == nbytes:
        return data
    if data.size == element_bytes:  # a splat stored once
        return np.tile(data, nbytes // element_bytes)
    raise ResourceLimit(
        f"loop.constant holds {data.size} bytes but {t} needs {nbytes}"
    )
