"""convert-graph-to-loop: every graph op lowered, run by the strict loop interpreter
(bounds-checked, unwritten outputs visible) and by the llvm target, against the
numpy reference executor; plus the IR contract and the error cases."""

from __future__ import annotations

import numpy as np
import pytest
from loop_interp import Interpreter, sentinel
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region, SSAValue

from smelt.dialects import dtypes, graph
from smelt.lowering.convert_graph_to_loop import VOCABULARY, ConvertGraphToLoopPass
from smelt.lowering.llvm.jit import compile_to_native
from smelt.passes.graph_fuse import GraphFusePass
from smelt.reference.executor import run_graph
from smelt.universe import make_context

RNG = np.random.default_rng(7)


def randn(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def ints(lo: int, hi: int, *shape: int, dtype=np.int32) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(dtype)


class Graph:
    """Builds a graph-level @main over numpy inputs, op by op."""

    def __init__(self, *inputs: np.ndarray):
        self.inputs = [np.asarray(a) for a in inputs]
        types = [graph.tensor(dtypes.from_numpy(a.dtype), a.shape) for a in self.inputs]
        self.block = Block(arg_types=types)
        self.args = list(self.block.args)

    def __call__(self, cls, *operands: SSAValue, **attrs):
        op = cls.build(list(operands), **attrs)
        self.block.add_op(op)
        return op.results[0] if len(op.results) == 1 else list(op.results)

    def const(self, array: np.ndarray) -> SSAValue:
        op = graph.ConstantOp.from_array(np.asarray(array))
        self.block.add_op(op)
        return op.result

    def module(self, *outputs: SSAValue) -> ModuleOp:
        self.block.add_op(func.ReturnOp(*outputs))
        ftype = ([a.type for a in self.args], [o.type for o in outputs])
        main = func.FuncOp("main", ftype, Region(self.block))
        module = ModuleOp([main])
        module.verify()
        return module


def lower(module: ModuleOp, fuse: bool = False) -> ModuleOp:
    if fuse:
        GraphFusePass().apply(make_context(), module)
    ConvertGraphToLoopPass().apply(make_context(), module)
    module.verify()
    return module


def main_of(module: ModuleOp) -> func.FuncOp:
    return next(f for f in module.ops if f.sym_name.data == "main")


def check(g: Graph, *outputs: SSAValue, rtol=1e-5, atol=1e-6, fuse=False, native=True):
    """Lowers, then compares the interpreter and the native code with the reference."""
    module = g.module(*outputs)
    names = [f"input_{i}" for i in range(len(g.inputs))]
    expected = list(run_graph(module, dict(zip(names, g.inputs))).values())
    lower(module, fuse)
    assert {op.name for op in module.walk()} <= VOCABULARY
    types = main_of(module).function_type.inputs.data
    runs = {}
    args = [a.copy(order="C").view(sentinel(t).dtype) for a, t in zip(g.inputs, types)]
    outs = [sentinel(t) for t in types[len(g.inputs) :]]
    Interpreter(module).run("main", args + outs)
    runs["interpreter"] = outs
    if native:
        outs = [np.full(e.shape, 77, e.dtype) for e in expected]
        compile_to_native(module).run([a.copy(order="C") for a in g.inputs] + outs)
        runs["llvm"] = outs
    for how, outs in runs.items():
        for want, got in zip(expected, outs, strict=True):
            got = got.view(want.dtype)
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=how)
            else:
                np.testing.assert_array_equal(got, want, err_msg=how)
    return module


# --- elementwise -------------------------------------------------------------------

UNARY = [
    graph.ReluOp, graph.SigmoidOp, graph.TanhOp, graph.ExpOp, graph.ErfOp, graph.NegOp,
    graph.AbsOp, graph.FloorOp, graph.CeilOp,
]  # fmt: skip
BINARY = [
    graph.AddOp, graph.SubOp, graph.MulOp, graph.DivOp, graph.MaxOp, graph.MinOp,
    graph.EqualOp, graph.LessOp, graph.GreaterOp,
]  # fmt: skip


