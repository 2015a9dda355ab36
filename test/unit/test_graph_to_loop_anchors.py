"""convert-graph-to-loop, continued: windows (conv, pools) and contractions, fused
regions, the IR contract of the lowered module and the error cases (helpers and
the strict loop interpreter's check from test_convert_graph_to_loop.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_convert_graph_to_loop import Graph, check, ints, lower, main_of, randn
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.parser import Parser

from smelt.dialects import dtypes, graph, loop
from smelt.errors import SmeltError
from smelt.universe import make_context

# --- windows and contractions --------------------------------------------------------

# (input, weight, strides, pads, dilations, group): padding, strides, dilations, groups
CONVS = [
    ((1, 3, 7, 6), (4, 3, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1),
    ((2, 4, 7, 5), (6, 2, 3, 2), [2, 1], [0, 2, 1, 0], [1, 2], 2),
    ((1, 3, 5, 5), (3, 1, 3, 3), [1, 2], [2, 2, 2, 2], [2, 1], 3),
    ((1, 2, 4, 4), (5, 2, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1),
]


def _nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1])


@pytest.mark.parametrize("case", CONVS, ids=range(len(CONVS)))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_conv2d(case, dtype, layout):
    """NHWC: input NHWC, weights OHWI (a run-time input: packed by a copy kernel)."""
    x, w, strides, pads, dilations, group = case
    if layout == "nhwc":
        x, w = _nhwc(x), _nhwc(w)
    g = Graph(randn(*x, dtype=dtype), randn(*w, dtype=dtype), randn(w[0], dtype=dtype))
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    tol = 1e-4 if dtype is np.float32 else 1e-2
    check(g, g(graph.Conv2dOp, *g.args, layout=layout, **attrs), rtol=tol, atol=tol)


# (kernel, strides, pads, dilations, ceil_mode): windows cut by pads and by ceil_mode
POOLS = [
    ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),
    ([2, 3], [2, 2], [0, 1, 0, 1], [1, 1], 1),
    ([3, 2], [3, 1], [1, 0, 1, 1], [2, 1], 1),
]


@pytest.mark.parametrize("case", POOLS, ids=range(len(POOLS)))
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_pools(case, layout):
    names = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode")
    attrs = dict(zip(names, case, strict=True), layout=layout)
    g = Graph(randn(*((2, 7, 6, 3) if layout == "nhwc" else (2, 3, 7, 6))))
    outs = [g(graph.MaxPoolOp, g.args[0], **attrs)]
    for include in (0, 1):
        outs.append(
            g(graph.AveragePoolOp, g.args[0], count_include_pad=include, **attrs)
        )
    outs.append(g(graph.GlobalAveragePoolOp, g.args[0], layout=layout))
    check(g, *outs)


@pytest.mark.parametrize(
    "a,b",
    [
        ((3, 4), (4, 5)),
        ((4,), (4, 5)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 1, 3, 4), (5, 4, 2)),
    ],
)
def test_matmul(a, b):
    g = Graph(randn(*a), randn(*b))
    check(g, g(graph.MatMulOp, *g.args))


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm(trans_a, trans_b):
    a = randn(4, 3) if trans_a else randn(3, 4)
    b = randn(5, 4) if trans_b else randn(4, 5)
    g = Graph(a, b, randn(5), randn(3, 1))
    trans = {"trans_a": trans_a, "trans_b": trans_b}
    outs = [
        g(graph.GemmOp, *g.args[:3], alpha=1.0, beta=1.0, **trans),
        g(graph.GemmOp, *g.args[:2], g.args[3], alpha=0.5, beta=2.0, **trans),
    ]
    check(g, *outs)


# --- graph.fused ---------------------------------------------------------------------

CONV = {
    "strides": [1, 1],
    "pads": [1, 1, 1, 1],
    "dilations": [1, 1],
    "group": 1,
    "layout": "nchw",
}


def _kernels(module: ModuleOp) -> list[str]:
    return [f.sym_name.data for f in module.ops if loop.is_kernel(f)]


def test_fused_conv_residual_relu_is_one_kernel_after_the_pad():
    g = Graph(randn(1, 3, 5, 5), randn(4, 3, 3, 3), randn(4), randn(1, 4, 5, 5))
    conv = g(graph.Conv2dOp, *g.args[:3], **CONV)
    y = g(graph.ReluOp, g(graph.AddOp, conv, g.args[3]))
    module = check(g, y, fuse=True, rtol=1e-4, atol=1e-5)
    assert _kernels(module) == ["conv2d_pad_0", "fused_conv2d_0"]


@pytest.mark.parametrize("trans_b", [0, 1])
def test_fused_contraction_epilogues(trans_b):
    g = Graph(
        randn(3, 4), randn(4, 5), randn(5), randn(5, 4) if trans_b else randn(4, 5)
    )
    mm = g(graph.TanhOp, g(graph.AddOp, g(graph.MatMulOp, *g.args[:2]), g.args[2]))
    gemm = g(graph.GemmOp, g.args[0], g.args[3], g.args[2], alpha=0.5, beta=1.0,
             trans_a=0, trans_b=trans_b)  # fmt: skip
    module = check(g, mm, g(graph.ReluOp, gemm), fuse=True)
    assert _kernels(module) == ["fused_matmul_0", "fused_gemm_0"]


def test_fused_reductions_with_prologue_and_epilogue():
    g = Graph(
        randn(2, 3, 8),
        randn(8),
        randn(8),
        np.array(0.125, np.float32),
        randn(1, 2, 6, 6),
    )
    soft = g(graph.SoftmaxOp, g(graph.MulOp, g.args[0], g.args[3]), axis=-1)
    y, _, inv_std = g(
        graph.LayerNormOp,
        g(graph.ExpOp, g.args[0]),
        *g.args[1:3],
        axis=-1,
        epsilon=1e-5,
    )
    window = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    window |= {"dilations": [1, 1], "ceil_mode": 1, "layout": "nchw"}
    pool = g(graph.MaxPoolOp, g(graph.AbsOp, g.args[4]), **window)
    mean = g(
        graph.ReduceMeanOp, g(graph.MulOp, g.args[0], g.args[0]), axes=[1], keepdims=0
    )
    outs = [g(graph.NegOp, soft), g(graph.SigmoidOp, y), inv_std, g(graph.SqrtOp, pool),
            g(graph.SqrtOp, mean)]  # fmt: skip
    module = check(g, *outs, fuse=True, rtol=1e-4, atol=1e-5)
    # layer_norm's 1/std is used, so its y takes no epilogue (a graph-fuse rule)
    assert _kernels(module) == [
        "fused_layer_norm_0", "fused_softmax_0", "sigmoid_0", "fused_max_pool_0",
        "fused_reduce_mean_0",
    ]  # fmt: skip


def test_fused_elementwise_chain_with_two_outputs():
    g = Graph(randn(2, 3, 8), randn(3, 1))
    e = g(graph.ExpOp, g(graph.AddOp, *g.args))
    module = check(g, g(graph.TanhOp, g(graph.MulOp, e, e)), e, fuse=True)
    assert _kernels(module) == ["fused_elementwise_0", "fused_elementwise_1"]


# --- the IR contract ------------------------------------------------------------------


def test_main_signature_names_and_direct_output_writes():
    g = Graph(randn(2, 3), randn(3))
    y = g(graph.ReluOp, g(graph.AddOp, *g.args))
    module = lower(g.module(y, g(graph.TransposeOp, y, perm=[1, 0])))
    main = main_of(module)
    assert [str(t) for t in main.function_type.inputs] == [
        "memref<2x3xf32>", "memref<3xf32>", "memref<2x3xf32>", "memref<3x2xf32>",
    ]  # fmt: skip
    assert not main.function_type.outputs
    assert _kernels(module) == ["add_0", "relu_0", "transpose_0"]
    calls = [op for op in main.body.block.ops if isinstance(op, func.CallOp)]
    args = main.body.block.args
    assert calls[1].arguments[1] is args[2]  # relu writes output 0 directly
    assert calls[2].arguments[1] is args[3]
    allocs = [op for op in main.body.block.ops if isinstance(op, loop.AllocOp)]
    assert len(allocs) == 1  # only add's result is an intermediate


def test_outputs_that_are_inputs_constants_views_or_repeated_get_copies():
    g = Graph(randn(2, 3))
    weights = randn(4, 5)
    c = g.const(weights)
    r = g(graph.ReluOp, g.args[0])
    view = g(graph.ReshapeOp, r, result_types=[graph.tensor(dtypes.f32, [3, 2])])
    module = check(g, g.args[0], c, view, r, r, g(graph.IdentityOp, r))
    assert _kernels(module) == [
        "relu_0",
        "copy_0",
        "copy_1",
        "copy_2",
        "copy_3",
        "copy_4",
    ]
    constant = next(op for op in module.walk() if isinstance(op, loop.ConstantOp))
    assert graph.dense_to_array(constant.value).tobytes() == weights.tobytes()
    assert any(isinstance(op, loop.ViewOp) for op in module.walk())


def test_unsigned_types_are_signless_with_unsigned_ops():
    g = Graph(ints(0, 255, 6, dtype=np.uint8), ints(1, 255, 6, dtype=np.uint8))
    module = check(g, g(graph.DivOp, *g.args), g(graph.LessOp, *g.args),
                   g(graph.CastOp, g.args[0], to=dtypes.f32))  # fmt: skip
    assert "memref<6xi8>" in str(module) and "ui8" not in str(module)
    names = {op.name for op in module.walk()}
    assert {"arith.divui", "arith.uitofp"} <= names and "arith.divsi" not in names


def test_round_trip_and_loop_kinds():
    g = Graph(randn(3, 4), randn(4, 5))
    module = lower(g.module(g(graph.MatMulOp, *g.args)))
    text = str(module)
    reparsed = Parser(make_context(), text).parse_module()
    reparsed.verify()
    assert str(reparsed) == text
    kinds = [op.kind.data for op in module.walk() if isinstance(op, loop.ForOp)]
    assert loop.PARALLEL in kinds and loop.REDUCTION in kinds


def test_weights_stay_bytes():
    weights = randn(64, 64)
    g = Graph(randn(1, 64))
    module = lower(g.module(g(graph.MatMulOp, g.args[0], g.const(weights))))
    constant = next(op for op in module.walk() if isinstance(op, loop.ConstantOp))
    assert constant.value.data.data == weights.tobytes()
    assert "dense_resource<__elided__>" in str(module)


# --- errors ---------------------------------------------------------------------------


def test_unsupported_situations_raise_smelt_errors():
    g = Graph(ints(0, 9, 4))
    with pytest.raises(SmeltError, match="graph.sigmoid on i32"):
        lower(g.module(g(graph.SigmoidOp, g.args[0])))
    g = Graph(randn(4))
    with pytest.raises(SmeltError, match="cannot lower test.op"):
        g.block.add_op(unknown := _unknown_op(g.args[0]))
        lower(g.module(unknown.results[0]))


def _unknown_op(value: SSAValue):
    from xdsl.dialects.test import TestOp

    return TestOp.create(operands=[value], result_types=[TensorType(dtypes.f32, [4])])


def test_fused_region_with_two_anchors_is_rejected():
    g = Graph(randn(2, 3), randn(3, 2))
    mm = g(graph.MatMulOp, *g.args)
    soft = g(graph.SoftmaxOp, mm, axis=-1)
    module = g.module(soft)
    group = [mm.owner, soft.owner]
    from smelt.passes.graph_fuse import Group, wrap

    wrap(Group(group))
    with pytest.raises(SmeltError, match="several anchors"):
        lower(module)
