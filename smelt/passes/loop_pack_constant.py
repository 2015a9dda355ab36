"""loop-pack-constant: lays a constant kernel operand out at compile time in the order
the kernel's loops read it (pre-packed weights)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FunctionType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    TensorType,
)
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import graph, loop
from smelt.dialects.weights import ALIGNED_BYTES, WeightBytes
from smelt.passes import loop_nest, remarks
from smelt.passes.loop_pack import Refused

NAME = "loop-pack-constant"  # also on the remarks of loop-schedule-apply's packs


def _grid(value: SSAValue, axes: dict[SSAValue, np.ndarray]) -> np.ndarray | int:
    """`value` evaluated over the grid of loop iterations (`axes`: the values each
    used induction variable takes, broadcastable)."""
    if value in axes:
        return axes[value]
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    ops = {
        arith.AddiOp: np.add,
        arith.SubiOp: np.subtract,
        arith.MuliOp: np.multiply,
        arith.DivUIOp: np.floor_divide,
    }
    for cls, fn in ops.items():
        if isinstance(owner, cls):
            return fn(_grid(owner.lhs, axes), _grid(owner.rhs, axes))
    raise Refused(f"index computed by {getattr(owner, 'name', 'a block argument')}")


def _used_ivs(value: SSAValue, found: set[SSAValue]) -> None:
    if isinstance(value, BlockArgument):
        parent = value.owner.parent_op()
        if isinstance(parent, loop.ForOp) and value.index == 0:
            found.add(value)
            return
        raise Refused("index uses an iter_arg or an argument")
    for operand in value.owner.operands:
        _used_ivs(operand, found)


CHUNK_BYTES = 16 << 20
"""Packing copies a constant this many bytes at a time."""


@dataclass
class Layout:
    """One load's view of the packed constant: the loops its indices use (outermost
    first) and, per point of their iteration grid, the source element: `source`
    (flat positions in the loops' nesting order), or for indices affine in the
    loops, `affine` = (first position, position step per loop), so that big
    weights are packed through a strided view, without an index per element."""

    load: memref.LoadOp
    loops: list[loop.ForOp]
    source: np.ndarray | None = None
    affine: tuple[int, tuple[int, ...]] | None = None

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(p.trip_count for p in self.loops)

    @property
    def size(self) -> int:
        return math.prod(self.grid)

    def key(self) -> tuple:
        if self.affine is not None:
            return ("affine", self.affine, self.grid)
        assert self.source is not None
        return ("gather", self.source.tobytes())

    def chunks(self, data: np.ndarray, limit: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The bytes of the elements of flat `data` this load reads, in loop order,
        a piece of at most about `limit` bytes at a time (so packing a big weight
        holds one piece beside the result, not a second copy of the weight)."""
        if self.affine is None:
            assert self.source is not None
            step = max(1, limit // data.itemsize)
            for i in range(0, self.source.size, step):
                yield data[self.source[i : i + step]].tobytes()
            return
        first, steps = self.affine
        view = np.lib.stride_tricks.as_strided(
            data[first:], self.grid, [s * data.itemsize for s in steps], writeable=False
        )
        if not self.grid:
            yield view.tobytes()
            return
        # split on the outermost axis whose rows fit the limit, iterating over the
        # axes before it (a grid of [1, K, N] splits on K, not on its 1)
        axis, row = 0, view.nbytes // max(1, self.grid[0])
        while row > limit and axis + 1 < len(self.grid):
            axis += 1
            row //= max(1, self.grid[axis])
        rows = max(1, limit // max(1, row))
        for outer in np.ndindex(*self.grid[:axis]):
            block = view[outer]
            for i in range(0, self.grid[axis], rows):
                yield block[i : i + rows].tobytes()  # C order: the loop order



def _is_affine(value: SSAValue) -> bool:
    """Index arithmetic without division or products of two loop variables."""
    if isinstance(value, BlockArgument):
        return True
    owner = value.owner
    if isinstance(owner, arith.ConstantOp):
        return True
    if isinstance(owner, arith.AddiOp | arith.SubiOp):
        return _is_affine(owner.lhs) and _is_affine(owner.rhs)
    if isinstance(owner, arith.MuliOp):
        constant = [isinstance(v.owner, arith.ConstantOp) for v in owner.operands]
        return any(constant) and all(_is_affine(v) for v in owner.operands)
    return False


def _affine_layout(
    load: memref.LoadOp, loops: list[loop.ForOp], shape: tuple[int, ...]
) -> Layout:
    """The layout of a load whose indices are affine in `loops`: each index at the
    first iteration and its step per loop, probed with scalars; bounds from the
    extremes of the box."""
    first = {p.iv: p.lb.data for p in loops}
    base = [int(_grid(i, first)) for i in load.indices]
    steps = []  # per loop, per dim
    for p in loops:
        probe = {**first, p.iv: p.lb.data + p.step.data}
        steps.append([int(_grid(i, probe)) - b for i, b in zip(load.indices, base)])
    for d, size in enumerate(shape):
        reach = [s[d] * (p.trip_count - 1) for s, p in zip(steps, loops)]
        lo = base[d] + sum(min(0, r) for r in reach)
        hi = base[d] + sum(max(0, r) for r in reach)
        if lo < 0 or hi >= size:
            raise Refused("an index leaves the operand")
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    flat_first = sum(b * st for b, st in zip(base, strides))
    flat_steps = tuple(sum(s * st for s, st in zip(per, strides)) for per in steps)
    return Layout(load, loops, affine=(flat_first, flat_steps))


def layout(load: memref.LoadOp, shape: tuple[int, ...]) -> Layout:
    """Where each element `load` reads comes from, in loop order."""
    ivs: set[SSAValue] = set()
    for index in load.indices:
        _used_ivs(index, ivs)
    loops = [p for p in reversed(list(loop_nest.ancestors(load))) if p.iv in ivs]
    if shape and all(_is_affine(i) for i in load.indices):
        return _affine_layout(load, loops, shape)
    axes = {}
    for axis, p in enumerate(loops):
        values = np.arange(p.lb.data, p.ub.data, p.step.data, dtype=np.int64)
        view = [1] * len(loops)
        view[axis] = -1
        axes[p.iv] = values.reshape(view)
    grid = [p.trip_count for p in loops]
    index = [np.broadcast_to(_grid(i, axes), grid) for i in load.indices]
    for i, size in zip(index, shape):
        if i.size and (i.min() < 0 or i.max() >= size):
            raise Refused("an index leaves the operand")
    flat = np.ravel_multi_index(tuple(index), shape) if shape else np.zeros(grid, int)
    return Layout(load, loops, np.asarray(flat, dtype=np.int64).reshape(-1))


def _callers(module: ModuleOp, kernel: func.FuncOp) -> list[func.CallOp]:
    name = kernel.sym_name.data
    return [
        op
        for f in module.ops
        if isinstance(f, func.FuncOp) and not loop.is_kernel(f)
        for op in f.walk()
        if isinstance(op, func.CallOp) and op.callee.string_value() == name
    ]


def _constants(
    module: ModuleOp, kernel: func.FuncOp, operand: int
) -> list[tuple[func.CallOp, loop.ConstantOp]] | str:
    """Each call of `kernel` with the `loop.constant` it passes as `operand`, or
    why not every call passes one."""
    args = len(kernel.body.block.args)
    if not 0 <= operand < args:
        return f"no operand {operand}: it takes {args}"
    callers = _callers(module, kernel)
    if not callers:
        return "no call of the kernel passes it its constant"
    found = []
    for call in callers:
        source = call.arguments[operand].owner
        if not isinstance(source, loop.ConstantOp):
            return f"operand {operand} is not a loop.constant at every call of it"
        found.append((call, source))
    return found


def is_constant(module: ModuleOp, kernel: func.FuncOp, operand: int) -> bool:
    """Whether every call of `kernel` passes a constant as argument `operand`."""
    return not isinstance(_constants(module, kernel, operand), str)


def pack_constant(module: ModuleOp, kernel: func.FuncOp, operand: int) -> bool:
    """Replaces kernel argument `operand`, a `loop.constant` in each of its callers,
    by a 1-D constant holding, for each distinct load of it, the elements that load
    reads in the order its loops visit them (one such constant per caller); each
    load then reads its part with unit stride along its innermost loop. Returns
    whether it did."""
    found = _constants(module, kernel, operand)
    if isinstance(found, str):
        return _declined(kernel, found)
    arg = kernel.body.block.args[operand]
    # a loop.constant is a memref, and a call's operand types are its callee's
    assert isinstance(arg.type, MemRefType)
    if not arg.uses:
        return _declined(kernel, f"operand {operand} is not used")
    if not all(
        isinstance(u.operation, memref.LoadOp) for u in arg.uses
    ):  # stored to, or passed on: keep it
        return _declined(kernel, f"operand {operand} is used other than by loads")
    users = [
        o for o in kernel.walk() if isinstance(o, memref.LoadOp) and o.memref is arg
    ]
    shape = tuple(arg.type.get_shape())
    layouts = []
    for user in users:
        try:
            layouts.append(layout(user, shape))  # type: ignore[arg-type]
        except Refused as e:
            remarks.missed(NAME, user, str(e))
            return False
    parts: dict[tuple, int] = {}
    sources: list[Layout] = []
    offsets = []
    total = 0
    for lay in layouts:
        key = lay.key()
        if key not in parts:
            parts[key] = total
            sources.append(lay)
            total += lay.size
        offsets.append(parts[key])
    new_type = MemRefType(arg.type.element_type, [max(total, 1)])
    block = kernel.body.block
    new_arg = block.insert_arg(new_type, operand)
    for lay, offset in zip(layouts, offsets):
        _reload(lay, new_arg, offset)
    block.erase_arg(arg)
    kernel.function_type = FunctionType.from_lists(block.arg_types, [])
    for call, source in found:
        _pack_call(call, source, operand, sources, new_type)
    return True


def _declined(kernel: func.FuncOp, reason: str) -> bool:
    remarks.missed(NAME, kernel, reason)
    return False


def _pack_call(
    call: func.CallOp,
    source: loop.ConstantOp,
    operand: int,
    sources: list[Layout],
    new_type: MemRefType,
) -> None:
    """Passes `call` the packed copy of its constant `source` (the elements each
    layout of `sources` reads, concatenated), erasing `source` when unused."""
    data = graph.dense_to_array(source.value).reshape(-1)
    # filled a chunk at a time: one piece beside the result, never a second copy
    nbytes = sum(lay.size for lay in sources) * data.itemsize
    big = nbytes >= ALIGNED_BYTES
    out = WeightBytes.empty(nbytes) if big else np.zeros(nbytes, np.uint8)
    at = 0
    for lay in sources:
        for chunk in lay.chunks(data):
            out[at : at + len(chunk)] = np.frombuffer(chunk, np.uint8)
            at += len(chunk)
    raw = out.freeze() if big else out.tobytes()
    del out
    tensor = TensorType(source.value.get_element_type(), [nbytes // data.itemsize])
    value = DenseIntOrFPElementsAttr(tensor, BytesAttr(raw))
    new_const = loop.ConstantOp(value, new_type)
    call_block = call.parent_block()
    assert call_block is not None
    call_block.insert_op_before(new_const, call)
    operands = list(call.arguments)
    operands[operand] = new_const.result
    call.operands = operands
    if not source.result.uses:
        call_block.erase_op(source)
        # an erased op lives on in reference cycles until the next garbage
        # collection: drop its bytes now, or every packed weight is held twice
        source.properties.clear()


def _position(lay: Layout, offset: int, before: Operation) -> SSAValue:
    """offset + Σ ((iv - lb) / step) · (iterations of the inner loops), as index
    arithmetic before `before`."""
    block = before.parent_block()
    assert block is not None

    def add(op: Operation) -> SSAValue:
        block.insert_op_before(op, before)
        return op.results[0]

    def const(value: int) -> SSAValue:
        return add(loop_nest.index_constant(value))

    trips = [p.trip_count for p in lay.loops]
    total: SSAValue | None = None
    for i, p in enumerate(lay.loops):
        inner, step, lb = math.prod(trips[i + 1 :]), p.step.data, p.lb.data
        term = p.iv
        if lb:
            term = add(arith.SubiOp(term, const(lb)))
        if step != 1 and inner % step:
            term = add(arith.DivUIOp(term, const(step)))
            step = 1
        if inner // step != 1:
            term = add(arith.MuliOp(term, const(inner // step)))
        total = term if total is None else add(arith.AddiOp(total, term))
    if total is None:
        return const(offset)
    return add(arith.AddiOp(total, const(offset))) if offset else total


def _reload(lay: Layout, packed: SSAValue, offset: int) -> None:
    load = lay.load
    new = memref.LoadOp.get(packed, [_position(lay, offset, load)])
    new.results[0].name_hint = load.results[0].name_hint
    load.parent_block().insert_op_before(new, load)  # type: ignore[union-attr]
    load.results[0].replace_all_uses_with(new.results[0])
    loop_nest.remove(load)


@dataclass(frozen=True)
class LoopPackConstantPass(ModulePass):
    """Packs kernel argument `operand` at compile time when it is a constant.

    Expects a loop-level module whose @main, at each call of a matching kernel,
    passes a `loop.constant` as argument `operand` (each call gets its own packed
    copy), which the kernel only loads
    from, at indices that are index arithmetic (add, sub, mul, division by a
    constant) over induction variables. Each load reads instead a new 1-D
    constant: the elements it reads, in the nesting order of the loops its
    indices use (the order `loop-pack` gives a scratch, so the innermost loop
    walks it with unit stride); loads with the same pattern share one part.
    The original constant goes when nothing else uses it. The loaded values are
    the same, so the result is exact. Anything else is left alone.

        loop.for %j0 {"n.1"} { loop.for %k { loop.for %j1 {
          %b = memref.load %B[%k, %j0 + %j1] } } }        (B: loop.constant KxN)
      → %b = memref.load %P[%j0·K + %k·16 + %j1]           (P: the packed constant)
    """

    name = NAME

    operand: int
    kernel: str = "*"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in loop_nest.kernels(op, self.kernel):
            pack_constant(op, kernel, self.operand)