@pytest.mark.parametrize("cls", UNARY, ids=lambda c: c.name)
def test_unary_f32(cls):
    x = randn(2, 3, 5) * 4
    x[0, 0, :3] = [0.0, -0.0, 100.0]  # sigmoid(-100) must not round to 0
    g = Graph(x)
    check(g, g(cls, g.args[0]))


@pytest.mark.parametrize("cls", [graph.LogOp, graph.SqrtOp, graph.ReciprocalOp])
def test_unary_positive(cls):
    g = Graph(np.abs(randn(7)) + 0.1)
    check(g, g(cls, g.args[0]))


@pytest.mark.parametrize("cls", BINARY + [graph.PowOp], ids=lambda c: c.name)
def test_binary_broadcast_f32(cls):
    g = Graph(np.abs(randn(2, 1, 5)) + 0.5, randn(3, 1))
    check(g, g(cls, *g.args))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_elementwise(dtype):
    signed = np.dtype(dtype).kind == "i"
    a = ints(-60 if signed else 0, 60, 3, 5, dtype=dtype)
    b = ints(-7 if signed else 1, 8, 5, dtype=dtype)
    b[b == 0] = 3
    g = Graph(a, b)
    outs = [g(cls, *g.args) for cls in BINARY + [graph.PowOp]]
    outs += [g(cls, g.args[0]) for cls in (graph.NegOp, graph.AbsOp, graph.ReluOp)]
    check(g, *outs, native=dtype is np.int32)


def test_integer_pow_negative_exponent_and_div_truncation():
    a = np.array([-3, -1, 0, 1, 2, 3, -2, 5, -7, 7], np.int32)
    b = np.array([-2, -3, 3, -1, 5, 0, 3, -1, 2, -2], np.int32)
    g = Graph(a, b)
    check(g, g(graph.PowOp, *g.args), g(graph.DivOp, *g.args))


@pytest.mark.parametrize("cls, x", [
    (graph.SignOp, randn(3, 7) * 3), (graph.RoundOp, randn(3, 7) * 3),
    (graph.SinOp, randn(9) * 3), (graph.CosOp, randn(9) * 3),
    (graph.TanOp, randn(9)), (graph.AtanOp, randn(9) * 3),
    (graph.SinhOp, randn(9) * 3), (graph.CoshOp, randn(9) * 3),
    (graph.AsinhOp, randn(9) * 3), (graph.AsinOp, randn(9) * 0.3),
    (graph.AcosOp, randn(9) * 0.3), (graph.AtanhOp, randn(9) * 0.3),
    (graph.AcoshOp, np.abs(randn(9)) + 1),
], ids=lambda v: getattr(v, "name", ""))  # fmt: skip
def test_unary_f32_trig_sign_round(cls, x):
    x.reshape(-1)[:3] = [0.5, -2.5, 0.0]  # halves round to even
    if cls is graph.AcoshOp:
        x.reshape(-1)[:3] += 2
    g = Graph(x)
    check(g, g(cls, g.args[0]))


def test_float_compare_mod_prelu_and_specials():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5.5, -5.5, 2.0], np.float32)
    y = np.array([1.0, 2.0, 2.0, -1.0, 3.0, -2.0, 2.0, 2.0], np.float32)
    g = Graph(x, y)
    a, b = g.args
    outs = [
        g(graph.LessEqualOp, a, b), g(graph.GreaterEqualOp, a, b),
        g(graph.ModOp, a, b, fmod=0), g(graph.ModOp, a, b, fmod=1),
        g(graph.PreluOp, a, b), g(graph.IsNanOp, a), g(graph.SignOp, a),
        g(graph.IsInfOp, a, detect_negative=1, detect_positive=1),
        g(graph.IsInfOp, a, detect_negative=0, detect_positive=1),
        g(graph.IsInfOp, a, detect_negative=1, detect_positive=0),
    ]  # fmt: skip
    check(g, *outs)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_bitwise_shift_mod_sign(dtype):
    info = np.iinfo(dtype)
    a = ints(info.min, info.max, 4, 9, dtype=dtype)
    b = ints(-9 if info.min else 0, 10, 9, dtype=dtype)
    b[:2] = 0  # x mod 0 is 0
    width = info.bits
    n = ints(0, width + 3, 4, 9, dtype=dtype)  # some amounts shift every bit out
    g = Graph(a, b, n)
    x, y, k = g.args
    outs = [g(cls, x, y) for cls in (graph.AndOp, graph.OrOp, graph.XorOp)]
    outs += [g(graph.ModOp, x, y, fmod=0), g(graph.ModOp, x, y, fmod=1)]
    outs += [g(graph.ShiftLeftOp, x, k), g(graph.ShiftRightOp, x, k)]
    outs += [g(graph.NotOp, x), g(graph.SignOp, x), g(graph.PreluOp, x, y)]
    outs += [g(graph.LessEqualOp, x, y), g(graph.GreaterEqualOp, x, y)]
    check(g, *outs, native=dtype in (np.int8, np.uint32))


