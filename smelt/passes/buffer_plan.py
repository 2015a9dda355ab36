"""buffer-plan: static arena offsets for every intermediate buffer, from liveness."""

from __future__ import annotations

import random
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntAttr, IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import dtypes, locations, loop
from smelt.dialects.weights import ALIGN
from smelt.errors import SmeltError


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass
class Buffer:
    alloc: loop.AllocOp
    size: int
    start: int  # index of the first call that touches it
    end: int  # index of the last call that touches it
    offset: int = -1


def _root(value: SSAValue) -> SSAValue:
    while isinstance(value.owner, loop.ViewOp):
        value = value.owner.source
    return value


def live_buffers(main: func.FuncOp) -> tuple[list[Buffer], list[func.CallOp]]:
    """Every loop.alloc of @main with its live interval over the call sequence."""
    calls = [op for op in main.body.ops if isinstance(op, func.CallOp)]
    buffers: dict[SSAValue, Buffer] = {}
    for op in main.body.ops:
        if isinstance(op, loop.AllocOp):
            buffers[op.result] = Buffer(op, _align(dtypes.nbytes(op.result.type)), -1, -1)
    for i, call in enumerate(calls):
        for arg in call.arguments:
            buf = buffers.get(_root(arg))
            if buf is not None:
                buf.start = i if buf.start < 0 else buf.start
                buf.end = i
    return [b for b in buffers.values() if b.start >= 0], calls


def _inplace_pairs(buffers: list[Buffer], calls, kernels) -> dict[int, Buffer]:
    """id(output buffer) → input buffer it may reuse: the call's kernel is
    elementwise (`loop.ELEMENTWISE_ATTR`), the input dies at that call, and both
    are whole buffers (no view) of one shape and element size, so that the kernel
    reads each input element at the index it writes."""
    by_value = {b.alloc.result: b for b in buffers}
    pairs: dict[int, Buffer] = {}
    taken: set[int] = set()
    for i, call in enumerate(calls):
        kernel = kernels.get(call.callee.string_value())
        if kernel is None or loop.ELEMENTWISE_ATTR not in kernel.attributes:
            continue
        n_out = int(kernel.attributes[loop.ELEMENTWISE_ATTR].value.data)  # outputs at the end
        ins, outs = call.arguments[:-n_out], call.arguments[-n_out:]
        for out in outs:
            ob = by_value.get(out)
            if ob is None or ob.start != i:
                continue
            for inp in ins:
                ib = by_value.get(inp)
                if ib and ib.end == i and _same_layout(ib, ob) and id(ib) not in taken:
                    pairs[id(ob)] = ib
                    taken.add(id(ib))
                    break
    return pairs


def _same_layout(a: Buffer, b: Buffer) -> bool:
    ta, tb = a.alloc.result.type, b.alloc.result.type
    return ta.get_shape() == tb.get_shape() and dtypes.byte_size(
        ta.element_type
    ) == dtypes.byte_size(tb.element_type)


# Orders in which buffers are placed; plan() keeps the one with the smallest arena.
ORDERS = {
    "size": lambda b: (-b.size, b.start),
    "start": lambda b: (b.start, -b.size),
    "lifetime": lambda b: (-(b.end - b.start), -b.size),
    "area": lambda b: (-(b.end - b.start + 1) * b.size, b.start),
    "size-late": lambda b: (-b.size, -b.end),
    "end": lambda b: (-b.end, -b.size),
}


def place(buffers: list[Buffer], order, pairs: dict[int, Buffer]) -> int:
    """Assigns offsets in `order`, each buffer into the smallest gap left by the
    already placed buffers whose lifetimes overlap it (best fit). Returns the arena
    size."""
    for b in buffers:
        b.offset = -1
    placed: list[Buffer] = []
    # placed buffers by the steps they are live at: a buffer meets only those
    # (scanning every placed buffer made the plan quadratic in the model's size)
    live: dict[int, list[Buffer]] = {}
    for buf in sorted(buffers, key=order):
        meets = {
            id(p): p for t in range(buf.start, buf.end + 1) for p in live.get(t, ())
        }.values()
        host = pairs.get(id(buf))
        if host is not None and host.offset >= 0 and not any(
            p is not host
            and p.offset < host.offset + buf.size and host.offset < p.offset + p.size
            for p in meets
        ):
            buf.offset = host.offset
        else:
            busy = sorted((p.offset, p.offset + p.size) for p in meets)
            best, best_gap, cursor = None, None, 0
            for lo, hi in busy:
                gap = lo - cursor
                if gap >= buf.size and (best_gap is None or gap < best_gap):
                    best, best_gap = cursor, gap
                cursor = max(cursor, hi)
            buf.offset = cursor if best is None else best
        placed.append(buf)
        for t in range(buf.start, buf.end + 1):
            live.setdefault(t, []).append(buf)
    return max((b.offset + b.size for b in placed), default=0)


