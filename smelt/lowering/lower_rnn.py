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
from smelt.lowering.lower_elementwise import UNARY
from smelt.lowering.scalar_ops import Arith, storage_type


def _activation(
    a: Arith, name: str, alpha: float, beta: float, x: SSAValue
) -> SSAValue:
    """The ONNX recurrent activation `name` of x (see graph_rnn.ACTIVATIONS)."""
    zero, one = a.zero(), a.one()
    if name == "Relu":
        return a.max(x, zero)
    if name == "Tanh":
        return a.math(math.TanhOp, x)
    if name == "Sigmoid":
        return UNARY[graph.SigmoidOp](a, x)
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


@dataclass(frozen=True)
class _Unit:
    """One hidden unit j of batch entry b in a time step: the time position t its
    input is read at, the position pos of Y it writes, and whether the step is
    live (None: always; an i1 with seq_lens)."""

    b: Index
    j: Index
    t: Index
    pos: Index
    live: SSAValue | None


@dataclass
class _Step:
    """What one time step's nests share: the kernel, the buffers, the direction
    and step ivs."""

    k: KernelBuilder
    a: Arith
    op: graph.RecurrenceOp
    d: Index
    s: Index
    steps: int
    batch: int
    hidden: int
    reverse: SSAValue | bool  # an i1 when the direction loop decides it
    lens: SSAValue | None  # the seq_lens buffer [B]
    xw: SSAValue  # [D, S, B, G*H]
    gates: SSAValue  # scratch [D, B, G*H]: H_{t-1} * R^T
    y: SSAValue  # [S, D, B, H]

    def _positions(self, b: Index) -> tuple[Index, Index, SSAValue | None]:
        """(t, pos, live) of batch entry b. A finished entry writes 0 at the
        current step, a padding position in either direction."""
        k, s, last = self.k, self.s, self.steps - 1
        if self.lens is None:
            n, live = None, None
        else:
            n = k.op(arith.IndexCastOp, k.load(self.lens, [b]), IndexType())
            n = k.clamp(n, 0, self.steps)
            live = k.op(arith.CmpiOp, s, n, "slt")
        if n is None:
            back = k.affine([(s, -1)], last)
        else:
            back = k.clamp(k.op(arith.SubiOp, k.affine([(n, 1)], -1), s), 0, last)
        if isinstance(self.reverse, bool):
            t = back if self.reverse else s
        else:
            t = k.op(arith.SelectOp, self.reverse, back, s)
        pos = t if live is None else k.op(arith.SelectOp, live, t, s)
        return t, pos, live

    def units(self, body: Callable[[_Unit], None]) -> None:
        """body(unit) over batch entries (outer) and hidden units (inner)."""
        with self.k.loop(self.batch) as b:
            t, pos, live = self._positions(b)
            with self.k.loop(self.hidden) as j:
                body(_Unit(b, j, t, pos, live))

    def column(self, u: _Unit, q: int) -> Index:
        return self.k.affine([(u.j, 1)], q * self.hidden)

    def gate(self, u: _Unit, q: int) -> SSAValue:
        """Gate q's recurrent product H_{t-1} * R_q^T at u."""
        return self.k.load_value(self.gates, [self.d, u.b, self.column(u, q)])

    def x(self, u: _Unit, q: int) -> SSAValue:
        """Gate q's input projection (with its biases) at u."""
        return self.k.load_value(self.xw, [self.d, u.t, u.b, self.column(u, q)])

    def pre(self, u: _Unit, q: int) -> SSAValue:
        return self.a.add(self.gate(u, q), self.x(u, q))

    def state(self, buffer: SSAValue, u: _Unit) -> SSAValue:
        return self.k.load_value(buffer, [self.d, u.b, u.j])

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
        assert not isinstance(self.reverse, bool)
        return self.a.select(self.reverse, _activation(self.a, *specs[1], x), first)

    def finish(
        self, u: _Unit, h: SSAValue, states: list[tuple[SSAValue, SSAValue, SSAValue]]
    ) -> None:
        """Stores h in Y and each (new, old, buffer) state; a finished entry keeps
        its old state and writes 0."""
        k, a, live = self.k, self.a, u.live
        k.store_value(h if live is None else a.select(live, h, a.zero()), self.y,
                      [u.pos, self.d, u.b, u.j])  # fmt: skip
        for new, old, buffer in states:
            value = new if live is None else a.select(live, new, old)
            k.store_value(value, buffer, [self.d, u.b, u.j])

    def matmul(self, lhs: SSAValue, rt: SSAValue, lo: int, hi: int) -> None:
        """gates[d, b, n] = sum_k lhs[d, b, k] * rt[d, k, n] for n in [lo, hi): a
        zero fill, then a b-k-n band accumulating in gates (n innermost and
        contiguous, so that it vectorizes)."""
        k, a, d, out = self.k, self.a, self.d, self.gates
        with k.nest([self.batch, hi - lo]) as (b, n):
            k.store_value(a.zero(), out, [d, b, k.affine([(n, 1)], lo)])
        with k.loop(self.batch) as b:
            with k.loop(self.hidden, loop.REDUCTION) as kk, k.loop(hi - lo) as n:
                col = k.affine([(n, 1)], lo)
                x = k.load_value(lhs, [d, b, kk])
                y = k.load_value(rt, [d, kk, col])
                acc = k.load_value(out, [d, b, col])
                k.store_value(a.add(acc, a.mul(x, y)), out, [d, b, col])


