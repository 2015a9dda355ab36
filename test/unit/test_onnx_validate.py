"""What onnxruntime refuses, the importer refuses before importing, naming the node
(it used to answer with the last of two definitions, ignore an attribute, or fail
with AssertionError / ZeroDivisionError / AttributeError deep inside)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import SmeltError

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])
W = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w")


def model(nodes, inputs=(X,), inits=(), opset=17):
    graph = helper.make_graph(list(nodes), "g", list(inputs), [Y], list(inits))
    imports = [helper.make_opsetid("", opset)] if opset else []
    return helper.make_model(graph, opset_imports=imports)


CASES = {
    "duplicate definition": (
        model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Neg", ["x"], ["t"]),
               helper.make_node("Identity", ["t"], ["y"])]),
        "Neg#1: output 't' is already defined",
    ),
    "duplicate input": (
        model([helper.make_node("Relu", ["x"], ["y"])], inputs=(X, X)),
        "graph input 'x' is declared twice",
    ),
    "unknown attribute": (
        model([helper.make_node("Relu", ["x"], ["y"], bogus=3)]),
        "Relu#0: attribute 'bogus' is not one of Relu's",
    ),
    "attribute type": (
        model([helper.make_node("Conv", ["x", "w"], ["y"], strides=1.5)], inits=[W]),
        "Conv#0: attribute 'strides' must be INTS, not FLOAT",
    ),
    "no opset import": (
        model([helper.make_node("Relu", ["x"], ["y"])], opset=0),
        "the model imports no opset at all",
    ),
    "negative pads": (
        model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[-1, -1, 1, 1])], inits=[W]),
        "Conv#0: pads [-1, -1, 1, 1] are negative",
    ),
    "zero stride": (
        model([helper.make_node("Conv", ["x", "w"], ["y"], strides=[0, 1])], inits=[W]),
        "Conv#0: strides [0, 1] must be positive",
    ),
    "pool pads as large as the kernel": (
        model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2],
                                pads=[2, 1, 1, 1])]),
        "MaxPool#0: pads [2, 1, 1, 1] must be smaller than kernel_shape [2, 2]",
    ),
    "empty required input": (
        model([helper.make_node("Add", ["x", ""], ["y"])]),
        "Add#0: input 1 ('B') is required but given no value",
    ),
    "int32 bias": (
        model([helper.make_node("Conv", ["x", "w", "b"], ["y"])],
              inits=[W, numpy_helper.from_array(np.ones(2, np.int32), "b")]),
        "'b' int32 must have one element type (T)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_invalid_models_are_refused_naming_the_node(case):
    bad, words = CASES[case]
    with pytest.raises(SmeltError, match="onnxruntime refuses it too") as error:
        smelt.compile(bad, "cpu")
    assert words in str(error.value)


def test_every_problem_at_once_and_valid_models_pass():
    both = model(
        [helper.make_node("Conv", ["x", "w"], ["t"], strides=[0, 1], pads=[-1] * 4),
         helper.make_node("Relu", ["t"], ["y"], bogus=1)],
        inits=[W],
    )  # fmt: skip
    with pytest.raises(SmeltError, match=r"\(3 problems") as error:
        smelt.compile(both, "cpu")
    assert "Relu#1" in str(error.value) and "Conv#0" in str(error.value)
    # an initializer may give a graph input its default value; optional inputs
    # may be empty (Clip without min)
    ok = model(
        [helper.make_node("Clip", ["x", "", "hi"], ["y"])],
        inputs=(X, helper.make_tensor_value_info("hi", TensorProto.FLOAT, [])),
        inits=[numpy_helper.from_array(np.array(0.5, np.float32), "hi")],
    )
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 2, 4, 4)
    np.testing.assert_allclose(
        smelt.compile(ok, "cpu").run({"x": x})["y"],
        np.minimum(x, 0.5),
    )


def _add_with(tensor):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [tensor]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _corrupt(change):
    tensor = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    change(tensor)
    return tensor


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda t: setattr(t, "raw_data", t.raw_data[:10]), "does not make a tensor"),
        (lambda t: setattr(t, "raw_data", t.raw_data + b"1234"), "does not make a tensor"),
        (lambda t: t.dims.__setitem__(slice(None), [4, 5]), "of 4x5 FLOAT"),
        (lambda t: setattr(t, "data_type", 999), "data type 999 is not an ONNX type"),
        (lambda t: setattr(t, "data_type", 0), "data type 0 is not an ONNX type"),
    ],
)
def test_malformed_initializers_are_named(change, words):
    with pytest.raises(SmeltError, match=f"initializer 'w': .*{words}"):
        smelt.compile(_add_with(_corrupt(change)), "cpu")


S2 = numpy_helper.from_array(np.ones(2, np.float32), "s")
B2 = numpy_helper.from_array(np.zeros(2, np.float32), "b")
MEAN = numpy_helper.from_array(np.zeros(2, np.float32), "mean")
VAR = numpy_helper.from_array(np.ones(2, np.float32), "var")
BN = ["x", "s", "b", "mean", "var"]
CLAIMS = {
    **{name: bad for name, (bad, _) in CASES.items()},
    "keepdims 2": model([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=2)]),
    "negative epsilon": model(
        [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"],
                          epsilon=-1.0)],
        inits=[S2, B2],
    ),
    "infinite epsilon": model(
        [helper.make_node("BatchNormalization", BN, ["y"], epsilon=float("inf"))],
        inits=[S2, B2, MEAN, VAR],
    ),
    "LRN size 0": model([helper.make_node("LRN", ["x"], ["y"], size=0)]),
    "conv group 0": model([helper.make_node("Conv", ["x", "w"], ["y"], group=0)],
                          inits=[W]),  # fmt: skip
    "no outputs": helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [X], []),
        opset_imports=[helper.make_opsetid("", 17)],
    ),
}  # fmt: skip


def _onnxruntime_refuses(m) -> bool:
    """Whether onnxruntime refuses the model, when loading it or running it."""
    import onnxruntime

    x = np.ones((1, 2, 4, 4), np.float32)
    try:
        session = onnxruntime.InferenceSession(
            m.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        session.run(None, {"x": x})
    except Exception:  # noqa: BLE001 (onnxruntime's errors share no base)
        return True
    return False


@pytest.mark.parametrize("case", CLAIMS)
def test_onnxruntime_is_said_to_refuse_only_what_it_refuses(case):
    """keepdims 2 and a negative or infinite epsilon are refused without the
    claim: onnxruntime runs them (it used to be claimed for every problem)."""
    with pytest.raises(SmeltError, match="not valid ONNX") as error:
        smelt.compile(CLAIMS[case], "cpu")
    claimed = "onnxruntime refuses it too" in str(error.value)
    assert claimed == _onnxruntime_refuses(CLAIMS[case]), str(error.value)
