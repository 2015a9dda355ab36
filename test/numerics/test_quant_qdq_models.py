"""QDQ models written by onnxruntime.quantization.quantize_static (per-channel int8
weights; uint8 or int8 activations) compiled by smelt, whose quant-fold-qdq turns
their layers into integer kernels, against onnxruntime's run of the same model:
within one quantization step of the output on >= 99.9% of the elements. The
light_* models: test_quant_ort_models.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from int8_oracle import ort_outputs, ort_weight_bits
from models import encoder_layer_model, mlp_gelu_model
from onnx import TensorProto, helper, numpy_helper
from quant_ort_models import ort_quantize
from xdsl.dialects import func

import smelt
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.pipelines import preset
from smelt.dialects import graph
from smelt.dialects import quant as q


def quantized(model: onnx.ModelProto, name: str, batches, act: str) -> onnx.ModelProto:
    """`model` through quantize_static (QDQ, per channel, int8 weights; 7-bit
    where onnxruntime's int8 kernels, the oracle of `check`, are exact only for
    those: int8_oracle.py)."""
    calib = [{name: b} for b in batches]
    return ort_quantize(model, calib, act, reduce_range=ort_weight_bits() == 7)


def mlp_model(batch: int, d: int, h: int, gemm: bool, seed: int = 0) -> onnx.ModelProto:
    """x → Linear(d, h) → ReLU → Linear(h, d): Gemm (transB) or MatMul + Add."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((h, d)) * np.sqrt(2 / d)).astype(np.float32)
    w2 = (rng.standard_normal((d, h)) * np.sqrt(2 / h)).astype(np.float32)
    b1 = (rng.standard_normal(h) * 0.1).astype(np.float32)
    b2 = (rng.standard_normal(d) * 0.1).astype(np.float32)
    if gemm:
        nodes = [
            helper.make_node("Gemm", ["x", "w1", "b1"], ["a1"], transB=1),
            helper.make_node("Relu", ["a1"], ["r1"]),
            helper.make_node("Gemm", ["r1", "w2", "b2"], ["y"], transB=1),
        ]
    else:
        w1, w2 = w1.T.copy(), w2.T.copy()
        nodes = [
            helper.make_node("MatMul", ["x", "w1"], ["m1"]),
            helper.make_node("Add", ["m1", "b1"], ["a1"]),
            helper.make_node("Relu", ["a1"], ["r1"]),
            helper.make_node("MatMul", ["r1", "w2"], ["m2"]),
            helper.make_node("Add", ["m2", "b2"], ["y"]),
        ]
    inits = [("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)]
    g = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d])],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that makes the (first) output."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear"
    return float(inits[node.input[1]].reshape(-1)[0])


# The CPU preset: matmuls, gemms and convs as packed int8 GEMMs (quant-pack-gemm)
PIPELINE = preset("cpu")
assert "quant-pack-gemm" in PIPELINE and "{conv=false}" not in PIPELINE


def check(model: onnx.ModelProto, feeds: dict, pipeline: str = PIPELINE) -> tuple:
    """Asserts smelt within one output step of onnxruntime on >= 99.9% of the
    elements; returns (that fraction, the most steps off)."""
    ours = smelt.compile(model, "cpu", pipeline=pipeline).run(feeds)
    ours = list(ours.values())[0] if isinstance(ours, dict) else ours[0]
    theirs = ort_outputs(model, feeds, optimized=True)[0]
    step = output_step(model)
    steps = np.abs(ours.astype(np.float64) - theirs) / step
    within = steps <= 1.001
    assert within.mean() >= 0.999, f"{within.mean():.5f} within one step {step}"
    return float(within.mean()), float(steps.max())


def packed_ops(model: onnx.ModelProto) -> list[str]:
    """The graph ops after the CPU preset's graph passes (before fusion)."""
    module = import_graph(model)
    lower(module, PIPELINE.split(",graph-fuse")[0])
    return [op.name for op in module.walk() if isinstance(op, graph.GraphOp)]


def folded_ops(model: onnx.ModelProto) -> list[str]:
    module = import_graph(model)
    lower(module, "graph-fold-constants,graph-simplify,quant-fold-qdq")
    return [op.name for op in module.walk() if isinstance(op, graph.GraphOp)]


