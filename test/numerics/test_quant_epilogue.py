"""The float chain after an int8 depthwise conv fused into its kernel (#32):
conv → Q → DQ → BatchNorm → HardSwish / HardSigmoid / Relu / Clip [→ + DQ(r)]
→ Q, as quantizers write a QDQ block, against onnxruntime's unoptimized run
(the QDQ graph in float: exact on every host), integers within one step; and
that no elementwise kernel is left after the conv (profile kernel names)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from int8_oracle import ort_outputs
from onnx import TensorProto, helper, numpy_helper

import smelt

ACTIVATIONS = {
    "hardswish": [helper.make_node("HardSwish", ["n"], ["a"])],
    "hardsigmoid": [helper.make_node("HardSigmoid", ["n"], ["a"], alpha=0.25)],
    "relu": [helper.make_node("Relu", ["n"], ["a"])],
    "clip": [helper.make_node("Clip", ["n", "lo", "hi"], ["a"])],
}


def qdq_block(
    c: int, hw: int, stride: int, act: str, residual: bool, dtype, seed: int
) -> onnx.ModelProto:
    """x_q → DQ → depthwise Conv 3x3 → Q → DQ → BN → act [→ Add DQ(x_q)] → Q;
    with the residual, x_q is made by a plain QDQ depthwise conv before (the
    block inside the network, its tensors NHWC), and dequantized by a node of
    its own for the add."""
    rng = np.random.default_rng(seed)
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    z = (lambda u, s: np.array(u if dtype == np.uint8 else s, dtype))
    f = (lambda a: np.asarray(a, np.float32))
    inits = {
        "sx": f(0.02), "zx": z(131, -5),
        "wq": rng.integers(-127, 128, (c, 1, 3, 3)).astype(np.int8),
        "sw": f(rng.uniform(0.002, 0.01, c)), "zw": np.zeros(c, np.int8),
        "bq": rng.integers(-3000, 3000, c).astype(np.int32),
        "zb": np.zeros(c, np.int32),
        "sm": f(0.04), "zm": z(128, 0),
        "g": f(rng.uniform(-1.5, 1.5, c)), "be": f(rng.normal(0, 0.3, c)),
        "mu": f(rng.normal(0, 0.2, c)), "var": f(rng.uniform(0.5, 1.5, c)),
        "lo": f(-0.5), "hi": f(1.5),
        "sy": f(0.025), "zy": z(60, -70),
    }  # fmt: skip
    inits["sb"] = (inits["sx"] * inits["sw"]).astype(np.float32)
    out_hw = (hw + 2 - 3) // stride + 1
    last = "a"
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["w"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["b"], axis=0),
        helper.make_node("Conv", ["x", "w", "b"], ["cv"], kernel_shape=[3, 3],
                         strides=[stride] * 2, pads=[1] * 4, group=c),
        helper.make_node("QuantizeLinear", ["cv", "sm", "zm"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "sm", "zm"], ["md"]),
        helper.make_node("BatchNormalization", ["md", "g", "be", "mu", "var"],
                         ["n"]),
        *ACTIVATIONS[act],
    ]  # fmt: skip
    inputs = [helper.make_tensor_value_info("xq", t, [1, c, hw, hw])]
    if residual:
        assert stride == 1
        inputs = [helper.make_tensor_value_info("x0q", t, [1, c, hw, hw])]
        inits["w0q"] = rng.integers(-127, 128, (c, 1, 3, 3)).astype(np.int8)
        nodes[:0] = [
            helper.make_node("DequantizeLinear", ["x0q", "sx", "zx"], ["x0"]),
            helper.make_node("DequantizeLinear", ["w0q", "sw", "zw"], ["w0"], axis=0),
            helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["b0"], axis=0),
            helper.make_node("Conv", ["x0", "w0", "b0"], ["c0"], kernel_shape=[3, 3],
                             pads=[1] * 4, group=c),
            helper.make_node("QuantizeLinear", ["c0", "sx", "zx"], ["xq"]),
        ]  # fmt: skip
        nodes.append(helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["r"]))
        nodes.append(helper.make_node("Add", ["r", "a"], ["s"]))
        last = "s"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]))
    graph = helper.make_graph(
        nodes, "qdq_block", inputs,
        [helper.make_tensor_value_info("yq", t, [1, c, out_hw, out_hw])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def feeds_of(m: onnx.ModelProto, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        dtype = np.uint8 if vi.type.tensor_type.elem_type == TensorProto.UINT8 else (
            np.int8
        )
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        info = np.iinfo(dtype)
        out[vi.name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    return out


CASES = [
    pytest.param(24, 17, 1, "hardswish", False, np.uint8, id="hardswish-u8"),
    pytest.param(32, 9, 1, "hardswish", True, np.uint8, id="hardswish-residual"),
    pytest.param(16, 12, 1, "hardsigmoid", False, np.int8, id="hardsigmoid-s8"),
    pytest.param(19, 8, 1, "relu", True, np.int8, id="relu-residual-s8-odd-c"),
    pytest.param(40, 10, 2, "clip", False, np.uint8, id="clip-s2"),
]


@pytest.mark.parametrize("c, hw, stride, act, residual, dtype", CASES)
def test_fused_epilogue(c, hw, stride, act, residual, dtype):
    m = qdq_block(c, hw, stride, act, residual, dtype, seed=c)
    feeds = feeds_of(m, seed=hw)
    compiled = smelt.compile(m, profile=True)
    (ours,) = compiled.run(feeds).values()
    (want,) = ort_outputs(m, feeds, optimized=False)
    assert ours.shape == want.shape and ours.dtype == want.dtype
    diff = np.abs(ours.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= 1, (diff.max(), np.count_nonzero(diff))
    # most elements equal (a step off only on a rounding tie of the float conv)
    assert np.count_nonzero(diff) <= diff.size // 50, np.count_nonzero(diff)
    kernels = [row.kernel for row in compiled.profile()]
    assert any(k.startswith("quant_dwconv") for k in kernels), kernels
    # NCHW ↔ NHWC at the model's edges, the conv's padding, the conv: nothing
    # else (BN, the activation, the add: in the conv's loop nest)
    others = [
        k for k in kernels if not k.startswith(("quant_dwconv", "pad", "transpose"))
    ]
    assert not others, kernels


def test_reference_executor_runs_the_epilogue():
    """The graph after O2's graph passes (one quant.dwconv with an epilogue),
    evaluated by the reference executor, is within a step of onnxruntime."""
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.pipelines import preset
    from smelt.reference.executor import run_graph

    m = qdq_block(24, 11, 1, "hardswish", True, np.uint8, seed=3)
    feeds = feeds_of(m, seed=4)
    module = import_graph(m)
    lower(module, preset("cpu", "O2").split(",convert-graph-to-loop")[0])
    dw = [op for op in module.walk() if op.name == "quant.dwconv"]
    fused = [str(op.attrs().get("epilogue", "")) for op in dw]
    assert len(dw) == 2 and fused[0] == "", fused  # the block's input: plain
    assert "; deq p2 " in fused[1], fused  # the residual, read as 8-bit
    assert not any(op.name.startswith("graph.") and op.name not in (
        "graph.constant", "graph.pad", "graph.transpose") for op in module.walk())
    (ours,) = run_graph(module, feeds).values()
    (want,) = ort_outputs(m, feeds, optimized=False)
    assert np.abs(ours.astype(np.int64) - want.astype(np.int64)).max() <= 1


def test_block_stack_dw_epilogues():
    """smelt.quantize's QDQ file of the PP-LCNet-style stack: each depthwise
    conv's dequantize → BN → HardSwish → quantize runs in its quant_dwconv
    kernel (no other kernel computes those nodes), the logits within one output
    step of onnxruntime's int8 kernels where they are exact here."""
    from int8_oracle import ort_weight_bits
    from test_quant_depthwise import block_stack

    from smelt.compiler.check_quant import output_steps

    rng = np.random.default_rng(1)
    cal = {"input": rng.normal(0, 1, (4, 1, 3, 32, 32)).astype(np.float32)}
    qm = smelt.quantize(block_stack(), cal, reduce_range=ort_weight_bits() == 7).model
    x = {"input": rng.normal(0, 1, (1, 3, 32, 32)).astype(np.float32)}
    compiled = smelt.compile(qm, profile=True)
    (ours,) = compiled.run(x).values()
    (want,) = ort_outputs(qm, x, optimized=True)
    (step,) = output_steps(qm).values()
    assert np.abs(ours - want).max() <= step, (np.abs(ours - want).max(), step)
    rows = compiled.profile()
    for i in range(3):
        chain = f"dw{i}c_DequantizeLinear"
        owners = [r.kernel for r in rows if any(chain in n for n in r.nodes)]
        assert owners and all(k.startswith("quant_dwconv") for k in owners), (
            chain, owners)  # fmt: skip


