"""Test models: the onnx package's `light_*` architectures, random weights for them,
and two models built with onnx.helper (a 2-layer MLP, a BERT-style encoder layer).

    LIGHT_MODELS, light_model_path(name), light_inputs(model)
    random_weights(model, seed)   # every weight random, pre-softmax logits exposed
    mlp_model(), encoder_layer_model()
    run_onnxruntime(model, feeds), rel_error(a, b)
"""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_MODELS = [
    "light_bvlc_alexnet", "light_densenet121", "light_inception_v1",
    "light_inception_v2", "light_resnet50", "light_shufflenet", "light_squeezenet",
    "light_vgg19", "light_zfnet512",
]  # fmt: skip
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")


def light_model_path(name: str) -> str:
    """Path of the onnx package's `light_*` model `name`."""
    return os.path.join(LIGHT_DIR, f"{name}.onnx")


def light_expected_output(name: str) -> np.ndarray:
    """The output shipped with `name`, computed from `light_inputs`."""
    path = os.path.join(LIGHT_DIR, f"{name}_output_0.pb")
    return numpy_helper.to_array(onnx.load_tensor(path))


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def light_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs the onnx backend test feeds a light model: arange(n) / n."""
    feeds = {}
    for info in real_inputs(model):
        shape = [d.dim_value or 1 for d in info.type.tensor_type.shape.dim]
        n = math.prod(shape)
        feeds[info.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def run_onnxruntime(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    """All graph outputs of `model` computed by onnxruntime on the CPU. Big float
    initializers are fed as inputs: loading 500 MB of protobuf takes ORT seconds."""
    import onnxruntime as ort

    big = [
        t for t in model.graph.initializer
        if t.data_type == TensorProto.FLOAT and math.prod(t.dims) >= 1 << 18
    ]  # fmt: skip
    if big:
        model, feeds = _weights_as_inputs(model, big, feeds)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the light models carry unused initializers
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def _weights_as_inputs(model: onnx.ModelProto, big: list, feeds: dict):
    names = {t.name for t in big}
    light = onnx.ModelProto()
    light.ir_version = max(model.ir_version, 4)
    light.opset_import.extend(model.opset_import)
    graph = light.graph
    graph.name = model.graph.name
    graph.node.extend(model.graph.node)
    graph.input.extend(i for i in model.graph.input if i.name not in names)
    graph.input.extend(
        helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims))
        for t in big
    )
    graph.output.extend(model.graph.output)
    graph.initializer.extend(t for t in model.graph.initializer if t.name not in names)
    weights = {t.name: numpy_helper.to_array(t) for t in big}
    return light, {**feeds, **weights}


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b|: the error relative to the reference's magnitude."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.max(np.abs(a - b), initial=0) / max(np.max(np.abs(b)), 1e-30))


# --- random weights (smelt/frontend/random_weights.py) ----------------------------

from smelt.frontend.random_weights import random_weights, with_logits  # noqa: E402,F401

# --- models built with onnx.helper -------------------------------------------------


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _two_layers(seed: int, d_in: int, hidden: int, d_out: int) -> list[TensorProto]:
    """w1, b1, w2, b2 of a two-layer MLP (weights scaled by 1/sqrt(fan-in))."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((d_in, hidden), np.float32) / np.float32(math.sqrt(d_in))
    w2 = rng.standard_normal((hidden, d_out), np.float32) / np.float32(
        math.sqrt(hidden)
    )
    return [
        _init("w1", w1),
        _init("b1", rng.standard_normal(hidden, np.float32) * np.float32(0.1)),
        _init("w2", w2),
        _init("b2", rng.standard_normal(d_out, np.float32) * np.float32(0.1)),
    ]


