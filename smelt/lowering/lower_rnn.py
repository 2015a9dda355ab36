"""Kernels of the recurrent layers' time loops (`graph.lstm_scan`, `gru_scan`,
`rnn_scan`): per direction, a sequential loop over the time steps whose body is a
matmul nest (H_{t-1} * R^T into a gate buffer) and then the cell's elementwise
math, the state carried in the Y_h (and Y_c) output buffers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import IndexType, MemRefType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import graph, loop
from smelt.lowering.loop_builder import Index, KernelBuilder, compute_type
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.lower_elementwise import _sigmoid
from smelt.lowering.scalar_ops import Arith, storage_type


def _activation(a: Arith, name: str, alpha: float, beta: float, x: SSAValue):  # noqa: ANN202
    """The ONNX recurrent activation `name` of x (see graph_rnn.ACTIVATIONS)."""
    zero, one = a.zero(), a.one()
    if name == "Relu":
        return a.max(x, zero)
    if name == "Tanh":
        return a.math(math.TanhOp, x)
    if name == "Sigmoid":
        return _sigmoid(a, x)
    if name == "Affine":
        return a.add(a.mul(a.const(alpha), x), a.const(beta))
    if name == "LeakyRelu":
        return a.select(a.cmp("ge", x, zero), x, a.mul(a.const(alpha), x))
    if name == "ThresholdedRelu":
        return a.select(a.cmp("ge", x, a.const(alpha)), x, zero)
    if name == "ScaledTanh":
        return a.mul(a.const(alpha), a.math(math.TanhOp, a.mul(a.const(beta), x)))
    if name == "HardSigmoid":
        return a.min(a.max(a.add(a.mul(a.const(alpha), x), a.const(beta)), zero), one)
    if name == "Elu":
        below = a.mul(a.const(alpha), a.sub(a.math(math.ExpOp, x), one))
        return a.select(a.cmp("ge", x, zero), x, below)
    if name == "Softsign":
        return a.div(x, a.add(one, a.abs(x)))
    assert name == "Softplus", name
    # max(x, 0) + log(1 + e^-|x|): no overflow for large x
    tail = a.math(math.LogOp, a.add(one, a.math(math.ExpOp, a.neg(a.abs(x)))))
    return a.add(a.max(x, zero), tail)


@dataclass
class _Step:
    """What one time step's nests share: the kernel, the direction and step ivs."""

    k: KernelBuilder
    a: Arith
    op: graph.RecurrenceOp
    d: Index
    s: Index
    steps: int
    hidden: int
    reverse: SSAValue | bool  # an i1 when the direction loop decides it
    lens: SSAValue | None  # the seq_lens buffer
    y: SSAValue  # the Y buffer [S, D, B, H]

    def at(self, b: Index) -> tuple[Index, Index, SSAValue | None]:
        """(time position read, position written in Y, whether the step is live)
        for batch entry b. A finished entry writes 0 at the current step, a
        padding position in either direction."""
        k, s, last = self.k, self.s, self.steps - 1
        if self.lens is None:
            back = k.affine([(s, -1)], last)
            if isinstance(self.reverse, bool):
                t = back if self.reverse else s
            else:
                t = k.op(arith.SelectOp, self.reverse, back, s)
            return t, t, None
        n = k.op(arith.IndexCastOp, k.load(self.lens, [b]), IndexType())
        n = k.clamp(n, 0, self.steps)
        live = k.op(arith.CmpiOp, s, n, "slt")
        back = k.clamp(k.op(arith.SubiOp, k.affine([(n, 1)], -1), s), 0, last)
        if isinstance(self.reverse, bool):
            t = back if self.reverse else s
        else:
            t = k.op(arith.SelectOp, self.reverse, back, s)
        return t, k.op(arith.SelectOp, live, t, s), live

    def fn(self, which: int, x: SSAValue) -> SSAValue:
        """The cell's function `which` of this direction, after the clip."""
        clip = self.op.attr("clip")
        if clip is not None:
            x = self.a.min(self.a.max(x, self.a.const(-clip)), self.a.const(clip))
        dirs = graph.shape_of(self.op.operands[0])[0]
        specs = [self.op.functions(d)[which] for d in range(dirs)]
        first = _activation(self.a, *specs[0], x)
        if len(specs) == 1 or specs[1] == specs[0]:
            return first
        return self.a.select(self.reverse, _activation(self.a, *specs[1], x), first)


