"""Reductions and axis sweeps on the compiled CPU path where the ONNX conformance
cases miss something: opsets with axes as attributes, f16 and integer inputs, NaN,
ties, constant CumSum axes (the cases feed theirs as a graph input), 2-D coercion of
LogSoftmax / Hardmax before opset 13. onnxruntime or numpy is the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from models import run_onnxruntime
from onnx import TensorProto, ValueInfoProto, helper, numpy_helper

import smelt

RNG = np.random.default_rng(7)
ONNX_TYPE = {
    np.float32: TensorProto.FLOAT,
    np.float16: TensorProto.FLOAT16,
    np.int32: TensorProto.INT32,
    np.int64: TensorProto.INT64,
}


def model_of(node, x: np.ndarray, outputs=("y",), opset=13, inits=()):
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", ONNX_TYPE[x.dtype.type], x.shape)],
        [ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(v, name) for name, v in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def compiled(model, x: np.ndarray) -> dict[str, np.ndarray]:
    return smelt.compile(model, "cpu").run({"x": x})


def check_against_ort(model, x: np.ndarray, rtol=1e-6, atol=0.0):
    got, want = compiled(model, x), run_onnxruntime(model, {"x": x})
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_opset13_axes_attribute(op, dtype, keepdims):
    x = (RNG.random((3, 4, 5)) * 4 - 2).astype(dtype) if dtype == np.float32 else (
        RNG.integers(-3, 4, (3, 4, 5)).astype(dtype)
    )
    node = helper.make_node(op, ["x"], ["y"], axes=[0, -1], keepdims=keepdims)
    check_against_ort(model_of(node, x), x, rtol=1e-5)


def test_reduce_prod_f16_accumulates_in_f32():
    """Near-1 factors: an f16 running product would drift by many ulps."""
    x = (1 + (RNG.random((2, 256)) - 0.5) / 64).astype(np.float16)
    node = helper.make_node("ReduceProd", ["x"], ["y"], axes=[1], keepdims=0)
    got = compiled(model_of(node, x), x)["y"]
    want = np.prod(x.astype(np.float64), axis=1).astype(np.float16)
    np.testing.assert_array_equal(got, want)


def test_reduce_min_noop_with_empty_axes_and_nan():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    x[1, 2] = np.nan
    node = helper.make_node("ReduceMin", ["x"], ["y"], noop_with_empty_axes=1)
    np.testing.assert_array_equal(compiled(model_of(node, x, opset=18), x)["y"], x)
    node = helper.make_node("ReduceMin", ["x"], ["y"], keepdims=0)
    got = compiled(model_of(node, x, opset=18), x)["y"]
    assert got.shape == () and np.isnan(got)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce_nan_and_ties_like_numpy(op, last):
    x = RNG.integers(0, 3, (4, 6)).astype(np.float32)
    x[1, [1, 4]] = np.nan
    x[2, :] = -np.inf if op == "ArgMax" else np.inf
    node = helper.make_node(
        op, ["x"], ["y"], axis=1, keepdims=0, select_last_index=last
    )
    got = compiled(model_of(node, x), x)["y"]
    find = np.argmax if op == "ArgMax" else np.argmin
    want = 5 - find(x[:, ::-1], axis=1) if last else find(x, axis=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum_constant_axis(dtype, exclusive, reverse):
    x = RNG.integers(-5, 6, (3, 7)).astype(dtype)
    node = helper.make_node(
        "CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse
    )
    axis = ("axis", np.array(-1, np.int64))
    check_against_ort(model_of(node, x, opset=14, inits=[axis]), x)


def test_cumprod_constant_axis_matches_numpy():
    x = RNG.integers(1, 4, (4, 3)).astype(np.int64)
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=1, reverse=1)
    axis = ("axis", np.array([0], np.int32))
    got = compiled(model_of(node, x, opset=26, inits=[axis]), x)["y"]
    flipped = np.cumprod(x[::-1], axis=0)
    want = np.concatenate([np.ones((1, 3), np.int64), flipped[:-1]])[::-1]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_cumsum_computed_axis(axis):
    """The axis is a run-time input (it used to be refused): every value works."""
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("axis", TensorProto.INT64, []),
        ],
        [ValueInfoProto(name="y")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    compiled = smelt.compile(model, "cpu")
    got = compiled.run({"x": x, "axis": np.array(axis, np.int64)})["y"]
    np.testing.assert_allclose(got, np.cumsum(x, axis=axis), rtol=1e-6)


@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_ties_and_nan_in_numpy_sort_order(largest):
    x = RNG.integers(0, 4, (3, 9)).astype(np.float32)
    x[0, [2, 6]] = np.nan
    k = ("k", np.array([5], np.int64))
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest)
    got = compiled(model_of(node, x, ("v", "i"), opset=11, inits=[k]), x)
    if largest:
        order = 8 - np.argsort(x[:, ::-1], axis=1, kind="stable")[:, ::-1]
    else:
        order = np.argsort(x, axis=1, kind="stable")
    np.testing.assert_array_equal(got["i"], order[:, :5])
    np.testing.assert_array_equal(got["v"], np.take_along_axis(x, order[:, :5], 1))


def test_top_k_opset1_attribute_and_int64_against_ort():
    x = RNG.integers(-50, 50, (2, 3, 8)).astype(np.float32)
    node = helper.make_node("TopK", ["x"], ["v", "i"], k=3, axis=1)
    model = model_of(node, x, ("v", "i"), opset=1)
    got = compiled(model, x)
    order = 2 - np.argsort(x[:, ::-1], axis=1, kind="stable")[:, ::-1]
    np.testing.assert_array_equal(got["i"], order)
    x64 = RNG.integers(-50, 50, (4, 10)).astype(np.int64)
    k = ("k", np.array([4], np.int64))
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=0)
    check_against_ort(model_of(node, x64, ("v", "i"), opset=11, inits=[k]), x64)


@pytest.mark.parametrize("op", ["LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family_axes_and_coercion(op, opset):
    x = (RNG.standard_normal((2, 3, 4)) * 30).astype(np.float32)
    x[1, 1, :2] = x[1, 1, 2]  # ties for Hardmax: the first one wins
    node = helper.make_node(op, ["x"], ["y"], axis=1)
    check_against_ort(model_of(node, x, opset=opset), x, rtol=1e-5, atol=1e-5)


def test_log_softmax_f16_large_values():
    x = (RNG.standard_normal((3, 16)) * 1000).astype(np.float16)
    node = helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)
    got = compiled(model_of(node, x), x)["y"]
    w = x.astype(np.float64)
    shifted = w - w.max(axis=-1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want.astype(np.float16), rtol=1e-3)
