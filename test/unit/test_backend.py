"""smelt.backend: onnx's Backend API (prepare / run_model / run_node /
supports_device) over the CPU target, with shape-deciding inputs fixed per run."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import smelt.backend as backend
from smelt.errors import InvalidInput, SmeltError

OPSET = [helper.make_opsetid("", 17)]


def _relu() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=OPSET)


def _reshape() -> onnx.ModelProto:
    """y = reshape(x, shape): `shape` decides the output shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    return helper.make_model(
        helper.make_graph([node], "g", [x, s], [y]), opset_imports=OPSET
    )


def test_devices():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")
    assert not backend.supports_device("TPU")
    with pytest.raises(SmeltError, match="CPU device"):
        backend.prepare(_relu(), "CUDA")


def test_run_model_by_position_and_by_name():
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    (y,) = backend.run_model(_relu(), [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    outputs = backend.prepare(_relu()).run({"x": x})
    np.testing.assert_array_equal(outputs["y"], outputs[0])


def test_a_shape_input_is_fixed_per_value():
    rep = backend.prepare(_reshape())
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(rep._compiled) == 2  # one compile per distinct value
    with pytest.raises(InvalidInput, match="decide output shapes"):
        rep.run([x])


def test_a_model_smelt_refuses_fails_in_prepare():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.com")
    graph = helper.make_graph([node], "g", [x], [x])
    graph.output[0].name = "y"
    model = helper.make_model(
        graph, opset_imports=[*OPSET, helper.make_opsetid("example.com", 1)]
    )
    with pytest.raises(SmeltError, match="NoSuchOp"):
        backend.prepare(model)


def test_unknown_options_are_refused():
    with pytest.raises(SmeltError, match="unknown options"):
        backend.prepare(_relu(), fast=True)
    backend.prepare(_relu(), level="O1", rtol=1e-3)  # the runner's own: ignored


def test_run_node():
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a, b = np.ones((2, 2), np.float32), np.full((2, 2), 2, np.float32)
    (c,) = backend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, a + b)
