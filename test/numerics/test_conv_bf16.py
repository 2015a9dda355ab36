"""bf16 convs on a CPU whose bf16 dot beats f32 (#36; `bf16_path.fast_dot`: Zen
4 / 5): a group-1 conv with constant weights becomes im2col + the vdpbf16ps GEMM
call (lowering/lower_conv_bf16.py), in NHWC (O2, after graph-convert-layout) and
NCHW (O1); grouped convs, CPUs without avx512bf16 and Intel's (vdpbf16ps slower
than f32 FMAs there) keep f32 convs unless quant-cast{contractions=true}.
Against onnxruntime run on the bf16-rounded input and weights (f32 math): what
is left is the f32 sums' order and the bf16 result."""

from __future__ import annotations

import models
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.lowering.llvm import bf16_gemm

needs_bf16 = pytest.mark.skipif(
    not bf16_gemm.supported(), reason="host lacks AVX512-BF16"
)

# (c, o, kernel, stride, pads, hw, dilation, group)
CASES = [
    (3, 64, 7, 2, (3, 3, 3, 3), 32, 1, 1),  # a stem conv: K = 147, odd
    (16, 40, 3, 1, (1, 1, 1, 1), 14, 1, 1),
    (32, 48, 1, 1, (0, 0, 0, 0), 9, 1, 1),  # NHWC: the input read in place
    (24, 33, 3, 2, (1, 0, 2, 1), 15, 1, 1),  # asymmetric pads, odd N
    (16, 24, 3, 1, (2, 2, 2, 2), 11, 2, 1),  # dilated
    (16, 32, 1, 2, (0, 0, 0, 0), 14, 1, 1),  # 1x1 stride 2: im2col
    (16, 32, 3, 1, (1, 1, 1, 1), 8, 1, 2),  # grouped: stays f32
]


def _round(a: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


def _conv_model(c, o, kernel, stride, pads, hw, dilation, group, bf16_round=False):
    """x → Conv → Add(x2) → Relu → y: a conv with a fused residual epilogue."""
    rng = np.random.default_rng(c * 1000 + o)
    w = rng.standard_normal((o, c // group, kernel, kernel)).astype(np.float32)
    w /= np.sqrt(c // group * kernel * kernel)
    b = rng.standard_normal(o).astype(np.float32)
    if bf16_round:
        w, b = _round(w), _round(b)
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["t"], kernel_shape=[kernel, kernel],
        strides=[stride, stride], pads=list(pads[:2]) + list(pads[2:]),
        dilations=[dilation, dilation], group=group,
    )  # fmt: skip
    oh = (hw + pads[0] + pads[2] - dilation * (kernel - 1) - 1) // stride + 1
    ow = (hw + pads[1] + pads[3] - dilation * (kernel - 1) - 1) // stride + 1
    graph = helper.make_graph(
        [node, helper.make_node("Add", ["t", "r"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, o, oh, ow])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, oh, ow])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


BF16_CPU = "znver4"  # its code runs on any avx512bf16 host


def _gemm_calls(model: onnx.ModelProto, level: str, cpu: str, cast: str = "") -> int:
    module = import_graph(model)
    spec = pipelines.with_precision(pipelines.preset("cpu", level, cpu=cpu), "bf16")
    if cast:
        spec = spec.replace("quant-cast{to=bf16}", f"quant-cast{{to=bf16 {cast}}}")
    lower(module, spec)
    return str(module).count("func.call @smelt.bf16_gemm")


@pytest.mark.parametrize("cpu", ["znver4", "znver5"])
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_group_one_convs_call_the_bf16_gemm(level, cpu):
    """Compiling only (any host): each group-1 conv is one GEMM call; grouped
    convs keep none."""
    for case in CASES:
        want = 1 if case[-1] == 1 else 0
        assert _gemm_calls(_conv_model(*case), level, cpu) == want, case


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_convs_stay_f32_where_the_bf16_dot_is_slow(level):
    model = _conv_model(*CASES[1])
    for cpu in ("x86-64-v3", "znver4,-avx512bf16", "sapphirerapids"):
        assert _gemm_calls(model, level, cpu) == 0, cpu
    # asked for: the bf16 GEMM on any avx512bf16 CPU
    assert _gemm_calls(model, level, "sapphirerapids", "contractions=true") == 1


@needs_bf16
@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:4])))
def test_bf16_convs_against_onnxruntime(case, level):
    pytest.importorskip("onnxruntime")
    c, hw = case[0], case[5]
    rng = np.random.default_rng(hw)
    model = _conv_model(*case)
    y_shape = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    feeds = {
        "x": rng.standard_normal((1, c, hw, hw)).astype(np.float32),
        "r": rng.standard_normal(y_shape).astype(np.float32),
    }
    low = smelt.compile(model, level=level, precision="bf16", cpu=BF16_CPU)
    out = low.run(feeds)["y"]
    rounded = {k: _round(v) for k, v in feeds.items()}
    ref = models.run_onnxruntime(_conv_model(*case, bf16_round=True), rounded)["y"]
    scale = np.abs(ref).max()
    # bf16 inputs and weights, f32 sums, the conv's bf16 result rounded once more
    # before the Add (an epilogue op of its own in bf16): a few 2^-8 of the scale
    np.testing.assert_allclose(out, ref, rtol=2e-2, atol=2e-2 * scale)
    assert models.rel_error(out, ref) < 2.0**-6