@pytest.mark.parametrize(
    "c_in, c_out, groups, dtype, relu",
    [
        pytest.param(8, 12, 2, np.uint8, False, id="g2-u8"),
        pytest.param(16, 8, 4, np.int8, True, id="g4-s8-relu"),
        pytest.param(12, 24, 4, np.uint8, True, id="g4-u8-relu"),
    ],
)
def test_grouped_conv_split_into_integer_convs(c_in, c_out, groups, dtype, relu):
    """A grouped QDQ conv (not depthwise) runs as one integer conv per group
    (quant_grouped: qgemm kernels, no float conv), within one step of
    onnxruntime's QDQ run in float."""
    from test_quant_depthwise import qdq_conv

    m = qdq_conv(c_in, c_out, groups, 3, 1, 1, 10, dtype, relu, seed=groups)
    info = np.iinfo(dtype)
    x = np.random.default_rng(5).integers(info.min, info.max + 1, (1, c_in, 10, 10))
    feeds = {"xq": x.astype(dtype)}
    compiled = smelt.compile(m, profile=True)
    (ours,) = compiled.run(feeds).values()
    (want,) = ort_outputs(m, feeds, optimized=False)
    assert ours.shape == want.shape and ours.dtype == want.dtype
    assert np.abs(ours.astype(np.int64) - want.astype(np.int64)).max() <= 1
    kernels = [row.kernel for row in compiled.profile()]
    assert any(k.startswith("quant_qgemm") for k in kernels), kernels
    assert not any("conv2d" in k for k in kernels), kernels
