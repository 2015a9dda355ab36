"""NHWC convs and pools through the CPU presets (implicit GEMM schedule, compile-
time packed weights, unrolled pool windows) on awkward shapes, against
onnxruntime: groups, depthwise, strides, dilations, asymmetric pads, channel
counts below / not divisible by the vector width, fused epilogues."""

from __future__ import annotations

import numpy as np
import pytest
from models import rel_error, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.instrument import module_text

# (N, C, H, W, O, kernel, strides, pads, dilations, group)
CONVS = [
    (1, 3, 9, 11, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),
    (2, 5, 7, 6, 17, (3, 2), (1, 1), (0, 1, 2, 0), (1, 1), 1),
    (1, 16, 6, 6, 40, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (1, 12, 5, 5, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12),  # depthwise
    (1, 8, 7, 7, 24, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 4),  # grouped 1x1
    (1, 6, 9, 9, 9, (3, 3), (2, 1), (2, 2, 2, 2), (2, 2), 3),  # grouped, dilated
    (1, 300, 4, 4, 20, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # channels > kc
    (1, 2, 8, 8, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # 3 outputs per group
]
LEVELS = ["O1", "O2"]


def _conv_model(case, relu: bool, seed: int):
    n, c, h, w, o, kernel, strides, pads, dilations, group = case
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((o, c // group, *kernel)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node(
            "Conv", ["x", "w", "b"], ["c" if relu else "y"], kernel_shape=kernel,
            strides=strides, pads=pads, dilations=dilations, group=group,
        )
    ]  # fmt: skip
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph(nodes, "conv", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _pool_model(op: str, shape, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)], "p", [x], [y]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, shape, level: str) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    spec = pipelines.preset("cpu", level).replace(
        pipelines.GRAPH_OPT, pipelines.GRAPH_OPT_NHWC
    )
    ours = smelt.compile(model, "cpu", pipeline=spec).run({"x": x})["y"]
    theirs = run_onnxruntime(model, {"x": x})["y"]
    assert ours.shape == theirs.shape
    assert rel_error(ours, theirs) <= 1e-5


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv(case: int, level: str) -> None:
    model = _conv_model(CONVS[case], relu=case % 2 == 0, seed=case)
    _check(model, CONVS[case][:2] + CONVS[case][2:4], level)


POOLS = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 3], "strides": [2, 1], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    (
        "AveragePool",
        {
            "kernel_shape": [3, 2],
            "strides": [2, 2],
            "pads": [1, 0, 1, 1],
            "count_include_pad": 1,
        },
    ),
    ("AveragePool", {"kernel_shape": [9, 9]}),  # too big a window to unroll
    ("GlobalAveragePool", {}),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", range(len(POOLS)))
def test_pool(case: int, level: str) -> None:
    op, attrs = POOLS[case]
    shape = (2, 11, 9, 10)
    _check(_pool_model(op, shape, **attrs), shape, level)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("channels", [40, 7])
def test_global_average_pool_sums_channel_rows(channels: int, threads: int) -> None:
    """conv + relu + GlobalAveragePool + softmax in NHWC: the pool accumulates
    each position's row of channels in its output (a vector loop inside the
    loops over positions), not each channel over positions at a stride."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((channels, 5, 3, 3)).astype(np.float32)
    weight = numpy_helper.from_array(w, "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Softmax", ["p"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "gap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 9, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((2, 5, 9, 7)).astype(np.float32)
    expected = run_onnxruntime(model, {"x": x})["y"]
    got = smelt.compile(model, "cpu", threads=threads).run({"x": x})["y"]
    assert got.shape == expected.shape
    assert rel_error(got, expected) < 1e-5

    spec = pipelines.preset("cpu", "O2", threads, "host")
    text = module_text(lower(import_graph(model), spec))
    pool = text[text.index("global_average_pool") :]
    pool = pool[: pool.index("func.return")]
    assert "reduction {" in pool and "iter_args" not in pool, pool
    if channels >= 16:
        assert "vector.load" in pool, pool


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cpu", ["host", "x86-64-v3"])
def test_max_pool_propagates_nan_without_signed_zeros(cpu: str, threads: int) -> None:
    """MaxPool's window maximum is built without signed zeros (fastmath nsz:
    one vmaxps and a NaN check per element on x86): a NaN anywhere in a window
    still makes that output NaN, as numpy.maximum would, every other output is
    the window's maximum, and a window of zeros gives a zero of either sign."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])
    graph = helper.make_graph(
        [node], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 40, 11, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(5).standard_normal((1, 40, 11, 13)).astype(np.float32)
    x[0, 3, 4, 4] = np.nan  # inside four windows
    x[0, 17, 0, 12] = np.nan  # a corner: one window
    x[0, 30, 5, 5] = -np.inf
    x[0, 8] = 0.0
    x[0, 8, 1::2] = -0.0
    x[0, 9] = -0.0
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
    expected = windows[:, :, ::2, ::2].max(axis=(-2, -1))  # NaN-propagating
    got = smelt.compile(model, "cpu", threads=threads, cpu=cpu).run({"x": x})["y"]
    assert got.shape == expected.shape
    assert np.isnan(expected).sum() == 5
    np.testing.assert_array_equal(got, expected)  # NaN == NaN, -0.0 == 0.0 here