def _matmul(
    st: _Step, lhs: SSAValue, rt: SSAValue, out: SSAValue, lo: int, hi: int
) -> None:
    """out[d, b, n] = sum_k lhs[d, b, k] * rt[d, k, n] for n in [lo, hi): a zero
    fill, then a b-k-n band accumulating in `out` (n innermost, contiguous)."""
    k, a, d = st.k, st.a, st.d
    batch = graph.shape_of(st.op.operands[2])[1]
    with k.nest([batch, hi - lo]) as (b, n):
        k.store_value(a.zero(), out, [d, b, k.affine([(n, 1)], lo)])
    with k.loop(batch) as b:
        with k.loop(st.hidden, loop.REDUCTION) as kk, k.loop(hi - lo) as n:
            col = k.affine([(n, 1)], lo)
            x = k.load_value(lhs, [d, b, kk])
            y = k.load_value(rt, [d, kk, col])
            acc = k.load_value(out, [d, b, col])
            k.store_value(a.add(acc, a.mul(x, y)), out, [d, b, col])


# cell(step, kernel inputs, kernel outputs, scratch) emits one time step
Cell = Callable[[_Step, list[SSAValue], list[SSAValue], list[SSAValue]], None]


def _each_unit(st: _Step, body: Callable[..., None]) -> None:
    """body(b, j, t, pos, live) over batch entries b and hidden units j (`_Step.at`
    gives t, pos and live)."""
    k = st.k
    batch = graph.shape_of(st.op.operands[2])[1]
    with k.loop(batch) as b:
        t, pos, live = st.at(b)
        with k.loop(st.hidden) as j:
            body(b, j, t, pos, live)


def _finish(
    st: _Step, b: Index, j: Index, pos: Index, live: SSAValue | None,
    h: SSAValue, state: list[tuple[SSAValue, SSAValue, SSAValue]],
) -> None:
    """Stores Y at pos and each (new, old, buffer) state; a finished entry keeps
    its old state and writes 0."""
    k, a = st.k, st.a
    y_value = h if live is None else a.select(live, h, a.zero())
    k.store_value(y_value, st.y, [pos, st.d, b, j])
    for new, old, buffer in state:
        k.store_value(new if live is None else a.select(live, new, old), buffer,
                      [st.d, b, j])  # fmt: skip


def _lstm(st: _Step, ins: list[SSAValue], outs: list[SSAValue], scratch) -> None:  # noqa: ANN001
    k, a, d, hsz = st.k, st.a, st.d, st.hidden
    xw, rt, _, _, p = ins[:5]
    _, yh, yc = outs
    gates = scratch[0]
    _matmul(st, yh, rt, gates, 0, 4 * hsz)
    forget_is_input = bool(st.op.attr("input_forget"))

    def body(b, j, t, pos, live):  # noqa: ANN001, ANN202
        def pre(q: int) -> SSAValue:
            col = k.affine([(j, 1)], q * hsz)
            return a.add(k.load_value(gates, [d, b, col]), k.load_value(xw, [d, t, b, col]))

        def peep(q: int) -> SSAValue:
            return k.load_value(p, [d, k.affine([(j, 1)], q * hsz)])

        h_old = k.load_value(yh, [d, b, j])
        c_old = k.load_value(yc, [d, b, j])
        i = st.fn(0, a.add(pre(0), a.mul(peep(0), c_old)))
        if forget_is_input:
            f = a.sub(a.one(), i)
        else:
            f = st.fn(0, a.add(pre(2), a.mul(peep(2), c_old)))
        c = a.add(a.mul(f, c_old), a.mul(i, st.fn(1, pre(3))))
        o = st.fn(0, a.add(pre(1), a.mul(peep(1), c)))
        h = a.mul(o, st.fn(2, c))
        _finish(st, b, j, pos, live, h, [(h, h_old, yh), (c, c_old, yc)])

    _each_unit(st, body)


