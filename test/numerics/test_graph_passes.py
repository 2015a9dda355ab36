"""Every graph pass preserves meaning: the reference executor gives the same outputs
(logits included) before and after each pass of the graph pipeline (the NHWC one,
which runs every graph pass), on the nine light_* models with random weights, the MLP
and the encoder layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models import (
    LIGHT_MODELS,
    encoder_layer_model,
    light_inputs,
    light_model_path,
    mlp_model,
    random_weights,
    rel_error,
    with_logits,
)

from smelt.compiler.driver import lower
from smelt.compiler.pipelines import GRAPH_OPT, GRAPH_OPT_NHWC, split
from smelt.dialects import graph
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph

TOL = 1e-5


def build(name: str):
    if name == "mlp":
        model = with_logits(mlp_model())
        return model, {"x": np.random.default_rng(1).standard_normal((8, 256), np.float32)}
    if name == "encoder":
        model = encoder_layer_model()
        x = np.random.default_rng(1).standard_normal((1, 128, 768), np.float32)
        return model, {"x": x}
    model = random_weights(onnx.load(light_model_path(name)), seed=0)
    return model, light_inputs(model)


def main_ops(module):
    return list(next(iter(module.ops)).body.block.ops)


@pytest.mark.parametrize("name", LIGHT_MODELS + ["mlp", "encoder"])
def test_graph_pipeline_preserves_outputs(name):
    model, feeds = build(name)
    module = import_model(model)
    before = run_graph(module, feeds)
    for pass_name in split(GRAPH_OPT_NHWC):
        lower(module, pass_name)
        module.verify()
        after = run_graph(module, feeds)
        for out, want in before.items():
            err = rel_error(after[out], want)
            assert err <= TOL, f"{pass_name} changed {out}: rel error {err:.3g}"
    assert not any(isinstance(op, graph.BatchNormOp) for op in module.walk())


def test_resnet50_convs_take_bias_relu_and_residual():
    module = import_model(random_weights(onnx.load(light_model_path("light_resnet50"))))
    lower(module, GRAPH_OPT)
    assert not any(isinstance(op, graph.BatchNormOp) for op in module.walk())
    fused = [op for op in main_ops(module) if isinstance(op, graph.FusedOp)]
    convs = [f for f in fused if f.kind.data == "conv2d"]
    assert len(convs) == 53
    # No relu or add runs as a kernel of its own: each joined the conv before it.
    loose = [op.name for op in main_ops(module) if isinstance(op, graph.AddOp | graph.ReluOp)]
    assert loose == []
    residual = [c for c in convs if any(isinstance(o, graph.AddOp) for o in c.body.block.ops)]
    assert len(residual) == 16


def test_resnet50_nhwc_keeps_transposes_at_the_borders():
    module = import_model(random_weights(onnx.load(light_model_path("light_resnet50"))))
    lower(module, GRAPH_OPT_NHWC)
    ops = list(module.walk())
    convs = [op for op in ops if isinstance(op, graph.Conv2dOp)]
    assert len(convs) == 53 and all(c.attr("layout") == "nhwc" for c in convs)
    assert sum(isinstance(op, graph.TransposeOp) for op in ops) == 2


def test_layout_after_fuse_leaves_fused_bodies_alone():
    """graph-fuse before graph-convert-layout (an order explore tries): the fused
    convs keep NCHW, the loose pools switch, and the compiled model still matches."""
    import smelt

    model, feeds = build("light_squeezenet")
    pipeline = ("graph-simplify,graph-fuse,graph-convert-layout{layout=nhwc},"
                "convert-graph-to-loop,buffer-plan")
    module = import_model(model)
    lower(module, pipeline.rsplit(",convert", 1)[0])
    convs = [op for op in module.walk() if isinstance(op, graph.Conv2dOp)]
    assert convs and all(c.attr("layout") == "nchw" for c in convs)
    compiled = smelt.compile(model, "cpu", pipeline=pipeline)
    want = run_graph(import_model(model), feeds)
    got = compiled.run(feeds)
    for name, value in want.items():
        assert rel_error(got[name], value) <= 1e-4


def test_small_integer_powers_match_onnxruntime():
    """GELU's tanh form as exporters write it (Pow(x, 3)) and a variance
    (Pow(d, 2)): graph-simplify turns them into products; the compiled model
    matches onnxruntime, with NaN, infinities and negative bases among inputs."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import smelt

    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              [("three", 3.0), ("two", [2.0]), ("k", 0.044715)]]
    nodes = [
        helper.make_node("Pow", ["x", "three"], ["cube"]),
        helper.make_node("Mul", ["cube", "k"], ["t"]),
        helper.make_node("Add", ["x", "t"], ["u"]),
        helper.make_node("Tanh", ["u"], ["y"]),
        helper.make_node("Pow", ["x", "two"], ["sq"]),
    ]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [vi("x", TensorProto.FLOAT, [4, 1000])],
        [vi("y", TensorProto.FLOAT, [4, 1000]), vi("sq", TensorProto.FLOAT, [4, 1000]),
         vi("cube", TensorProto.FLOAT, [4, 1000])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(3).standard_normal((4, 1000)).astype(np.float32) * 10
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    compiled = smelt.compile(model, "cpu")
    got = compiled.run({"x": x})
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for name, want in zip(["y", "sq", "cube"], session.run(None, {"x": x})):
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=0)
