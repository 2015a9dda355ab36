"""Models of ONNX's other domains (ai.onnx.ml, ai.onnx.preview.training): the
ONNX node-conformance cases either compile and give the expected outputs, or are
refused with a reason that is true. Where a message says onnxruntime refuses the
model too, onnxruntime is run and must refuse it; where onnxruntime runs it,
smelt's message must not say so (it once said "onnxruntime refuses it too" for
every such case, false for the 8 ai.onnx.ml ones)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import InvalidModel, SmeltError, UnsupportedModel

CLAIM = re.compile(r"onnxruntime(.s inference build)? (refuses|does not register)")
DOMAINS = {"ai.onnx.ml", "ai.onnx.preview.training"}


def _cases() -> list:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return [c for c in cases if {n.domain for n in c.model.graph.node} & DOMAINS]


CASES = {c.name: c for c in _cases()}


def _array(v) -> np.ndarray:
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    return np.asarray(v)


def _ort(model: onnx.ModelProto, feeds: dict) -> list | Exception:
    try:
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        return session.run(None, feeds)
    except Exception as e:  # noqa: BLE001 (onnxruntime's errors share no base)
        return e


def test_the_conformance_cases_are_all_here():
    assert len(CASES) == 15, sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_case_passes_or_is_refused_with_a_true_reason(name):
    case = CASES[name]
    inputs, expected = case.data_sets[0]
    feeds = {i.name: _array(v) for i, v in zip(case.model.graph.input, inputs)}
    ort = _ort(case.model, feeds)
    try:
        compiled = smelt.compile(case.model, "cpu")
    except SmeltError as e:
        message = str(e)
        assert "not valid ONNX" not in message, message  # onnx's checker takes it
        if CLAIM.search(message):
            assert isinstance(ort, Exception), f"onnxruntime runs it: {message}"
        assert isinstance(e, UnsupportedModel), message
        return
    got = compiled.run(feeds)
    for out, want in zip(compiled.output_names, expected, strict=True):
        np.testing.assert_allclose(got[out], _array(want), rtol=1e-6, atol=0)
        assert got[out].dtype == _array(want).dtype


def test_ml_ops_without_a_handler_are_named_with_their_domain():
    case = CASES["test_ai_onnx_ml_label_encoder_tensor_mapping"]
    with pytest.raises(UnsupportedModel, match=r"LabelEncoder \(domain 'ai.onnx.ml'"):
        smelt.compile(case.model, "cpu")


def test_training_ops_say_why_and_onnxruntime_refuses_them_too():
    case = CASES["test_adam"]
    with pytest.raises(UnsupportedModel, match="training op") as error:
        smelt.compile(case.model, "cpu")
    assert CLAIM.search(str(error.value))
    inputs, _ = case.data_sets[0]
    feeds = {i.name: _array(v) for i, v in zip(case.model.graph.input, inputs)}
    assert isinstance(_ort(case.model, feeds), Exception)


def _ml_model(node, inputs, output, opsets) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", inputs, [output])
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets]
    )


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)


def test_binarizer_and_feature_extractor_against_onnxruntime():
    x = np.array([[-1, 0.5, 0.75, 2, 0.25], [3, -0.5, 0.5, 0, 1]], np.float32)
    binarize = _ml_model(
        helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5),
        [X], Y, [("ai.onnx.ml", 1)],
    )  # fmt: skip
    compiled = smelt.compile(binarize, "cpu")
    np.testing.assert_array_equal(
        compiled.run({"x": x})["y"], _ort(binarize, {"x": x})[0]
    )
    # NaN: 0 as in onnx's reference (onnxruntime stops with an error instead)
    x[0, 2] = np.nan
    assert isinstance(_ort(binarize, {"x": x}), Exception)
    assert compiled.run({"x": x})["y"][0, 2] == 0
    index = helper.make_tensor_value_info("i", TensorProto.INT64, [1, 3])
    extract = _ml_model(
        helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"],
                         domain="ai.onnx.ml"),
        [X, index], Y, [("ai.onnx.ml", 1), ("", 17)],
    )  # fmt: skip
    feeds = {"x": x, "i": np.array([[4, 0, 4]], np.int64)}
    compiled = smelt.compile(extract, "cpu")
    np.testing.assert_array_equal(compiled.run(feeds)["y"], _ort(extract, feeds)[0])
    # a negative index: onnxruntime refuses it, and so does smelt (no wrap-around)
    feeds["i"] = np.array([[1, -1, 0]], np.int64)
    assert isinstance(_ort(extract, feeds), Exception)
    with pytest.raises(SmeltError, match="indices Y"):
        compiled.run(feeds)


def test_default_domain_ops_without_its_opset_claim_only_the_checker():
    node = helper.make_node("Relu", ["x"], ["y"])
    relu = _ml_model(node, [X], Y, [("ai.onnx.ml", 3)])
    x = np.ones((2, 5), np.float32)
    assert not isinstance(_ort(relu, {"x": x}), Exception)  # onnxruntime runs it
    with pytest.raises(InvalidModel, match="imports no opset of that domain") as error:
        smelt.compile(relu, "cpu")
    assert not CLAIM.search(str(error.value)), str(error.value)
    nothing = _ml_model(helper.make_node("Relu", ["x"], ["y"]), [X], Y, [])
    assert isinstance(_ort(nothing, {"x": x}), Exception)  # refused: no opset at all
    with pytest.raises(InvalidModel, match="onnxruntime refuses it too"):
        smelt.compile(nothing, "cpu")


@pytest.mark.parametrize(
    "op, opset, outputs",
    [("LayerNormalization", 13, 1), ("LayerNormalization", 16, 3),
     ("SimplifiedLayerNormalization", 13, 1), ("SimplifiedLayerNormalization", 17, 2)],
)  # fmt: skip
def test_onnxruntimes_own_default_domain_norms(op, opset, outputs):
    """onnxruntime registers these in the default domain at every opset (its
    optimizer writes them; onnx has LayerNormalization from opset 17 only):
    smelt once refused the first as 'does not exist in opset 13; onnxruntime
    refuses it too'."""
    rng = np.random.default_rng(0)
    scale = numpy_helper.from_array(rng.random((3, 8)).astype(np.float32) + 0.5, "s")
    bias = numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "b")
    names = ["x", "s", "b"] if op == "LayerNormalization" else ["x", "s"]
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, outs, axis=-2, epsilon=1e-4)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [scale, bias] if op == "LayerNormalization" else [scale],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = (rng.standard_normal((2, 3, 8)) * 3).astype(np.float32)
    want = _ort(model, {"x": x})
    assert not isinstance(want, Exception), want
    compiled = smelt.compile(model, "cpu")
    got = compiled.run({"x": x})
    for name, expected in zip(compiled.output_names, want, strict=True):
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)