def test_logical_ops_on_bool():
    a, b = RNG.random((3, 5)) < 0.5, RNG.random(5) < 0.5
    g = Graph(a, b)
    x, y = g.args
    outs = [g(cls, x, y) for cls in (graph.AndOp, graph.OrOp, graph.XorOp)]
    check(g, *outs, g(graph.NotOp, x))


def test_leaky_relu_clip_where():
    g = Graph(randn(4, 5), np.array([-0.5], np.float32), np.array(0.7, np.float32))
    cond = g(graph.GreaterOp, g.args[0], g.args[1])
    outs = [
        g(graph.LeakyReluOp, g.args[0], alpha=0.1),
        g(graph.ClipOp, *g.args),
        g(graph.WhereOp, cond, g.args[0], g(graph.NegOp, g.args[0])),
    ]
    check(g, *outs)


CAST_SOURCES = {
    np.float32: np.array(
        [-300.7, -2.5, -1.0, -0.5, 0, 0.5, 1.9, 2.5, 99.9], np.float32
    ),
    np.float16: np.array([-2.5, -1.0, 0, 0.5, 1.9, 100], np.float16),
    np.float64: np.array([-2.5, -1.0, 0, 0.5, 1.9, 1e10], np.float64),
    np.int8: np.array([-128, -1, 0, 1, 127], np.int8),
    np.uint8: np.array([0, 1, 128, 255], np.uint8),
    np.int64: np.array([-(2**40), -1, 0, 1, 2**40], np.int64),
    np.bool_: np.array([True, False, True]),
}
CAST_TARGETS = [
    np.float32,
    np.float64,
    np.float16,
    np.int8,
    np.uint8,
    np.int64,
    np.bool_,
]


@pytest.mark.parametrize("src", list(CAST_SOURCES), ids=lambda t: np.dtype(t).name)
def test_cast(src):
    x = CAST_SOURCES[src]
    g = Graph(x)
    outs = []
    for dst in CAST_TARGETS:
        if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu":
            if dst in (np.int8, np.uint8):  # numpy leaves out-of-range casts undefined
                continue
            if src is np.float64:
                continue
        outs.append(g(graph.CastOp, g.args[0], to=dtypes.from_numpy(np.dtype(dst))))
    # f64 -> f16 is checked by the interpreter only: llvmlite lacks __truncdfhf2.
    check(g, *outs, rtol=1e-3, native=src is not np.float64)


def test_f16_elementwise_computes_in_f32():
    g = Graph(randn(3, 4, dtype=np.float16), randn(4, dtype=np.float16))
    module = check(g, g(graph.TanhOp, g(graph.MulOp, *g.args)), rtol=2e-3, atol=1e-3)
    tanh = next(op for op in module.walk() if op.name == "math.tanh")
    assert str(tanh.results[0].type) == "f32"


# --- reductions and normalizations ---------------------------------------------------


