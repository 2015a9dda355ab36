"""Kernel of `graph.loop`: one kernel whose sequential `reduction` loop over the
iterations holds the body's loop nests.

The body region is lowered on its own (as a function: its kernels and its @main),
then that @main is replayed inside the iteration loop: each kernel call becomes the
called kernel's nests, inlined over the loop kernel's buffers. Every buffer of the
body's @main becomes a buffer of the outer @main, handed to the loop kernel:

* the iteration number: a scratch tensor<i64> written at each iteration's start
  (when the body reads it);
* carried values: the loop's result buffers (the state); the body writes their next
  values into scratch buffers, copied back into the state at the iteration's end;
* scan outputs: the body writes one element into a scratch buffer, copied into the
  result's slice [t] at the iteration's end;
* invariants and constants: read-only inputs; intermediates: scratch allocations;
* views: of a read-only buffer, a `loop.view` in the outer @main; of a buffer the
  kernel writes, a copy at the view's point (kernel arguments must not alias).

The kernel carries `loop.iterations` (the trip count) so that backends that cannot
run a sequential loop around nests (Triton) refuse it by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IntAttr, IntegerType, MemRefType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph, loop
from smelt.errors import SmeltError
from smelt.lowering.loop_builder import Index, KernelBuilder, element_type, shape
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import copy_nest

I64 = IntegerType(64)


def _body_function(op: graph.LoopOp) -> func.FuncOp:
    """The body region as a graph function (graph.yield becomes func.return)."""
    region = op.body.clone()
    block = region.block
    last = block.last_op
    assert isinstance(last, graph.YieldOp)
    values = list(last.values)
    block.erase_op(last)
    block.add_op(func.ReturnOp(*values))
    arg_types = [a.type for a in block.args]
    return func.FuncOp("loop_body", (arg_types, [v.type for v in values]), region)


def _delinearized(k: KernelBuilder, flat: Index, dims: Sequence[int]) -> list[Index]:
    """The row-major indices of linear position `flat` in a buffer of `dims`."""
    out: list[Index] = []
    stride = 1
    for d in reversed(dims):
        q = k.op(arith.DivUIOp, flat, k.index(stride)) if stride > 1 else flat
        out.append(k.op(arith.RemUIOp, q, k.index(d)) if d > 1 else k.index(0))
        stride *= d
    return out[::-1]


def _reshaping_copy(k: KernelBuilder, src: SSAValue, dst: SSAValue) -> None:
    """dst = src seen with dst's shape (same elements in row-major order)."""
    if element_type(src) != element_type(dst):
        raise SmeltError(
            "graph.loop: its body bitcasts a value it computes; not supported "
            "inside a loop"
        )
    dims = shape(dst)
    with k.nest(dims) as ivs:
        stride = 1
        terms = []
        for iv, d in zip(reversed(ivs), reversed(dims)):
            terms.append((iv, stride))
            stride *= d
        flat = k.affine(terms) if terms else k.index(0)
        k.store(k.load(src, _delinearized(k, flat, shape(src))), dst, ivs)