# cell(step, kernel inputs, kernel outputs, scratch buffers) emits one time step
Cell = Callable[[_Step, list[SSAValue], list[SSAValue], list[SSAValue]], None]


def _lstm(
    st: _Step, ins: list[SSAValue], outs: list[SSAValue], scratch: list[SSAValue]
) -> None:
    """Gates i, o, f, c; peepholes p = (Pi, Po, Pf)."""
    k, a, d = st.k, st.a, st.d
    rt, p = ins[1], ins[4]
    yh, yc = outs[1], outs[2]
    st.matmul(yh, rt, 0, 4 * st.hidden)
    coupled = bool(st.op.attr("input_forget"))

    def body(u: _Unit) -> None:
        def peep(q: int) -> SSAValue:
            return k.load_value(p, [d, st.column(u, q)])

        h_old, c_old = st.state(yh, u), st.state(yc, u)
        i = st.fn(0, a.add(st.pre(u, 0), a.mul(peep(0), c_old)))
        if coupled:
            f = a.sub(a.one(), i)
        else:
            f = st.fn(0, a.add(st.pre(u, 2), a.mul(peep(2), c_old)))
        c = a.add(a.mul(f, c_old), a.mul(i, st.fn(1, st.pre(u, 3))))
        o = st.fn(0, a.add(st.pre(u, 1), a.mul(peep(1), c)))
        h = a.mul(o, st.fn(2, c))
        st.finish(u, h, [(h, h_old, yh), (c, c_old, yc)])

    st.units(body)


def _gru(
    st: _Step, ins: list[SSAValue], outs: list[SSAValue], scratch: list[SSAValue]
) -> None:
    """Gates z, r, h. Without linear_before_reset, (r * H_{t-1}) * Rh^T needs r
    first: a second matmul over the h columns, from the `rh` scratch."""
    k, a, d, hsz = st.k, st.a, st.d, st.hidden
    rt, rbh = ins[1], ins[3]
    yh = outs[1]
    before = bool(st.op.attr("linear_before_reset"))
    if before:
        st.matmul(yh, rt, 0, 3 * hsz)
    else:
        st.matmul(yh, rt, 0, 2 * hsz)
        rh = scratch[1]

        def reset(u: _Unit) -> None:
            r = st.fn(0, st.pre(u, 1))
            k.store_value(a.mul(r, st.state(yh, u)), rh, [d, u.b, u.j])

        st.units(reset)
        st.matmul(rh, rt, 2 * hsz, 3 * hsz)

    def body(u: _Unit) -> None:
        h_old = st.state(yh, u)
        z = st.fn(0, st.pre(u, 0))
        recurrent = a.add(st.gate(u, 2), k.load_value(rbh, [d, u.j]))
        if before:
            recurrent = a.mul(st.fn(0, st.pre(u, 1)), recurrent)
        candidate = st.fn(1, a.add(st.x(u, 2), recurrent))
        h = a.add(a.mul(a.sub(a.one(), z), candidate), a.mul(z, h_old))
        st.finish(u, h, [(h, h_old, yh)])

    st.units(body)


def _rnn(
    st: _Step, ins: list[SSAValue], outs: list[SSAValue], scratch: list[SSAValue]
) -> None:
    yh = outs[1]
    st.matmul(yh, ins[1], 0, st.hidden)

    def body(u: _Unit) -> None:
        h = st.fn(0, st.pre(u, 0))
        st.finish(u, h, [(h, st.state(yh, u), yh)])

    st.units(body)


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
        reverse = reverse_of[0] if dirs == 1 else k.cmp_index(d, "eq", 1)
        with k.loop(steps, loop.REDUCTION) as s:
            st = _Step(
                k, a, op, d, s, steps, batch, hidden, reverse, lens,
                k_ins[0], k_scratch[0], k_outs[0],
            )  # fmt: skip
            CELLS[type(op)](st, k_ins, k_outs, k_scratch)


LOWERINGS: dict[type[Operation], Callable] = {cls: lower_recurrence for cls in CELLS}