@pytest.mark.parametrize("act", ["u8", "s8"])
@pytest.mark.parametrize("gemm", [True, False], ids=["gemm", "matmul_add"])
def test_mlp(act, gemm):
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((8, 64)).astype(np.float32) for _ in range(4)]
    model = quantized(mlp_model(8, 64, 256, gemm), "x", batches, act)
    ops = folded_ops(model)
    assert "graph.matmul" in ops
    if gemm:  # every layer integer: no float contraction is left
        assert "graph.gemm" not in ops
        assert ops.count(q.DequantizeOp.name) == 1
    check(model, {"x": rng.standard_normal((8, 64)).astype(np.float32)})


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_mlp_gelu(act):
    """MatMul + Add + erf-GELU + MatMul + Add: every weight an int8 qgemm, the GELU
    an elementwise chain between quantizes."""
    rng = np.random.default_rng(4)
    model = mlp_gelu_model(batch=16, d_in=64, hidden=256, d_out=64)
    batches = [rng.standard_normal((16, 64)).astype(np.float32) for _ in range(4)]
    model = quantized(model, "x", batches, act)
    check(model, {"x": rng.standard_normal((16, 64)).astype(np.float32)})


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_encoder_layer(act):
    """Attention (matmuls of two quantized activations), GELU, layer norms."""
    rng = np.random.default_rng(6)
    model = encoder_layer_model(seq=16, hidden=64, heads=4, ffn=128)
    shape = (1, 16, 64)
    batches = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    model = quantized(model, "x", batches, act)
    check(model, {"x": rng.standard_normal(shape).astype(np.float32)})
    # both attention matmuls (their operands and results quantized) accumulate in
    # an f32 scratch, so that loop-schedule tiles them (no dot form)
    module = import_graph(model)
    head = PIPELINE.split(",convert-graph-to-loop")[0]
    lower(module, head + ",convert-graph-to-loop")
    kernels = [op for op in module.ops if isinstance(op, func.FuncOp)]
    matmuls = [k for k in kernels if "matmul" in k.sym_name.data]
    assert len(matmuls) == 2
    assert all("loop.pattern" in k.attributes for k in matmuls)


def conv_model(seed: int = 0) -> onnx.ModelProto:
    """x[1, 3, 14, 14] → Conv 3×3 pad 1 + bias (K = 27: a k tail) → BatchNorm →
    Relu → Conv 1×1 stride 1 (+ the residual) → Relu → Conv 3×3 stride 2
    dilation 2 pads (1, 0, 1, 0) → Conv 1×1 stride 2 → Conv 5×5 pad 2 (K =
    5·5·16) → output."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape) * np.sqrt(2 / fan_in)).astype(np.float32)

    inits = {
        "w1": w(16, 3, 3, 3), "b1": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "bn_s": (rng.random(16) + 0.5).astype(np.float32),
        "bn_b": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "bn_m": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "bn_v": (rng.random(16) + 0.5).astype(np.float32),
        "w2": w(16, 16, 1, 1), "w3": w(24, 16, 3, 3), "w4": w(16, 24, 1, 1),
        "w5": w(12, 16, 5, 5),
    }  # fmt: skip
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"]),
        n("Relu", ["n1"], ["r1"]),
        n("Conv", ["r1", "w2"], ["c2"]),
        n("Add", ["c2", "r1"], ["a2"]),
        n("Relu", ["a2"], ["r2"]),
        n("Conv", ["r2", "w3"], ["c3"], strides=[2, 2], pads=[1, 0, 1, 0],
          dilations=[2, 2]),
        n("Conv", ["c3", "w4"], ["c4"], strides=[2, 2]),
        n("Conv", ["c4", "w5"], ["y"], pads=[2, 2, 2, 2]),
    ]
    g = helper.make_graph(
        nodes, "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, k) for k, a in inits.items()],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("cpu", ["host", "x86-64-v3"])  # x86-64-v3: vpmaddwd
@pytest.mark.parametrize("act", ["u8", "s8"])
def test_convs(act, cpu):
    """k×k and 1×1 convs (pads, strides, a bias, a batch norm after a quantize,
    a residual add) as packed int8 GEMMs over im2col rows."""
    rng = np.random.default_rng(8)
    shape = (1, 3, 14, 14)
    batches = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    model = quantized(conv_model(), "x", batches, act)
    ops = packed_ops(model)
    assert ops.count("quant.qgemm") == 5 and "graph.conv2d" not in ops
    assert ops.count("quant.im2col") == 4
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    check(model, feeds, preset("cpu", cpu=cpu))