class _Replay:
    """The body's @main replayed into the loop kernel (see the module docstring)."""

    def __init__(self, ctx: LoweringContext, op: graph.LoopOp):
        self.ctx, self.op = ctx, op
        self.outer: dict[SSAValue, SSAValue] = {}  # body @main buffer -> @main's
        self.read_only: set[SSAValue] = set()  # outer buffers the kernel only reads
        self.written: list[SSAValue] = []  # outer buffers the kernel writes
        self.copies: list[tuple[SSAValue, SSAValue]] = []  # (body view, its source)

    def scratch(self, t: MemRefType) -> SSAValue:
        buffer = self.ctx.alloc(t)
        self.written.append(buffer)
        return buffer

    def bind_args(self, main: func.FuncOp) -> tuple[list, list, list]:
        """Outer buffers of the body @main's arguments: (state, next, scans)."""
        op, ctx, n = self.op, self.ctx, self.op.n_carried
        args = list(main.body.block.args)
        n_in = len(op.inputs) + 1
        ins, outs = args[:n_in], args[n_in:]
        counter = None  # the iteration number, where the body reads it
        if ins[0].uses:
            counter = self.scratch(MemRefType(I64, []))
            self.outer[ins[0]] = counter
        state = [ctx.result_buffer(r) for r in op.outputs[:n]]
        self.written += state
        scans = [ctx.result_buffer(r) for r in op.outputs[n:]]
        self.written += scans
        for arg, buffer in zip(ins[1 : 1 + n], state):
            self.outer[arg] = buffer
        for arg, value in zip(ins[1 + n :], op.inputs[n:]):
            self.outer[arg] = ctx.buffer(value)
            self.read_only.add(self.outer[arg])
        nexts = [self.scratch(a.type) for a in outs]  # type: ignore[arg-type]
        for arg, buffer in zip(outs, nexts):
            self.outer[arg] = buffer
        return [counter, *state], nexts[:n], nexts[n:]

    def bind_ops(self, main: func.FuncOp) -> None:
        """Outer buffers of the body @main's allocations, constants and views."""
        for o in main.body.block.ops:
            if isinstance(o, loop.AllocOp):
                self.outer[o.result] = self.scratch(o.result.type)
            elif isinstance(o, loop.ConstantOp):
                c = self.ctx.emit(loop.ConstantOp(o.value, o.result.type))
                self.outer[o.result] = c
                self.read_only.add(c)
            elif isinstance(o, loop.ViewOp):
                src = self.outer[o.source]
                if src in self.read_only:
                    view = self.ctx.emit(loop.ViewOp(src, o.result.type))
                    self.read_only.add(view)
                    self.outer[o.result] = view
                else:
                    self.outer[o.result] = self.scratch(o.result.type)
            elif not isinstance(o, func.CallOp | func.ReturnOp):
                raise SmeltError(
                    f"graph.loop: its body lowers to {o.name} in @main, which a "
                    "loop kernel cannot hold"
                )


def _inline(
    k: KernelBuilder, kernel: func.FuncOp, args: Sequence[SSAValue]
) -> None:
    """The body of `kernel` emitted at k's cursor over `args`."""
    mapping: dict[SSAValue, SSAValue] = dict(
        zip(kernel.body.block.args, args, strict=True)
    )
    for o in kernel.body.block.ops:
        if isinstance(o, func.ReturnOp):
            break
        k.emit(o.clone(mapping))


def lower_loop(ctx: LoweringContext, op: graph.LoopOp) -> None:
    """One kernel: the carried values copied into the state, then a sequential
    loop over the iterations running the body's nests (see the module docstring)."""
    from smelt.lowering.convert_graph_to_loop import lower_function

    lowered = lower_function(_body_function(op), ctx.taken_names)
    *kernels, main = lowered
    by_name = {f.sym_name.data: f for f in kernels}
    r = _Replay(ctx, op)
    (counter, *state), nexts, elements = r.bind_args(main)
    r.bind_ops(main)
    n = op.n_carried
    inputs = [ctx.buffer(v) for v in op.inputs[:n]]
    read = list(dict.fromkeys([*inputs, *(b for b in r.outer.values()
                                          if b in r.read_only)]))  # fmt: skip
    written = list(dict.fromkeys(r.written))
    k = ctx.kernel("loop", read, written)
    k.func.attributes[loop.ITERATIONS_ATTR] = IntAttr(op.trips)
    inner = {**dict(zip(read, k.inputs)), **dict(zip(written, k.outputs))}

    def at(body_value: SSAValue) -> SSAValue:
        return inner[r.outer[body_value]]

    for src, dst in zip(inputs, state):
        copy_nest(k, inner[src], inner[dst], shape(src), lambda ivs: ivs)
    with k.loop(op.trips, loop.REDUCTION) as t:
        if counter is not None:
            k.store(k.op(arith.IndexCastOp, t, I64), inner[counter], [])
        for o in main.body.block.ops:
            if isinstance(o, func.CallOp):
                callee = by_name[o.callee.root_reference.data]
                _inline(k, callee, [at(v) for v in o.arguments])
            elif isinstance(o, loop.ViewOp) and r.outer[o.result] not in r.read_only:
                _reshaping_copy(k, at(o.source), at(o.result))
        for src, dst in zip(nexts, state):
            copy_nest(k, inner[src], inner[dst], shape(src), lambda ivs: ivs)
        for src, dst in zip(elements, op.outputs[n:]):
            out = inner[ctx.buffer(dst)]
            copy_nest(k, inner[src], out, shape(src), lambda ivs: ivs,
                      lambda ivs, t=t: [t, *ivs])  # fmt: skip


LOWERINGS: dict[type[Operation], Callable] = {graph.LoopOp: lower_loop}