def _gru(st: _Step, ins: list[SSAValue], outs: list[SSAValue], scratch) -> None:  # noqa: ANN001
    k, a, d, hsz = st.k, st.a, st.d, st.hidden
    xw, rt, _, rbh = ins[:4]
    yh = outs[1]
    gates = scratch[0]
    before = bool(st.op.attr("linear_before_reset"))

    def load(buffer, b, t, q, j):  # noqa: ANN001, ANN202
        return k.load_value(buffer, [d, t, b, k.affine([(j, 1)], q * hsz)])

    def gate(b, j, q):  # noqa: ANN001, ANN202
        return k.load_value(gates, [d, b, k.affine([(j, 1)], q * hsz)])

    if before:
        _matmul(st, yh, rt, gates, 0, 3 * hsz)
    else:  # (r * H_{t-1}) * Rh^T needs r first
        _matmul(st, yh, rt, gates, 0, 2 * hsz)
        rh = scratch[1]

        def reset(b, j, t, pos, live):  # noqa: ANN001, ANN202
            r = st.fn(0, a.add(gate(b, j, 1), load(xw, b, t, 1, j)))
            k.store_value(a.mul(r, k.load_value(yh, [d, b, j])), rh, [d, b, j])

        _each_unit(st, reset)
        _matmul(st, rh, rt, gates, 2 * hsz, 3 * hsz)

    def body(b, j, t, pos, live):  # noqa: ANN001, ANN202
        h_old = k.load_value(yh, [d, b, j])
        z = st.fn(0, a.add(gate(b, j, 0), load(xw, b, t, 0, j)))
        bias = k.load_value(rbh, [d, j])
        if before:
            r = st.fn(0, a.add(gate(b, j, 1), load(xw, b, t, 1, j)))
            inner = a.mul(r, a.add(gate(b, j, 2), bias))
        else:
            inner = a.add(gate(b, j, 2), bias)
        candidate = st.fn(1, a.add(load(xw, b, t, 2, j), inner))
        h = a.add(a.mul(a.sub(a.one(), z), candidate), a.mul(z, h_old))
        _finish(st, b, j, pos, live, h, [(h, h_old, yh)])

    _each_unit(st, body)


def _rnn(st: _Step, ins: list[SSAValue], outs: list[SSAValue], scratch) -> None:  # noqa: ANN001
    k, a, d = st.k, st.a, st.d
    xw, rt = ins[:2]
    yh = outs[1]
    gates = scratch[0]
    _matmul(st, yh, rt, gates, 0, st.hidden)

    def body(b, j, t, pos, live):  # noqa: ANN001, ANN202
        h_old = k.load_value(yh, [d, b, j])
        x = a.add(k.load_value(gates, [d, b, j]), k.load_value(xw, [d, t, b, j]))
        h = st.fn(0, x)
        _finish(st, b, j, pos, live, h, [(h, h_old, yh)])

    _each_unit(st, body)


CELLS: dict[type[Operation], Cell] = {
    graph.LstmScanOp: _lstm,
    graph.GruScanOp: _gru,
    graph.RnnScanOp: _rnn,
}


def lower_recurrence(ctx: LoweringContext, op: graph.RecurrenceOp) -> None:
    """One kernel: a parallel loop over directions (bidirectional layers run both
    at once on threads), each initializing its state from h0 (c0) and then
    sweeping the time steps in a sequential `reduction` loop."""
    dirs, steps, batch, gh = graph.shape_of(op.operands[0])
    hidden = graph.shape_of(op.operands[1])[1]
    wide = compute_type(storage_type(graph.element_type_of(op.operands[0])))
    scratch = [ctx.alloc(MemRefType(wide, [dirs, batch, gh]))]
    if isinstance(op, graph.GruScanOp) and not op.attr("linear_before_reset"):
        scratch.append(ctx.alloc(MemRefType(wide, [dirs, batch, hidden])))
    ins = [ctx.buffer(v) for v in op.operands]
    outs = [ctx.result_buffer(r) for r in op.results]
    k = ctx.kernel(op.name.removeprefix("graph."), ins, outs + scratch)
    k_ins = k.inputs
    k_outs, k_scratch = k.outputs[: len(outs)], k.outputs[len(outs) :]
    a = Arith(k, graph.element_type_of(op.operands[0]))
    reverse_of = graph.directions(op.attr("direction"))
    lens = k_ins[-1] if op.seq_lens is not None else None
    with k.loop(dirs) as d:
        states = [(k_ins[2], k_outs[1])]
        if isinstance(op, graph.LstmScanOp):
            states.append((k_ins[3], k_outs[2]))
        with k.nest([batch, hidden]) as (b, j):
            for src, dst in states:
                k.store_value(k.load_value(src, [d, b, j]), dst, [d, b, j])
        reverse = (
            reverse_of[0] if dirs == 1 else k.cmp_index(d, "eq", 1)
        )
        with k.loop(steps, loop.REDUCTION) as s:
            st = _Step(k, a, op, d, s, steps, hidden, reverse, lens, k_outs[0])
            CELLS[type(op)](st, k_ins, k_outs, k_scratch)


LOWERINGS: dict[type[Operation], Callable] = {cls: lower_recurrence for cls in CELLS}