@pytest.mark.parametrize(
    "cls",
    [
        graph.ReduceSumOp,
        graph.ReduceMeanOp,
        graph.ReduceMaxOp,
        graph.ReduceMinOp,
        graph.ReduceProdOp,
    ],
)
@pytest.mark.parametrize("axes,keep", [((), 1), ((1,), 0), ((0, 2), 1), ((-1,), 0)])
def test_reduce(cls, axes, keep):
    g = Graph(randn(2, 3, 5), ints(-9, 9, 3, 5))
    outs = [g(cls, g.args[0], axes=axes, keepdims=keep)]
    if len(axes) < 2:  # the integer operand has rank 2
        outs.append(g(cls, g.args[1], axes=axes, keepdims=keep))
    check(g, *outs, native=axes == (1,))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_and_layer_norm(axis):
    g = Graph(randn(2, 3, 5) * 3, randn(5), randn(3, 5))
    y, mean, inv_std = g(graph.LayerNormOp, *g.args, axis=axis, epsilon=1e-5)
    check(
        g,
        g(graph.SoftmaxOp, g.args[0], axis=axis),
        y,
        mean,
        inv_std,
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("axis", [0, -1])
def test_sweeps_along_an_axis(axis):
    """log_softmax, hardmax, arg_max / arg_min, cum_sum / cum_prod, top_k."""
    x = np.round(randn(3, 4, 5) * 2)  # ties
    g = Graph(x, ints(-4, 5, 4, 6))
    xs, ns = g.args
    outs = [
        g(graph.LogSoftmaxOp, xs, axis=axis),
        g(graph.HardmaxOp, xs, axis=axis),
        g(graph.ArgMaxOp, xs, axis=axis, keepdims=1, select_last_index=0),
        g(graph.ArgMinOp, ns, axis=axis, keepdims=0, select_last_index=1),
        g(graph.CumSumOp, xs, axis=axis, exclusive=1, reverse=0),
        g(graph.CumProdOp, ns, axis=axis, exclusive=0, reverse=1),
        *g(graph.TopKOp, xs, axis=axis, k=2, largest=int(axis == 0)),
    ]
    check(g, *outs, rtol=1e-5)


def test_batch_norm_lrn_global_average_pool():
    x = randn(2, 7, 3, 2)
    g = Graph(x, randn(7), randn(7), randn(7), np.abs(randn(7)))
    outs = [g(graph.BatchNormOp, *g.args, epsilon=1e-5)]
    for size in (1, 2, 5):
        outs.append(
            g(graph.LrnOp, g.args[0], size=size, alpha=0.1, beta=0.75, bias=1.0)
        )
    outs.append(g(graph.GlobalAveragePoolOp, g.args[0], layout="nchw"))
    check(g, *outs, rtol=1e-5)


# --- data movement -------------------------------------------------------------------


def test_transpose_concat_split_expand():
    g = Graph(randn(2, 3, 5), randn(2, 1, 5), randn(2, 4, 5), randn(3, 1))
    outs = [
        g(graph.TransposeOp, g.args[0], perm=[2, 0, 1]),
        g(graph.ConcatOp, *g.args[:3], axis=1),
        *g(graph.SplitOp, g.args[0], axis=-1, sizes=[2, 0, 3]),
        g(graph.ExpandOp, g.args[3], shape=[2, 3, 4]),
    ]
    check(g, *outs)


def test_slice_and_gather():
    g = Graph(
        randn(2, 3, 5),
        np.array([[0, -1], [4, 1]], np.int64),
        np.array([-3, 2], np.int32),
    )
    x = g.args[0]
    outs = [
        g(graph.SliceOp, x, starts=[1, 2, 4], ends=[2, -1, 0], steps=[1, -1, -2]),
        g(graph.SliceOp, x, starts=[0, 0, 1], ends=[2, 3, 5], steps=[1, 2, 3]),
        g(graph.GatherOp, x, g.args[1], axis=2),
        g(graph.GatherOp, x, g.args[2], axis=1),
    ]
    check(g, *outs)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad(mode):
    g = Graph(randn(2, 3, 5), np.array(2.5, np.float32))
    pads = [[0, 1, 2, 1, 0, 3], [1, -1, 0, 0, 2, -2], [0, 0, 7, 0, 0, 9]]
    check(g, *[g(graph.PadOp, *g.args, pads=p, mode=mode) for p in pads])
