"""Loop-level kernels → Triton source: one `@triton.jit` function per phase.

The mapping, for every kernel:

* a phase's grid loops are flattened and split into blocks: `tl.program_id(0)`
  picks a block of grid points, `tl.arange` gives the lanes, a mask covers the tail,
  and every scalar SSA value of the body becomes a block tensor;
* `memref.load` / `memref.store` become `tl.load` / `tl.store` at the buffer pointer
  plus the row-major linear index, masked by the lanes the index varies over;
* inner loops run as Triton `for` loops per lane, except chains that can run side by
  side: those become blocks along a second axis (`BLOCK_R`), accumulators become
  blocks reduced with `tl.sum` / `tl.reduce` after the loop (softmax, norms, pools,
  products);
* contractions (see `contraction.py`) become `tl.dot` tiles with a K loop, the
  initial value and the fused epilogue applied to the finished tile.

Which mode (`schedule.Mode`) and which block sizes a phase gets is decided in
`schedule.py`. This module holds what every mode shares (values, loads and stores,
offsets, sequential loops); each mode's own part is a module: `emit_lanes.py`
(elementwise, rows), `emit_dot.py` (dot); serial is the shared part alone. The
text goes through `writer.Writer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation, SSAValue

from smelt.dialects.arith_ext import XDSL_FORM
from smelt.dialects.loop import ForOp, YieldOp
from smelt.errors import SmeltError
from smelt.lowering.triton import schedule as sched
from smelt.lowering.triton.emit_dot import emit_dot
from smelt.lowering.triton.emit_lanes import emit_block_loop, emit_lanes
from smelt.lowering.triton.ops import OP_TEXT, constant, is_zero_constant, pointer_type
from smelt.lowering.triton.prelude import (
    check_sizes,
    param_names,
    unique_names,
)
from smelt.lowering.triton.structure import (
    EMPTY,
    BlockChain,
    Deps,
    Phase,
    is_statement,
    stored_buffers,
)
from smelt.lowering.triton.writer import Writer


@dataclass(frozen=True)
class TritonKernel:
    """One generated Triton function and how to launch it."""

    name: str
    kernel: str  # the loop-level kernel it comes from
    mode: sched.Mode
    source: str  # the function's text, decorator included
    params: tuple[str, ...]  # buffer parameters, in the loop kernel's arg order
    signature: tuple[str, ...]  # Triton pointer types of `params` (`*fp32`)
    schedule: sched.Schedule
    grid: int  # number of programs

    @property
    def constexprs(self) -> dict[str, int]:
        return dict(self.schedule.blocks)


Delin = tuple[str, int, tuple[int, ...], tuple[int, ...]]


class PhaseEmitter:
    """Writes one phase of one kernel as a Triton function."""

    def __init__(
        self, kernel: func.FuncOp, phase: Phase, deps: dict[SSAValue, Deps], name: str
    ):
        self.kernel = kernel
        self.phase = phase
        self.deps = deps
        self.name = name
        self.w = Writer()
        self.scopes: list[dict[tuple[str, SSAValue], str]] = [{}]
        self.axes_of: dict[SSAValue, frozenset[str]] = {}
        self.ns = "T"  # "A" / "B" while a dot's operand tiles are emitted
        self.written = stored_buffers(phase.ops)
        self.params = unique_names(param_names(kernel))
        self.buffers = dict(zip(kernel.args, self.params))
        # (namespace, iv) -> (flat index, which component, strides, extents) of the
        # delinearization that bound it
        self.delin: dict[tuple[str, SSAValue], Delin] = {}
        self.prelude: list[str] = []  # constants, before the body
        self.plan = sched.plan(phase, deps)
        self.mode = self.plan.mode
        self.block_chains: dict[ForOp, BlockChain] = self.plan.chains
        lanes = self.mode in (sched.Mode.ELEMENTWISE, sched.Mode.ROWS)
        # lanes: the grid's ivs at the grid's shape index a buffer by `offs` itself
        grid = phase.grid
        self.flat: tuple[tuple[SSAValue, ...], tuple[int, ...], str] | None = (
            (tuple(grid.ivs), tuple(grid.extents), "offs") if lanes and grid else None
        )
        self.lane_axes: frozenset[str] = frozenset({"L"}) if lanes else frozenset()
        # shape of a per-lane value, "" when there are no lanes
        self.lane_shape = {
            sched.Mode.ELEMENTWISE: "[BLOCK]", sched.Mode.ROWS: "[BLOCK_M, 1]"
        }.get(self.mode, "")  # fmt: skip
        self.masks: dict[str, str] = (
            {"L": "mask_l", "R": "mask_r"}
            if lanes
            else {"M": "mask_m", "N": "mask_n", "K": ""}
        )
        c = self.plan.contraction
        # a dot's values are whole [BLOCK_M, BLOCK_N] tiles: its stores broadcast to
        # the tile, masked on M and N, and its masked loads fill with zeros
        self.tile: str | None = "(BLOCK_M, BLOCK_N)" if c else None
        # a dot's values stand for others (the accumulator for its memory cell) and
        # depend on the K loop's ivs; those are named per operand tile ("A", "B")
        self.alias: dict[SSAValue, SSAValue] = dict(c.alias) if c else {}
        self.k_sources: frozenset[SSAValue] = frozenset(c.k_ivs) if c else frozenset()
        check_sizes(kernel)

    # --- values ----------------------------------------------------------------------

    def axes(self, v: SSAValue) -> frozenset[str]:
        out: set[str] = set()
        for s in self.deps.get(v, EMPTY):
            out |= self.axes_of.get(self.alias.get(s, s), frozenset())
        return frozenset(out)

    def ns_for(self, v: SSAValue) -> str:
        if self.k_sources and self.deps.get(v, EMPTY) & self.k_sources:
            return self.ns
        return "T"

    def bind(self, v: SSAValue, name: str, ns: str = "T") -> None:
        self.scopes[-1][(ns, v)] = name

    def place(
        self, v: SSAValue, axes: frozenset[str], name: str, ns: str = "T"
    ) -> None:
        """`v` is `name`, a block varying along `axes`."""
        self.axes_of[v] = axes
        self.bind(v, name, ns)

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Names bound inside (a loop body's) are forgotten after it."""
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()

    @contextmanager
    def namespace(self, ns: str) -> Iterator[None]:
        """Values depending on a dot's K ivs are named per operand tile inside."""
        outer, self.ns = self.ns, ns
        try:
            yield
        finally:
            self.ns = outer

    def bound_key(self, v: SSAValue) -> tuple[str, SSAValue] | None:
        """The (namespace, value) whose binding `lookup(v)` finds."""
        key = (self.ns_for(v), v)
        for scope in reversed(self.scopes):
            if key in scope:
                return key
        if v in self.alias:
            return self.bound_key(self.alias[v])
        return None

    def delin_of(self, v: SSAValue) -> Delin | None:
        """Where `v` comes from when it is one component of a delinearized index."""
        key = self.bound_key(v)
        return None if key is None else self.delin.get(key)

    def lookup(self, v: SSAValue) -> str | None:
        key = (self.ns_for(v), v)
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        if v in self.alias:
            return self.lookup(self.alias[v])
        return None

    def value(self, v: SSAValue) -> str:
        """The name of `v`, emitting its (pure) defining ops on first use."""
        found = self.lookup(v)
        if found is not None:
            return found
        op = v.owner
        if not isinstance(op, Operation) or is_statement(op):
            raise SmeltError(f"internal error: triton emitter has no value for {v}")
        if isinstance(op, arith.ConstantOp):
            name = self.w.fresh("c")
            self.prelude.append(f"    {name} = {constant(op.value.value.data, v.type)}")
            self.scopes[0][("T", v)] = name
            return name
        if isinstance(op, memref.LoadOp):
            expr = self.load_text(op)
        else:
            text = OP_TEXT.get(XDSL_FORM.get(type(op), type(op)))
            if text is None:
                raise SmeltError(
                    f"the triton target does not support `{op.name}` in kernel "
                    f"@{self.kernel.sym_name.data}"
                )
            expr = text(op, [self.value(o) for o in op.operands])
        name = self.w.assign(expr)
        self.bind(v, name, self.ns_for(v))
        return name

    # --- memory ----------------------------------------------------------------------

    def mask(self, axes: frozenset[str]) -> str | None:
        names = [
            self.masks[a] if a != "K" else f"mask_k{self.ns.lower()}"
            for a in sorted(axes)
        ]
        names = [n for n in names if n]
        return " & ".join(names) if names else None

    def offset(self, buffer: SSAValue, indices: list[SSAValue]) -> str:
        t = buffer.type
        assert isinstance(t, MemRefType)
        shape = tuple(t.get_shape())
        if (
            self.flat is not None
            and tuple(indices) == self.flat[0]
            and shape == self.flat[1]
        ):
            return self.flat[2]
        strides = [1] * len(shape)
        for p in range(len(shape) - 2, -1, -1):
            strides[p] = strides[p + 1] * shape[p + 1]
        names = [None if is_zero_constant(i) else self.value(i) for i in indices]
        infos = [
            None if n is None else self.delin_of(i) for n, i in zip(names, indices)
        ]
        terms = []
        p = 0
        while p < len(names):
            name, run = names[p], 1
            base = name
            info = infos[p]
            if info is not None:
                # a suffix of one delinearization laid out like the buffer's dims
                # folds back into the flat index: contiguous, so loads vectorize
                flat, comp, dstrides, dextents = info
                run = len(dextents) - comp
                last = p + run - 1
                if (
                    (run > 1 or comp == 0)
                    and last < len(names)
                    and all(
                        infos[p + j] == (flat, comp + j, dstrides, dextents)
                        and strides[p + j] == strides[last] * dstrides[comp + j]
                        for j in range(run)
                    )
                ):
                    span = dstrides[comp] * dextents[comp]
                    base = flat if comp == 0 else f"({flat} % {span})"
                else:
                    run = 1
            if base is not None:
                stride = strides[p + run - 1]
                terms.append(base if stride == 1 else f"{base} * {stride}")
            p += run
        return " + ".join(terms) if terms else "0"

    def barrier_before(self, buffer: SSAValue) -> None:
        # another thread of this program may have written the element: wait for it
        if buffer in self.written:
            self.w.line("tl.debug_barrier()")

    def load_text(self, op: memref.LoadOp) -> str:
        self.barrier_before(op.memref)
        ptr = f"{self.buffers[op.memref]} + {self.offset(op.memref, list(op.indices))}"
        mask = self.mask(self.axes(op.res))
        if mask is None:
            return f"tl.load({ptr})"
        other = ", other=0" if self.ns != "T" or self.tile else ""
        return f"tl.load({ptr}, mask={mask}{other})"

    def store(self, op: memref.StoreOp) -> None:
        ptr = f"{self.buffers[op.memref]} + {self.offset(op.memref, list(op.indices))}"
        value = self.value(op.value)
        index_axes = union_axes(self, op.indices)
        axes = self.axes(op.value) | index_axes
        if self.tile:
            # a unit dim the index ignores (a batch of one) is masked down to its
            # one valid row or column
            ptr = f"tl.broadcast_to({ptr}, {self.tile})"
            axes = frozenset({"M", "N"})
        elif not self.axes(op.value) <= index_axes:
            ptr = f"tl.broadcast_to({ptr}, {value}.shape)"
        mask = self.mask(axes)
        tail = f", mask={mask}" if mask else ""
        self.w.line(f"tl.store({ptr}, {value}{tail})")

    # --- statements ------------------------------------------------------------------

    def statements(self, ops: list[Operation]) -> None:
        for op in ops:
            if isinstance(op, memref.StoreOp):
                self.store(op)
            elif isinstance(op, ForOp):
                self.loop(op)
            elif isinstance(op, YieldOp | func.ReturnOp):
                continue
            else:
                for r in op.results:
                    self.value(r)

    def broadcast(self, name: str) -> str:
        return (
            f"tl.broadcast_to({name}, {self.lane_shape})" if self.lane_shape else name
        )

    def loop(self, op: ForOp) -> None:
        chain = self.block_chains.get(op)
        if chain is not None:
            emit_block_loop(self, chain)
            return
        lane_axes = self.lane_axes
        carried = []
        for init in op.iter_inits:
            carried.append(self.w.assign(self.broadcast(self.value(init)), "acc"))
        iv = self.w.fresh("i")
        lb, ub, step = op.lb.data, op.ub.data, op.step.data
        with self.w.indented(f"for {iv} in range({lb}, {ub}, {step}):"), self.scope():
            self.place(op.iv, frozenset(), iv)
            for arg, name in zip(op.body.block.args[1:], carried):
                self.place(arg, lane_axes, name)
            self.statements(list(op.body.block.ops))
            last = op.body.block.last_op
            assert isinstance(last, YieldOp)
            new = [self.broadcast(self.value(v)) for v in last.values]
            for name, expr in zip(carried, new):
                self.w.line(f"{name} = {expr}")
        for r, name in zip(op.res, carried):
            self.place(r, lane_axes, name)

    def delinearize(
        self,
        flat: str,
        ivs: list[SSAValue],
        extents: list[int],
        axes: frozenset[str],
        ns: str = "T",
    ) -> None:
        """Binds `ivs` to the row-major components of the index `flat` over
        `extents`, each a block along `axes`."""
        stride = 1
        strides = []
        for e in reversed(extents):
            strides.append(stride)
            stride *= e
        strides.reverse()
        for i, (e, s) in enumerate(zip(extents, strides)):
            expr = flat if s == 1 else f"({flat} // {s})"
            if i > 0:
                expr = f"{expr} % {e}"
            if len(extents) == 1:
                self.place(ivs[i], axes, flat, ns)
                continue
            name = self.w.assign(expr, "i")
            self.delin[(ns, ivs[i])] = (flat, i, tuple(strides), tuple(extents))
            self.place(ivs[i], axes, name, ns)

    # --- modes -----------------------------------------------------------------------

    def emit(self) -> TritonKernel:
        if self.mode is sched.Mode.DOT:
            assert self.plan.contraction is not None
            schedule, grid = emit_dot(self, self.plan.contraction)
        elif self.mode is sched.Mode.SERIAL:
            schedule, grid = sched.serial(), 1
            self.statements(self.phase.ops)
        else:
            schedule, grid = emit_lanes(self)
        params = ", ".join(
            self.params + [f"{k}: tl.constexpr" for k, _ in schedule.blocks]
        )
        header = f"@triton.jit\ndef {self.name}({params}):"
        body = self.prelude + self.w.lines
        source = header + "\n" + "\n".join(body or ["    pass"]) + "\n"
        signature = tuple(pointer_type(a.type.element_type) for a in self.kernel.args)
        return TritonKernel(
            self.name, self.kernel.sym_name.data, self.mode, source,
            tuple(self.params), signature, schedule, grid,
        )  # fmt: skip


def union_axes(e: PhaseEmitter, values) -> frozenset[str]:
    out: set[str] = set()
    for v in values:
        out |= e.axes(v)
    return frozenset(out)
