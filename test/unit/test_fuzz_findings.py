"""Wrong answers that the coverage-guided fuzzer (test/fuzz/atheris_import.py)
found, each checked against onnxruntime and onnx's reference implementation."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import smelt


def unary(op: str, shape, opset: int = 17, **attrs):
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)], op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def oracles(model, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return [session.run(None, feeds)[0], ReferenceEvaluator(model).run(None, feeds)[0]]


@pytest.mark.parametrize("opset", [17, 22])
def test_softplus_of_large_inputs_is_the_input_not_inf(opset):
    """onnx's function body ln(e^x + 1) overflowed to inf from x = 89."""
    x = np.array([-1e30, -100, -20, -1, 0, 1, 20, 88, 89, 100, 1e23, np.inf, -np.inf],
                 np.float32)  # fmt: skip
    model = unary("Softplus", [x.size], opset)
    got = smelt.compile(model, "cpu").run({"x": x})["y"]
    for want in oracles(model, {"x": x}):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    nan = np.full(x.size, np.nan, np.float32)
    assert np.isnan(smelt.compile(model, "cpu").run({"x": nan})["y"]).all()


@pytest.mark.parametrize("op", ["Celu", "Softplus", "HardSwish", "Selu"])
def test_function_ops_of_a_scalar_keep_it_a_scalar(op):
    """Celu's body multiplies by a float[1] alpha: a scalar's result came out
    as shape [1]; expanded bodies now keep the shape onnx's inference gives."""
    model = unary(op, [])
    x = np.array(-0.75, np.float32)
    got = smelt.compile(model, "cpu").run({"x": x})["y"]
    for want in oracles(model, {"x": x}):
        assert got.shape == np.shape(want) == ()
        np.testing.assert_allclose(got, want, rtol=1e-5)
