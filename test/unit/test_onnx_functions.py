"""Ops that onnx defines as functions, and model-local functions, expand into their
bodies; checked against onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import smelt

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, functions=(), opset=18, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    imports = [helper.make_opsetid("", opset)]
    imports += [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports, functions=list(functions))


def _tensor(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _check(model, feeds, rtol=1e-6):
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = smelt.compile(model, "cpu").run(feeds)
    for w, g in zip(want, got.values(), strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)


def test_schema_function_uses_default_attributes():
    # HardSigmoid's body refers to @alpha and @beta; neither is set here.
    node = helper.make_node("HardSigmoid", ["x"], ["y"])
    model = _model([node], [_tensor("x", [4, 33])], [_tensor("y", [4, 33])])
    _check(model, {"x": RNG.standard_normal((4, 33)).astype(np.float32) * 4})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_context_dependent_function_sees_attributes(approximate):
    # Gelu's body is built from the node: erf or tanh form.
    node = helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    model = _model([node], [_tensor("x", [3, 50])], [_tensor("y", [3, 50])], opset=20)
    _check(model, {"x": RNG.standard_normal((3, 50)).astype(np.float32) * 3}, 1e-5)


def _scale_add(default_alpha: float | None) -> onnx.FunctionProto:
    """y = x * alpha + x, alpha an attribute of the function."""
    alpha = helper.make_node("Constant", [], ["alpha"])
    alpha.attribute.append(
        onnx.AttributeProto(
            name="value_float", type=onnx.AttributeProto.FLOAT, ref_attr_name="alpha"
        )
    )
    body = [
        alpha,
        helper.make_node("Mul", ["x", "alpha"], ["t"]),
        helper.make_node("Add", ["t", "x"], ["y"]),
    ]
    f = helper.make_function(
        "local", "ScaleAdd", ["x"], ["y"], body, [helper.make_opsetid("", 18)],
        attributes=[] if default_alpha is not None else ["alpha"],
    )
    if default_alpha is not None:
        f.attribute_proto.append(helper.make_attribute("alpha", default_alpha))
    return f


@pytest.mark.parametrize("given", [None, 3.0])
def test_model_local_function(given):
    attrs = {} if given is None else {"alpha": given}
    nodes = [
        helper.make_node("ScaleAdd", ["x"], ["h"], domain="local", **attrs),
        helper.make_node("ScaleAdd", ["h"], ["y"], domain="local", alpha=0.5),
    ]
    model = _model(
        nodes, [_tensor("x", [8])], [_tensor("y", [8])],
        functions=[_scale_add(default_alpha=2.0)], domains=["local"],
    )
    _check(model, {"x": RNG.standard_normal(8).astype(np.float32)})


def test_recursive_local_function_is_refused():
    body = [helper.make_node("Loopy", ["x"], ["y"], domain="local")]
    f = helper.make_function(
        "local", "Loopy", ["x"], ["y"], body,
        [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
    )
    node = helper.make_node("Loopy", ["x"], ["y"], domain="local", name="outer")
    model = _model(
        [node], [_tensor("x", [2])], [_tensor("y", [2])], [f], domains=["local"]
    )
    with pytest.raises(smelt.SmeltError, match="nest deeper"):
        smelt.compile(model, "cpu")


def test_problem_inside_a_body_names_the_calling_node():
    body = [helper.make_node("NoSuchOp", ["x"], ["y"])]
    f = helper.make_function(
        "local", "Wrap", ["x"], ["y"], body, [helper.make_opsetid("", 18)]
    )
    node = helper.make_node("Wrap", ["x"], ["y"], domain="local", name="caller")
    model = _model(
        [node], [_tensor("x", [2])], [_tensor("y", [2])], [f], domains=["local"]
    )
    with pytest.raises(smelt.SmeltError, match="caller/NoSuchOp.*not supported"):
        smelt.compile(model, "cpu")
