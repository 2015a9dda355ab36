"""quant-cast (f16 / bf16 storage, f32 io and accumulation) and the bf16 GEMM."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.dialects import dtypes, graph
from smelt.errors import SmeltError


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def small_encoder() -> onnx.ModelProto:
    """MatMul → Softmax → LayerNormalization → ReduceMean (opset 17)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 48)).astype(np.float32) * 0.2
    g = (1 + 0.1 * rng.standard_normal(48)).astype(np.float32)
    b = (0.1 * rng.standard_normal(48)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Softmax", ["h"], ["s"], axis=-1),
        helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1),
        helper.make_node("ReduceMean", ["y"], ["m"], keepdims=1, axes=[-1]),
        helper.make_node("Sub", ["y", "m"], ["z"]),
    ]
    inits = [
        helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel())
        for n, a in (("w", w), ("g", g), ("b", b))
    ]
    graph_ = helper.make_graph(
        nodes,
        "enc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16, 32])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 16, 48])],
        inits,
    )
    return helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("precision", ["bf16", "f16"])
def test_cosine_and_io_types(precision):
    model = small_encoder()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 16, 32)).astype(np.float32)
    ref = smelt.compile(model).run({"x": x})["z"]
    low = smelt.compile(model, precision=precision)
    assert f"quant-cast{{to={precision}}}" in low.info["pipeline"]
    assert [s.dtype for s in low.inputs + low.outputs] == [np.float32] * 2
    out = low.run({"x": x})["z"]
    assert out.dtype == np.float32
    assert cosine(out, ref) >= 0.999


def test_graph_is_low_precision_with_f32_edges():
    module = import_graph(small_encoder())
    lower(module, "graph-fold-constants,quant-cast{to=bf16 contractions=true}")
    main = next(iter(module.ops))
    ops = list(main.body.block.ops)
    assert [str(t) for t in main.function_type.inputs] == ["tensor<4x16x32xf32>"]
    assert [str(t) for t in main.function_type.outputs] == ["tensor<4x16x48xf32>"]
    for op in ops:
        if isinstance(op, graph.MatMulOp | graph.SoftmaxOp | graph.LayerNormOp):
            assert graph.element_type_of(op.results[0]) == dtypes.bf16
    casts = [op for op in ops if isinstance(op, graph.CastOp)]
    assert [graph.element_type_of(c.result) for c in casts] == [dtypes.bf16, dtypes.f32]


def test_contractions_keep_f32_by_default():
    module = import_graph(small_encoder())
    lower(module, "graph-fold-constants,quant-cast{to=bf16}")
    ops = list(next(iter(module.ops)).body.block.ops)
    (mm,) = [op for op in ops if isinstance(op, graph.MatMulOp)]
    assert [graph.element_type_of(v) for v in mm.operands] == [dtypes.f32] * 2
    (sm,) = [op for op in ops if isinstance(op, graph.SoftmaxOp)]
    assert graph.element_type_of(sm.result) == dtypes.bf16


@pytest.mark.parametrize("contractions", ["true", "false"])
def test_contractions_option_numerics(contractions):
    model = small_encoder()
    x = np.random.default_rng(2).standard_normal((4, 16, 32)).astype(np.float32)
    ref = smelt.compile(model).run({"x": x})["z"]
    spec = pipelines.preset("cpu", "O2").replace(
        "graph-fold-batchnorm,",
        f"graph-fold-batchnorm,quant-cast{{to=bf16 contractions={contractions}}},",
    )
    out = smelt.compile(model, pipeline=spec).run({"x": x})["z"]
    assert cosine(out, ref) >= 0.999


def test_softmax_and_layernorm_statistics_stay_f32():
    """A softmax over a long row of equal bf16 values: a bf16 running sum stalls at
    256 (1 + 256 rounds back to 256), an f32 one reaches 4096 and gives 1/4096."""
    n = 4096
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    g = helper.make_graph(
        [node],
        "sm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    y = smelt.compile(model, precision="bf16").run({"x": np.zeros((2, n), np.float32)})
    np.testing.assert_allclose(y["y"], 1 / n, rtol=1e-2)
    # Layer norm of a row with a large mean: the bf16 inputs are exact,
    # 64 + {0, 1}, the f32 statistics keep the unit spread (a bf16 running sum
    # would stall far below 4096 · 64.5).
    ln = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
    g = helper.make_graph(
        [ln],
        "ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [
            helper.make_tensor("g", TensorProto.FLOAT, [n], np.ones(n)),
            helper.make_tensor("b", TensorProto.FLOAT, [n], np.zeros(n)),
        ],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = 64 + np.tile(np.arange(n) % 2, (2, 1)).astype(np.float32)
    y = smelt.compile(model, precision="bf16").run({"x": x})["y"]
    expected = np.broadcast_to(np.where(np.arange(n) % 2, 1.0, -1.0), y.shape)
    np.testing.assert_allclose(y, expected, atol=2e-2)


def test_precision_option_and_refusals():
    spec = pipelines.preset("cpu", "O2")
    cast = pipelines.with_precision(spec, "bf16")
    assert "graph-fold-batchnorm,quant-cast{to=bf16}," in cast
    assert pipelines.with_precision(spec, "f32") == spec
    o0 = pipelines.with_precision(pipelines.preset("cpu", "O0"), "f16")
    assert o0.split(",")[1] == "quant-cast{to=f16}"
    with pytest.raises(SmeltError, match="unknown precision"):
        pipelines.with_precision(spec, "int4")
    with pytest.raises(SmeltError, match="to=f16 or to=bf16"):
        lower(import_graph(small_encoder()), "quant-cast{to=f8}")


# --- the bf16 GEMM micro-kernel (vdpbf16ps) ---------------------------------------

from smelt.lowering.llvm import bf16_gemm  # noqa: E402
from smelt.targets.cpu_spec import CpuSpec  # noqa: E402


@pytest.mark.skipif(not bf16_gemm.supported(), reason="host lacks AVX512-BF16")
@pytest.mark.parametrize("mr", [4, 8, 16])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (13, 33, 47), (9, 64, 96)])
def test_bf16_gemm_matches_numpy(m, k, n, mr):
    import ml_dtypes

    rng = np.random.default_rng(m * 100 + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = bf16_gemm.Bf16Gemm(mr=mr)(a, bf16_gemm.pack_b(b), n)
    bf = ml_dtypes.bfloat16
    ref = a.astype(bf).astype(np.float64) @ b.astype(bf).astype(np.float64)
    assert c.shape == (m, n) and c.dtype == np.float32
    # products of bf16 values are exact in f32; only the f32 sums round.
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_bf16_gemm_refused_without_avx512bf16():
    spec = CpuSpec.parse("znver5,-avx512bf16")
    assert not bf16_gemm.supported(spec)
    with pytest.raises(SmeltError, match="AVX512-BF16.*f32 compute from bf16"):
        bf16_gemm.Bf16Gemm(spec)
