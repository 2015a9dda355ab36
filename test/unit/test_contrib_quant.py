"""onnxruntime's dynamic-quantization contrib ops (DynamicQuantizeMatMul,
MatMulIntegerToFloat): a quantize_dynamic model as onnxruntime's optimizer saves
it, and the ops alone, against onnxruntime. int8 weights stay within |w| <= 64,
where onnxruntime's u8s8 kernels are exact on hosts without VNNI too. Fixed
seeds."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from test_contrib_ops import RNG, check, contrib_model, rand


def test_quantize_dynamic_model_saved_by_onnxruntimes_optimizer(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)
    ).eval()
    torch.onnx.export(net, torch.randn(4, 32), str(tmp_path / "mlp.onnx"),
                      dynamo=False, opset_version=17)  # fmt: skip
    quantize_dynamic(str(tmp_path / "mlp.onnx"), str(tmp_path / "q.onnx"),
                     weight_type=QuantType.QUInt8)  # fmt: skip
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = (
        onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    )
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onnxruntime.InferenceSession(
        str(tmp_path / "q.onnx"), options, providers=["CPUExecutionProvider"]
    )
    model = onnx.load(tmp_path / "optimized.onnx")
    ops = collections.Counter(n.op_type for n in model.graph.node if n.domain)
    assert ops == {"DynamicQuantizeMatMul": 2}, ops
    check(model, {model.graph.input[0].name: rand(4, 32)})


def _weights(k: int, n: int, per_column: bool, signed: bool) -> dict:
    low, high, dtype = (-64, 65, np.int8) if signed else (0, 256, np.uint8)
    shape = (n,) if per_column else ()
    zp = RNG.integers(-10, 10, shape) if signed else RNG.integers(100, 150, shape)
    return {
        "b": RNG.integers(low, high, (k, n)).astype(dtype),
        "b_scale": (RNG.random(shape) * 0.01 + 0.005).astype(np.float32),
        "b_zp": np.asarray(zp, dtype),
    }


@pytest.mark.parametrize(
    "a_shape, per_column, signed, bias",
    [((4, 24), False, True, True), ((2, 3, 24), True, True, False),
     ((5, 24), True, False, True)],
)  # fmt: skip
def test_dynamic_quantize_matmul(a_shape, per_column, signed, bias):
    weights = _weights(24, 7, per_column, signed)
    order = ["a", "b", "b_scale", "b_zp"]
    if bias:
        weights["bias"] = rand(7)
        order.append("bias")
    a = rand(*a_shape, scale=2.0) + 0.5
    m = contrib_model("DynamicQuantizeMatMul", {"a": a}, weights, order=order)
    check(m, {"a": a})
    check(m, {"a": np.abs(a)})  # a range that starts at 0
    check(m, {"a": np.zeros_like(a)})  # a zero range: no 0 / 0 on the way


def test_matmul_integer_to_float():
    a = RNG.integers(0, 256, (2, 3, 24)).astype(np.uint8)
    weights = _weights(24, 7, True, True)
    weights |= {"a_scale": np.array(0.03, np.float32), "a_zp": np.array(120, np.uint8),
                "bias": rand(7)}  # fmt: skip
    order = ["a", "b", "a_scale", "b_scale", "a_zp", "b_zp", "bias"]
    m = contrib_model("MatMulIntegerToFloat", {"a": a}, weights, order=order)
    check(m, {"a": a})


@pytest.mark.parametrize("signed, mask", [(True, None), (False, "lengths"),
                                          (True, "raw")])  # fmt: skip
def test_qattention(signed, mask):
    batch, seq, hidden = 2, 6, 16
    x = RNG.integers(0, 256, (batch, seq, hidden)).astype(np.uint8)
    w = _weights(hidden, 3 * hidden, False, signed)
    weights = {"w": w["b"], "bias": rand(3 * hidden),
               "x_scale": np.array(0.02, np.float32), "w_scale": w["b_scale"],
               "x_zp": np.array(128, np.uint8), "w_zp": w["b_zp"]}  # fmt: skip
    inputs = {"x": x}
    order = ["x", "w", "bias", "x_scale", "w_scale", "", "x_zp", "w_zp"]
    if mask == "lengths":
        inputs["mask"] = np.array([6, 3], np.int32)
    elif mask == "raw":
        inputs["mask"] = np.array([[1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    if mask:
        order[5] = "mask"
    m = contrib_model("QAttention", inputs, weights, order=order, num_heads=4)
    check(m, inputs)