def test_values_only_f32_ops_read_stay_f32():
    """x → Conv → Relu → Conv → Relu → y on AVX2 (f32 convs): the first Relu, read
    only by the second (f32) conv, stays f32 (stored bf16 it would be rounded and
    cast back by a kernel of its own) and a remark says so; the last Relu, read
    by the return, is still bf16 (its cast up fuses into its kernel)."""
    from smelt.dialects import dtypes, graph
    from smelt.passes import remarks

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (8, 4, 3, 3)), ("w2", (8, 8, 1, 1)))]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4, name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes, "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
            inits,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )  # fmt: skip
    module = import_graph(model)
    with remarks.collect() as missed:
        lower(module, 'target-attach-cpu{cpu="x86-64-v3"},quant-cast{to=bf16}')
    ops = list(next(iter(module.ops)).body.block.ops)
    relu1, relu2 = [op for op in ops if isinstance(op, graph.ReluOp)]
    conv2 = [op for op in ops if isinstance(op, graph.Conv2dOp)][1]
    assert graph.element_type_of(relu1.result) == dtypes.f32
    assert conv2.input is relu1.result  # no cast between them
    assert graph.element_type_of(relu2.result) == dtypes.bf16
    casts = [op for op in ops if isinstance(op, graph.CastOp)]
    types = [graph.element_type_of(c.result) for c in casts]
    assert types == [dtypes.bf16, dtypes.f32]
    reasons = [(r.nodes, r.reason) for r in missed]
    assert any("relu1" in n and "only f32 ops read it" in why for n, why in reasons)
    assert sum("no fast bf16 path" in why for _, why in reasons) == 2


def test_a_residual_stream_into_a_gemm_stays_f32_on_avx2():
    """conv → relu r → conv → add(r) → relu → global pool → flatten → gemm: every
    value is read by f32 contractions in the end, so nothing is cast (when only
    convs counted, the residual add reached the gemm and the whole stream became
    bf16 with a cast before each conv: light_shufflenet 113 kernels against 97)."""
    from smelt.dialects import graph

    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (8, 8, 3, 3)), ("w2", (8, 8, 1, 1)),
                          ("g", (8, 5)))]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Add", ["c2", "r1"], ["s"]),
        helper.make_node("Relu", ["s"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes, "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
            inits,
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )  # fmt: skip
    module = import_graph(model)
    lower(module, 'target-attach-cpu{cpu="x86-64-v3"},quant-cast{to=bf16}')
    assert not [op for op in module.walk() if isinstance(op, graph.CastOp)]
