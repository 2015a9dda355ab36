"""Pools of any spatial rank and graph.max_pool_with_indices through
convert-graph-to-loop (loop interpreter and llvm target against the reference), and
the ONNX nodes behind them (3-D pools, MaxPool's Indices, training-mode
BatchNormalization) through smelt.compile at every CPU level."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from test_convert_graph_to_loop import Graph, check, randn

import smelt
from smelt.dialects import graph
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph

RNG = np.random.default_rng(11)
WINDOW = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode")

# (kernel, strides, pads, dilations, ceil_mode) over 3 spatial dims
POOLS_3D = [
    ([2, 2, 2], [1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1], 0),
    ([3, 2, 3], [2, 2, 1], [1, 0, 1, 1, 1, 0], [1, 2, 1], 1),
    ([2, 3, 2], [3, 1, 2], [0, 1, 0, 1, 1, 1], [2, 1, 2], 1),
]


@pytest.mark.parametrize("case", POOLS_3D, ids=range(len(POOLS_3D)))
def test_3d_pools(case):
    attrs = dict(zip(WINDOW, case, strict=True), layout="nchw")
    g = Graph(randn(2, 3, 6, 5, 7))
    outs = [g(graph.MaxPoolOp, g.args[0], **attrs)]
    for include in (0, 1):
        outs.append(
            g(graph.AveragePoolOp, g.args[0], count_include_pad=include, **attrs)
        )
    check(g, *outs)


# (input shape, kernel, strides, pads, dilations, ceil_mode)
INDEXED = [
    ((2, 3, 7, 6), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),
    ((1, 2, 7, 6), [2, 3], [2, 2], [0, 1, 1, 0], [2, 1], 1),
    ((1, 2, 5, 4, 6), [2, 2, 3], [1, 2, 2], [0, 1, 1, 1, 0, 1], [1, 1, 1], 1),
    ((1, 1, 1, 5), [2, 2], [1, 1], [1, 0, 1, 0], [2, 1], 0),  # empty windows: -1
]


def ties(shape, dtype=np.float32) -> np.ndarray:
    """Small integers, so that most windows hold their max more than once."""
    return RNG.integers(-3, 4, shape).astype(dtype)


@pytest.mark.parametrize("case", INDEXED, ids=range(len(INDEXED)))
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_with_indices(case, storage_order):
    shape, *window = case
    attrs = dict(zip(WINDOW, window, strict=True), layout="nchw")
    g = Graph(ties(shape))
    y, i = g(
        graph.MaxPoolWithIndicesOp, g.args[0], storage_order=storage_order, **attrs
    )
    check(g, y, i)


@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint8])
def test_max_pool_with_indices_other_types(dtype):
    attrs = dict(zip(WINDOW, INDEXED[0][1:], strict=True), layout="nchw")
    x = RNG.integers(0, 5, (2, 3, 7, 6)).astype(dtype)
    if dtype is np.int8:
        x -= 2
    g = Graph(x)
    y, i = g(graph.MaxPoolWithIndicesOp, g.args[0], storage_order=0, **attrs)
    check(g, y, i)


def test_max_pool_with_indices_nan_is_the_max():
    x = ties((1, 2, 6, 6))
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = x[0, 1, 4, 4] = np.nan
    attrs = dict(zip(WINDOW, INDEXED[0][1:], strict=True), layout="nchw")

    def build() -> tuple[Graph, list]:
        g = Graph(x)
        return g, g(graph.MaxPoolWithIndicesOp, g.args[0], storage_order=0, **attrs)

    g, outs = build()
    check(g, *outs)  # the kernels agree with the reference ...
    g, outs = build()
    got_y, got_i = run_graph(g.module(*outs), {"input_0": x}).values()
    # ... and the reference takes the first NaN as the max:
    # output (0, 0, 0, 0) covers x[0, 0, 0:2, 0:2]: its max is the NaN at (1, 1)
    assert np.isnan(got_y[0, 0, 0, 0]) and got_i[0, 0, 0, 0] == 1 * 6 + 1
    # output (0, 0, 1, 1) covers x[0, 0, 1:4, 1:4]: the first NaN, (1, 1), again
    assert got_i[0, 0, 1, 1] == 7 and got_i[0, 1, 2, 2] == 36 + 4 * 6 + 4


def _node_model(node, inputs, outputs, inits=(), opset=18):
    g = helper.make_graph([node], "m", inputs, outputs, list(inits))
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _compiled_matches_reference(model, feeds, rtol=1e-5, atol=1e-6):
    want = run_graph(import_model(model), feeds)
    for level in ("O0", "O1", "O2", "O3"):
        got = smelt.compile(model, "cpu", level=level).run(feeds)
        for name, w in want.items():
            assert got[name].dtype == w.dtype and got[name].shape == w.shape, level
            np.testing.assert_allclose(
                got[name], w, rtol=rtol, atol=atol, err_msg=level
            )
    return want


def test_onnx_max_pool_indices_3d_and_1d_compile():
    node = helper.make_node(
        "MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 3, 2], strides=[1, 2, 2],
        pads=[1, 0, 1, 0, 1, 1], storage_order=1,
    )  # fmt: skip
    model = _node_model(
        node, [_value("x", [1, 2, 5, 6, 4])],
        [_value("y", None), _value("i", None, TensorProto.INT64)],
    )  # fmt: skip
    assert "graph.max_pool_with_indices" in str(import_model(model))
    _compiled_matches_reference(model, {"x": ties((1, 2, 5, 6, 4))})
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3], strides=[2])
    model = _node_model(
        node, [_value("x", [2, 3, 9])],
        [_value("y", None), _value("i", None, TensorProto.INT64)],
    )  # fmt: skip
    want = _compiled_matches_reference(model, {"x": ties((2, 3, 9))})
    assert want["i"].shape == (2, 3, 4)


def test_onnx_batch_norm_training_compiles_to_existing_kernels():
    c = 3
    inits = [
        helper.make_tensor(n, TensorProto.FLOAT, [c], RNG.standard_normal(c).tolist())
        for n in ("s", "b", "m")
    ] + [helper.make_tensor("v", TensorProto.FLOAT, [c], [0.5, 1.0, 2.0])]
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
        training_mode=1, momentum=0.6, epsilon=1e-3,
    )  # fmt: skip
    model = _node_model(
        node, [_value("x", [2, c, 4, 5])],
        [_value("y", None), _value("rm", None), _value("rv", None)], inits, opset=15,
    )  # fmt: skip
    names = str(import_model(model))
    assert "graph.reduce_mean" in names and "graph.batch_norm" in names
    x = randn(2, c, 4, 5)
    want = _compiled_matches_reference(model, {"x": x}, rtol=1e-4, atol=1e-5)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    s, b, m0 = (np.array(t.float_data, np.float32) for t in inits[:3])
    v0 = np.array([0.5, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(want["rm"], m0 * 0.6 + mean * 0.4, rtol=1e-5)
    np.testing.assert_allclose(want["rv"], v0 * 0.6 + var * 0.4, rtol=1e-5)
    shape = (1, c, 1, 1)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-3)
    y = y * s.reshape(shape) + b.reshape(shape)
    np.testing.assert_allclose(want["y"], y, rtol=1e-4, atol=1e-5)