def mlp_model(
    batch: int = 8, d_in: int = 256, hidden: int = 512, d_out: int = 10, seed: int = 0
) -> onnx.ModelProto:
    """x[batch, d_in] → MatMul+Add → Relu → Gemm → Softmax (opset 17)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("Gemm", ["h2", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, d_out])],
        _two_layers(seed, d_in, hidden, d_out),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def encoder_layer_model(
    seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, seed: int = 0
) -> onnx.ModelProto:
    """One BERT encoder layer on x[1, seq, hidden] (opset 17): multi-head attention
    (MatMul, Add, Reshape, Transpose, Softmax), residual + LayerNormalization, an
    Erf-GELU feed-forward block, residual + LayerNormalization. The head merge
    reshape takes its shape from a Shape → Gather → Unsqueeze → Concat chain, as
    exported models do."""
    rng = np.random.default_rng(seed)
    dh = hidden // heads
    inits: list[TensorProto] = []

    def weight(name: str, *shape: int, std: float = 0.02) -> str:
        inits.append(
            _init(name, rng.standard_normal(shape, np.float32) * np.float32(std))
        )
        return name

    def const(name: str, value) -> str:
        inits.append(_init(name, np.asarray(value)))
        return name

    n = helper.make_node
    nodes = []
    for p in "qkv":
        nodes += [
            n("MatMul", ["x", weight(f"w{p}", hidden, hidden)], [f"{p}0"]),
            n("Add", [f"{p}0", weight(f"b{p}", hidden)], [f"{p}1"]),
            n("Reshape", [f"{p}1", const(f"{p}_shape", np.array([1, seq, heads, dh]))],
              [f"{p}2"]),
        ]  # fmt: skip
    nodes += [
        n("Transpose", ["q2"], ["q3"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k2"], ["k3"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v2"], ["v3"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q3", "k3"], ["s0"]),
        n("Div", ["s0", const("scale", np.float32(math.sqrt(dh)))], ["s1"]),
        n("Softmax", ["s1"], ["p"], axis=-1),
        n("MatMul", ["p", "v3"], ["c0"]),
        n("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        n("Shape", ["x"], ["xs"]),
        n("Gather", ["xs", const("i0", np.array(0))], ["d0"], axis=0),
        n("Gather", ["xs", const("i1", np.array(1))], ["d1"], axis=0),
        n("Unsqueeze", ["d0", const("ax0", np.array([0]))], ["u0"]),
        n("Unsqueeze", ["d1", const("ax1", np.array([0]))], ["u1"]),
        n("Concat", ["u0", "u1", const("hid", np.array([hidden]))], ["merged"], axis=0),
        n("Reshape", ["c1", "merged"], ["c2"]),
        n("MatMul", ["c2", weight("wo", hidden, hidden)], ["a0"]),
        n("Add", ["a0", weight("bo", hidden)], ["a1"]),
        n("Add", ["x", "a1"], ["r0"]),
        n("LayerNormalization", ["r0", _ln(inits, rng, "ln0", hidden), "ln0_b"],
          ["h"], axis=-1, epsilon=1e-12),
        n("MatMul", ["h", weight("w1", hidden, ffn)], ["f0"]),
        n("Add", ["f0", weight("b1", ffn)], ["f1"]),
        # GELU(x) = 0.5 x (1 + erf(x / sqrt 2))
        n("Div", ["f1", const("sqrt2", np.float32(math.sqrt(2)))], ["g0"]),
        n("Erf", ["g0"], ["g1"]),
        n("Add", ["g1", const("one", np.float32(1))], ["g2"]),
        n("Mul", ["f1", "g2"], ["g3"]),
        n("Mul", ["g3", const("half", np.float32(0.5))], ["g4"]),
        n("MatMul", ["g4", weight("w2", ffn, hidden)], ["f2"]),
        n("Add", ["f2", weight("b2", hidden)], ["f3"]),
        n("Add", ["h", "f3"], ["r1"]),
        n("LayerNormalization", ["r1", _ln(inits, rng, "ln1", hidden), "ln1_b"],
          ["y"], axis=-1, epsilon=1e-12),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "encoder_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ln(inits: list, rng: np.random.Generator, name: str, hidden: int) -> str:
    scale = 1 + rng.standard_normal(hidden, np.float32) * np.float32(0.1)
    inits.append(_init(f"{name}_s", scale.astype(np.float32)))
    inits.append(_init(f"{name}_b", rng.standard_normal(hidden, np.float32) * 0.1))
    return f"{name}_s"


def mlp_gelu_model(
    batch: int = 64, d_in: int = 1024, hidden: int = 4096, d_out: int = 1024, seed: int = 0
) -> onnx.ModelProto:
    """x[batch, d_in] → MatMul+Add → erf-GELU (as torch.onnx exports it: Div, Erf,
    Add, Mul, Mul) → MatMul+Add: a transformer feed-forward block (opset 17)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Div", ["h1", "sqrt2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
        helper.make_node("Add", ["g1", "one"], ["g2"]),
        helper.make_node("Mul", ["h1", "g2"], ["g3"]),
        helper.make_node("Mul", ["g3", "half"], ["g4"]),
        helper.make_node("MatMul", ["g4", "w2"], ["y0"]),
        helper.make_node("Add", ["y0", "b2"], ["y"]),
    ]
    scalar = {"sqrt2": math.sqrt(2.0), "one": 1.0, "half": 0.5}
    graph = helper.make_graph(
        nodes,
        "mlp_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d_in])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d_out])],
        [
            *_two_layers(seed, d_in, hidden, d_out),
            *(_init(k, np.array(v, np.float32)) for k, v in scalar.items()),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
