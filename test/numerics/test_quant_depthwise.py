"""Int8 depthwise and grouped convs (#32) against oracles exact on every host:
single QDQ convs against onnxruntime's unoptimized run (the QDQ graph in float,
`int8_oracle`), integers within one quantization step (the requantization
rounds f32(acc)·multiplier, the float graph rounds the float conv: ties may
differ by one); a PP-LCNet-style block stack quantized by `smelt.quantize`
against onnxruntime's int8 kernels where they are exact (VNNI, or 7-bit
weights), within one step; and that every depthwise conv became a
quant.dwconv kernel (profile kernel names)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from int8_oracle import ort_outputs, ort_weight_bits
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler.check_quant import output_steps

ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def qdq_conv(
    c_in: int, c_out: int, group: int, k: int, stride: int, pad: int, hw: int,
    dtype, relu: bool, seed: int, dilation: int = 1,
) -> onnx.ModelProto:  # fmt: skip
    """x_q → DQ → Conv(DQ(w_q) per channel, DQ(b_q)) [→ Relu] → Q → y_q."""
    rng = np.random.default_rng(seed)
    s_x, s_y = 0.02, 0.05
    z_x = 131 if dtype == np.uint8 else -5
    z_y = 120 if dtype == np.uint8 else 3
    w_q = rng.integers(-127, 128, (c_out, c_in // group, k, k)).astype(np.int8)
    s_w = rng.uniform(0.002, 0.01, c_out).astype(np.float32)
    b_q = rng.integers(-3000, 3000, c_out).astype(np.int32)
    s_b = (np.float32(s_x) * s_w).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(s_x, np.float32), "sx"),
        numpy_helper.from_array(np.array(z_x, dtype), "zx"),
        numpy_helper.from_array(w_q, "wq"),
        numpy_helper.from_array(s_w, "sw"),
        numpy_helper.from_array(np.zeros(c_out, np.int8), "zw"),
        numpy_helper.from_array(b_q, "bq"),
        numpy_helper.from_array(s_b, "sb"),
        numpy_helper.from_array(np.zeros(c_out, np.int32), "zb"),
        numpy_helper.from_array(np.array(s_y, np.float32), "sy"),
        numpy_helper.from_array(np.array(z_y, dtype), "zy"),
    ]
    conv_out = "r" if relu else "c"
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["w"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["b"], axis=0),
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k],
                         strides=[stride, stride], pads=[pad] * 4, group=group,
                         dilations=[dilation, dilation]),
        *([helper.make_node("Relu", ["c"], ["r"])] if relu else []),
        helper.make_node("QuantizeLinear", [conv_out, "sy", "zy"], ["yq"]),
    ]  # fmt: skip
    t = ONNX_TYPE[dtype]
    out = (hw + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    graph = helper.make_graph(
        nodes, "qdq_conv", [helper.make_tensor_value_info("xq", t, [1, c_in, hw, hw])],
        [helper.make_tensor_value_info("yq", t, [1, c_out, out, out])], inits,
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def run_smelt(m: onnx.ModelProto, feeds: dict, **options) -> tuple[list, list[str]]:
    """smelt's outputs at O2 (NHWC, the int8 presets) and its kernels' names."""
    compiled = smelt.compile(m, profile=True, **options)
    out = compiled.run(feeds)
    return list(out.values()), [row.kernel for row in compiled.profile()]


def steps_apart(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max(initial=0))


DEPTHWISE = [
    # c, k, stride, pad, hw, dtype, relu, dilation
    pytest.param(24, 3, 2, 1, 17, np.uint8, False, 1, id="3x3-s2-pad1-u8"),
    pytest.param(16, 3, 1, 1, 12, np.uint8, True, 1, id="3x3-s1-pad1-u8-relu"),
    pytest.param(40, 5, 2, 2, 15, np.int8, False, 1, id="5x5-s2-pad2-s8"),
    pytest.param(8, 3, 1, 2, 9, np.int8, False, 2, id="3x3-dilated-s8"),
    pytest.param(19, 3, 1, 0, 8, np.uint8, False, 1, id="3x3-nopad-odd-c"),
]


@pytest.mark.parametrize("c, k, stride, pad, hw, dtype, relu, dilation", DEPTHWISE)
def test_depthwise(c, k, stride, pad, hw, dtype, relu, dilation):
    m = qdq_conv(c, c, c, k, stride, pad, hw, dtype, relu, seed=c, dilation=dilation)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    x = rng.integers(info.min, info.max + 1, (1, c, hw, hw)).astype(dtype)
    (ours,), kernels = run_smelt(m, {"xq": x})
    (want,) = ort_outputs(m, {"xq": x}, optimized=False)
    assert ours.shape == want.shape and ours.dtype == want.dtype
    assert steps_apart(ours, want) <= 1
    assert any(k.startswith("quant_dwconv") for k in kernels), kernels
    assert not any("conv2d" in k for k in kernels), kernels


@pytest.mark.parametrize("groups", [2, 4])
def test_grouped(groups):
    """Grouped convs (not depthwise) compute right in int8 QDQ chains."""
    c = 8
    m = qdq_conv(c, 12, groups, 3, 2, 1, 11, np.uint8, False, seed=groups)
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, c, 11, 11)).astype(np.uint8)
    (ours,), _ = run_smelt(m, {"xq": x})
    (want,) = ort_outputs(m, {"xq": x}, optimized=False)
    assert steps_apart(ours, want) <= 1


def block_stack(seed: int = 0) -> onnx.ModelProto:
    """stem conv, then (depthwise 3x3 s1 / s2 → BN → HardSwish → pointwise →
    BN →
    HardSwish [+ residual]) blocks, global pool, Gemm: PP-LCNet / MobileNet style."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def init(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def cbh(x, cin, cout, k, s, group, tag):
        fan_in = cin // group * k * k
        w = rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k))
        nodes.append(helper.make_node(
            "Conv", [x, init(f"{tag}w", w), init(f"{tag}b", rng.normal(0, .05, cout))],
            [f"{tag}c"], name=f"{tag}conv", kernel_shape=[k, k], strides=[s, s],
            pads=[k // 2] * 4, group=group))
        nodes.append(helper.make_node(
            "BatchNormalization",
            [f"{tag}c", init(f"{tag}g", rng.uniform(.5, 1.5, cout)),
             init(f"{tag}be", rng.normal(0, .1, cout)),
             init(f"{tag}m", rng.normal(0, .1, cout)),
             init(f"{tag}v", rng.uniform(.5, 1.5, cout))], [f"{tag}n"]))
        nodes.append(helper.make_node("HardSwish", [f"{tag}n"], [f"{tag}h"]))
        return f"{tag}h"  # fmt: skip

    h = cbh("input", 3, 16, 3, 2, 1, "stem")
    for i, (cin, cout, s) in enumerate([(16, 32, 1), (32, 32, 2), (32, 32, 1)]):
        d = cbh(h, cin, cin, 3, s, cin, f"dw{i}")
        p = cbh(d, cin, cout, 1, 1, 1, f"pw{i}")
        if cin == cout and s == 1:
            nodes.append(helper.make_node("Add", [p, h], [f"res{i}"]))
            p = f"res{i}"
        h = p
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    nodes.append(helper.make_node(
        "Gemm", ["flat", init("fcw", rng.normal(0, .1, (32, 10))),
                 init("fcb", np.zeros(10))], ["logits"], name="fc"))  # fmt: skip
    graph = helper.make_graph(
        nodes, "block_stack",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits,
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_block_stack_quantized():
    """smelt.quantize's QDQ file of the block stack: every depthwise conv a
    quant.dwconv; the logits within one output step of onnxruntime's int8
    kernels on a file they are exact for here (8-bit weights with VNNI, else
    7-bit)."""
    m = block_stack()
    rng = np.random.default_rng(1)
    cal = {"input": rng.normal(0, 1, (4, 1, 3, 32, 32)).astype(np.float32)}
    reduce = ort_weight_bits() == 7
    result = smelt.quantize(m, cal, reduce_range=reduce)
    qm = result.model
    x = {"input": rng.normal(0, 1, (1, 3, 32, 32)).astype(np.float32)}
    (ours,), kernels = run_smelt(qm, x)
    (want,) = ort_outputs(qm, x, optimized=True)
    (step,) = output_steps(qm).values()  # the nearest quantizer's scale
    assert ours.shape == want.shape and step is not None
    assert np.abs(ours - want).max() <= step, (np.abs(ours - want).max(), step)
    dw = sum(k.startswith("quant_dwconv") for k in kernels)
    assert dw >= 1 and not any("conv2d" in k for k in kernels), kernels


def test_reference_kernel_of_dwconv():
    """The reference executor runs quant.dwconv (graph-fold-constants and the
    explore fallback evaluate graphs after quant-pack-gemm): its result on the
    graph after the O2 graph passes equals onnxruntime's QDQ run within a step."""
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.pipelines import preset
    from smelt.reference.executor import run_graph

    c, hw = 24, 17
    m = qdq_conv(c, c, c, 3, 2, 1, hw, np.uint8, True, seed=5)
    x = np.random.default_rng(2).integers(0, 256, (1, c, hw, hw)).astype(np.uint8)
    module = import_graph(m)
    lower(module, preset("cpu", "O2").split(",convert-graph-to-loop")[0])
    assert any(op.name == "quant.dwconv" for op in module.walk())
    (ours,) = run_graph(module, {"xq": x}).values()
    (want,) = ort_outputs(m, {"xq": x}, optimized=False)
    assert ours.shape == want.shape and steps_apart(ours, want) <= 1
