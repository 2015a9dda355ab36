"""CompiledModel.run: fresh result arrays, or caller-owned ones reused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import smelt
from smelt.errors import SmeltError


def _relu_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_results_are_fresh_arrays():
    compiled = smelt.compile(_relu_model())
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
    first = compiled.run({"x": x})["y"]
    second = compiled.run({"x": -x})["y"]
    assert first is not second
    np.testing.assert_array_equal(first, np.maximum(x, 0))
    np.testing.assert_array_equal(second, np.maximum(-x, 0))


def test_results_written_into_caller_arrays():
    compiled = smelt.compile(_relu_model())
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
    out = np.full((3, 5), np.nan, np.float32)
    result = compiled.run({"x": x}, outputs={"y": out})
    assert result["y"] is out
    np.testing.assert_array_equal(out, np.maximum(x, 0))


@pytest.mark.parametrize(
    "outputs, message",
    [
        ({}, "missing output array(s) ['y']"),
        ({"y": np.empty((5, 3), np.float32)}, "output 'y' has shape [5, 3]"),
        ({"y": np.empty((3, 5), np.float64)}, "output 'y' must be a float32 array"),
        ({"y": np.empty((5, 3), np.float32).T}, "must be C-contiguous"),
    ],
)
def test_bad_output_arrays_are_named(outputs, message):
    compiled = smelt.compile(_relu_model())
    with pytest.raises(SmeltError) as error:
        compiled.run({"x": np.zeros((3, 5), np.float32)}, outputs=outputs)
    assert message in str(error.value)


def test_dropped_results_are_reused_held_ones_never():
    """A result the caller still holds (by name or through a view) is never
    overwritten by a later run; one it dropped may be reused."""
    compiled = smelt.compile(_relu_model())
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
    held = compiled.run({"x": x})["y"]
    view = compiled.run({"x": 2 * x})["y"][1:]  # only a view kept
    compiled.run({"x": 3 * x})  # dropped
    dropped_id = id(compiled.run({"x": 4 * x})["y"])
    again = compiled.run({"x": 5 * x})["y"]
    np.testing.assert_array_equal(held, np.maximum(x, 0))
    np.testing.assert_array_equal(view, np.maximum(2 * x, 0)[1:])
    np.testing.assert_array_equal(again, np.maximum(5 * x, 0))
    assert id(again) == dropped_id  # the dropped array was reused


def test_profile_times_every_kernel_call():
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    nodes = [
        helper.make_node("MatMul", ["x", "x"], ["t"]),
        helper.make_node("Softmax", ["t"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(nodes, "g", [x_info], [y_info])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = smelt.compile(model, profile=True)
    x = np.ones((64, 64), np.float32)
    for _ in range(3):
        compiled.run({"x": x})
    rows = compiled.profile()
    assert sorted(row.kernel for row in rows) == ["fused_matmul_0", "fused_softmax_0"]
    assert all(row.calls == 1 and 0 < row.seconds < 1 for row in rows)
    # reset: nothing ran since
    assert all(row.seconds == 0 for row in compiled.profile())


def test_profile_needs_profile_compile():
    compiled = smelt.compile(_relu_model())
    with pytest.raises(SmeltError, match="without profile=True"):
        compiled.profile()
