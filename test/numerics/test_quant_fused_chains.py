"""QDQ chains of elementwise ops fused into one kernel (vectorized, with the
quantize → dequantize pairs read as floats inside it), bit for bit against the
reference executor and onnxruntime: a GELU between fake-quant pairs, as
onnxruntime's quantize_static writes it, with ties, saturation and NaN, at sizes
around the vector width."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph


def run_reference(m, feeds: dict) -> dict:
    """smelt's reference executor on the unfused, unlowered graph of `m`."""
    return run_graph(import_model(m), feeds)

F32 = TensorProto.FLOAT
ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def gelu_chain(n: int, dtype) -> helper.ModelProto:
    """q → DQ → x/√2 → erf → Q/DQ → +1 → Q/DQ → ·x → Q/DQ → ·½ → Q (stored)."""
    zp = 128 if dtype == np.uint8 else -3
    t = ONNX_TYPE[dtype]
    inits, nodes = [], []

    def qdq(name: str, scale: float, out: str) -> None:
        inits.extend([
            numpy_helper.from_array(np.array(scale, np.float32), f"{name}_s"),
            numpy_helper.from_array(np.array(zp, dtype), f"{name}_z"),
        ])  # fmt: skip
        nodes.append(helper.make_node(
            "QuantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_q"]))
        nodes.append(helper.make_node(
            "DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [out]))

    inits += [numpy_helper.from_array(np.array(v, np.float32), k)
              for k, v in (("sqrt2", math.sqrt(2)), ("one", 1.0), ("half", 0.5),
                           ("xs", 0.05), ("ys", 0.02))]  # fmt: skip
    inits.append(numpy_helper.from_array(np.array(zp, dtype), "xz"))
    nodes += [
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
        helper.make_node("Div", ["x", "sqrt2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
    ]
    qdq("g1", 0.008, "g1d")
    nodes.append(helper.make_node("Add", ["g1d", "one"], ["g2"]))
    qdq("g2", 0.008, "g2d")
    nodes.append(helper.make_node("Mul", ["x", "g2d"], ["g3"]))
    qdq("g3", 0.03, "g3d")
    nodes += [
        helper.make_node("Mul", ["g3d", "half"], ["g4"]),
        helper.make_node("QuantizeLinear", ["g4", "ys", "xz"], ["y"]),
    ]
    info = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "gelu", [info("xq", t, [2, n])],
                          [info("y", t, [2, n])], initializer=inits)  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("n", [5, 16, 37, 3072])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_gelu_between_fake_quant_pairs(n, dtype):
    rng = np.random.default_rng(n)
    info = np.iinfo(dtype)
    xq = rng.integers(info.min, info.max + 1, (2, n)).astype(dtype)
    m = gelu_chain(n, dtype)
    ours = smelt.compile(m).run({"xq": xq})["y"]
    want = run_reference(m, {"xq": xq})["y"]
    np.testing.assert_array_equal(ours, want)
    theirs = ort.InferenceSession(m.SerializeToString()).run(None, {"xq": xq})[0]
    # onnxruntime's erf is its own polynomial: one step where it rounds otherwise
    steps = np.abs(ours.astype(np.int32) - theirs.astype(np.int32))
    assert steps.max() <= 1 and np.mean(steps == 0) >= 0.999


def test_nan_and_saturation_through_a_fused_pair():
    """x/s → Q (NaN → the minimum, ±big saturates) → DQ → ·2 → Q, in one kernel."""
    n = 37
    x = np.linspace(-300, 300, 2 * n).astype(np.float32).reshape(2, n)
    x[0, ::7] = np.nan
    x[1, ::5] = np.float32(0.5) * np.arange(8)  # ties at s = 1
    inits = [numpy_helper.from_array(np.array(v, np.float32), k)
             for k, v in (("s", 1.0), ("two", 2.0), ("s2", 3.0))]  # fmt: skip
    inits.append(numpy_helper.from_array(np.array(-3, np.int8), "z"))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Mul", ["d", "two"], ["e"]),
        helper.make_node("QuantizeLinear", ["e", "s2", "z"], ["y"]),
    ]
    info = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "pair", [info("x", F32, [2, n])],
                          [info("y", TensorProto.INT8, [2, n])],
                          initializer=inits)  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    ours = smelt.compile(m).run({"x": x})["y"]
    np.testing.assert_array_equal(ours, run_reference(m, {"x": x})["y"])