def _loads(model: onnx.ModelProto) -> bool:
    try:
        onnxruntime.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    except Exception:  # noqa: BLE001 (onnxruntime's errors share no base)
        return False
    return True


def test_ops_before_their_opset_are_refused_by_onnxruntime_as_smelt_says():
    """smelt refuses an op at an opset before onnx's first version of it and says
    onnxruntime refuses it too: true for every op of onnx but ORT_DEFAULT_DOMAIN's
    (which smelt imports or names as unsupported, without that claim)."""
    from onnx import defs

    from smelt.frontend.onnx_validate_nodes import ORT_DEFAULT_DOMAIN

    onnxruntime.set_default_logger_severity(4)
    first: dict[str, int] = {}
    for s in defs.get_all_schemas_with_history():
        if s.domain == "" and not s.deprecated:
            first[s.name] = min(first.get(s.name, s.since_version), s.since_version)
    loaded = set()
    for op, version in sorted(first.items()):
        if version <= 7:  # onnxruntime reads opsets from 7 on
            continue
        schema = defs.get_schema(op, version, "")
        ins = [f"x{i}" for i in range(max(schema.min_input, 1))]
        outs = [f"y{i}" for i in range(max(schema.min_output, 1))]
        graph = helper.make_graph(
            [helper.make_node(op, ins, outs)], "g",
            [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2, 3]) for i in ins],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        )  # fmt: skip
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", version - 1)], ir_version=8
        )
        if _loads(model):
            loaded.add(op)
            try:
                smelt.compile(model, "cpu")
            except SmeltError as e:
                assert not CLAIM.search(str(e)), str(e)
    assert loaded <= ORT_DEFAULT_DOMAIN, loaded - ORT_DEFAULT_DOMAIN
    assert loaded, "onnxruntime loads none: the check above checks nothing"