def _shuffled(seed: int):
    """Biggest first, equal sizes in a seeded random order (deterministic)."""
    rng = random.Random(seed)
    ranks: dict[int, float] = {}
    return lambda b: (-b.size, ranks.setdefault(id(b), rng.random()))


def plan(
    buffers: list[Buffer], pairs: dict[int, Buffer] | None = None, tries: int = 16
) -> int:
    """Best-fit placement tried in each of ORDERS and `tries` seeded shuffles of
    equal-size buffers; keeps the smallest arena."""
    pairs = pairs or {}
    orders = [*ORDERS.values(), *(_shuffled(seed) for seed in range(tries))]
    best_order = min(orders, key=lambda order: place(buffers, order, pairs))
    return place(buffers, best_order, pairs)


def lower_bound(
    buffers: list[Buffer], steps: int, pairs: dict[int, Buffer] | None = None
) -> int:
    """The largest total of simultaneously live bytes (an input that an in-place
    output may take over, `pairs`, counts once at the call where it dies)."""
    shared: dict[int, int] = {}
    for host in (pairs or {}).values():
        shared[host.end] = shared.get(host.end, 0) + host.size
    return max(
        (
            sum(b.size for b in buffers if b.start <= t <= b.end) - shared.get(t, 0)
            for t in range(steps)
        ),
        default=0,
    )


@dataclass(frozen=True)
class BufferPlanPass(ModulePass):
    """Gives every `loop.alloc` of @main an offset in one arena.

    Expects a loop-level module. Buffers whose live intervals (over @main's call
    sequence, views included) overlap never share bytes, except an elementwise
    kernel's output that takes over an input dying at that kernel (`inplace`).
    Sets `offset` on each alloc and records on @main `smelt.arena_bytes`,
    `smelt.arena_lower_bound` and `smelt.naive_bytes`.

        %t = loop.alloc : memref<64xf32>   →   %t = loop.alloc offset(256) : memref<64xf32>
    """

    name = "buffer-plan"
    scope = "entry"  # @main, and kernels' attributes (smelt.compiler.deferred)

    inplace: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = [f for f in op.ops if isinstance(f, func.FuncOp)]
        kernels: dict[str, Operation] = {f.sym_name.data: f for f in funcs}
        for entry in funcs:
            if not loop.is_kernel(entry):
                self.plan_entry(entry, kernels)

    def plan_entry(self, main: func.FuncOp, kernels: dict[str, Operation]) -> None:
        buffers, calls = live_buffers(main)
        pairs = _inplace_pairs(buffers, calls, kernels) if self.inplace else {}
        arena = plan(buffers, pairs)
        for b in buffers:
            b.alloc.offset = IntAttr(b.offset)
        for a in main.body.ops:  # never-used allocs still need a home
            if isinstance(a, loop.AllocOp) and a.offset is None:
                a.offset = IntAttr(0)
                arena = max(arena, _align(dtypes.nbytes(a.result.type)))
        bound = lower_bound(buffers, len(calls), pairs)
        naive = sum(b.size for b in buffers)
        if naive >= 2**63:
            largest = max(buffers, key=lambda b: b.size)
            where = locations.describe(largest.alloc)
            raise SmeltError(
                f"@{main.sym_name.data}'s temporary buffers need {naive} bytes, more "
                f"than 64-bit offsets address (the largest: "
                f"{largest.alloc.result.type}{f' of {where}' if where else ''}); use "
                "smaller input shapes"
            )
        for key, value in (("arena_bytes", arena), ("arena_lower_bound", bound),
                           ("naive_bytes", naive)):
            main.attributes[f"smelt.{key}"] = IntegerAttr(value, 64)
