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
    assert pipelines.split(o0)[1] == "quant-cast{to=f16}"
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


# --- the bf16 GEMM wired in: precision="bf16" on an AVX512-BF16 target ------------

needs_bf16 = pytest.mark.skipif(
    not bf16_gemm.supported(), reason="host lacks AVX512-BF16"
)


def _bf16_round(a: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16).astype(np.float64)


def _model(nodes, inputs, output, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes,
        "m",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])],
        [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel())
         for n, a in inits],  # fmt: skip
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


BF16_CPU = "znver4"
"""A CPU whose bf16 dot beats f32 (`bf16_path.fast_dot`), so that quant-cast makes
the contractions bf16 by default; its code runs on any avx512bf16 host."""


def _gemm_calls(model: onnx.ModelProto, cpu: str = BF16_CPU) -> int:
    module = import_graph(model)
    spec = pipelines.with_precision(pipelines.preset("cpu", "O2", cpu=cpu), "bf16")
    lower(module, spec)
    return str(module).count("func.call @smelt.bf16_gemm")


def _close(out: np.ndarray, ref: np.ndarray) -> None:
    # bf16 inputs, f32 sums, a bf16 result: about 2^-8 relative to the scale
    scale = np.abs(ref).max() + 1e-6
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2 * scale)


@needs_bf16
@pytest.mark.parametrize(
    "lead,k,n", [((1,), 1, 1), ((3,), 5, 7), ((13,), 33, 47), ((2, 9), 64, 96)]
)
def test_bf16_gemm_wired_matmul_odd_shapes(lead, k, n):
    rng = np.random.default_rng(k * 100 + n)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Add", ["h", "b"], ["h1"]),
         helper.make_node("Relu", ["h1"], ["y"])],
        [("x", [*lead, k])],
        ("y", [*lead, n]),
        [("w", w), ("b", bias)],
    )  # fmt: skip
    assert _gemm_calls(model) == 1
    x = rng.standard_normal((*lead, k)).astype(np.float32)
    out = smelt.compile(model, precision="bf16", cpu=BF16_CPU).run({"x": x})["y"]
    ref = np.maximum(_bf16_round(x) @ _bf16_round(w) + _bf16_round(bias), 0)
    _close(out, ref)


@needs_bf16
@pytest.mark.parametrize("trans_b,alpha,beta", [(0, 1.0, 1.0), (1, 0.5, 2.0)])
def test_bf16_gemm_wired_gemm(trans_b, alpha, beta):
    rng = np.random.default_rng(7)
    m, k, n = 11, 37, 45
    w = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node(
        "Gemm", ["x", "w", "c"], ["y"], transB=trans_b, alpha=alpha, beta=beta
    )
    model = _model([node], [("x", [m, k])], ("y", [m, n]), [("w", w), ("c", c)])
    assert _gemm_calls(model) == 1
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = smelt.compile(model, precision="bf16", cpu=BF16_CPU).run({"x": x})["y"]
    wt = _bf16_round(w.T if trans_b else w)
    _close(out, alpha * (_bf16_round(x) @ wt) + beta * _bf16_round(c))


@needs_bf16
@pytest.mark.parametrize(
    "a_shape,b_shape", [((2, 3, 17, 9), (2, 3, 9, 33)), ((2, 5, 7), (7, 40))]
)
def test_bf16_gemm_wired_run_time_b(a_shape, b_shape):
    """Both operands are inputs (attention's Q·Kᵀ): B is packed by a kernel."""
    rng = np.random.default_rng(3)
    out_shape = [*a_shape[:-1], b_shape[-1]]
    model = _model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [("a", list(a_shape)), ("b", list(b_shape))],
        ("y", out_shape),
    )
    assert _gemm_calls(model) == 1
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    low = smelt.compile(model, precision="bf16", cpu=BF16_CPU)
    out = low.run({"a": a, "b": b})["y"]
    _close(out, _bf16_round(a) @ _bf16_round(b))


@needs_bf16
def test_bf16_mlp_cosine():
    import models

    model = models.mlp_gelu_model()
    x = np.random.default_rng(4).standard_normal((64, 1024)).astype(np.float32)
    assert _gemm_calls(model) == 2
    ref = smelt.compile(model).run({"x": x})["y"]
    out = smelt.compile(model, precision="bf16", cpu=BF16_CPU).run({"x": x})["y"]
    assert cosine(out, ref) >= 0.999


def test_quant_cast_converts_fast_contractions_by_default():
    """On a target whose bf16 dot beats f32 (Zen 4 / 5) quant-cast makes matmuls
    with a bf16 GEMM path bf16; without the feature, on Intel's avx512bf16 CPUs
    (vdpbf16ps slower than f32 FMAs there: bf16_path.FAST_DOT) or with
    contractions=false they stay f32."""
    for cpu, expected in [
        ("znver5", dtypes.bf16),
        ("znver4", dtypes.bf16),
        ("znver5,-avx512bf16", dtypes.f32),
        ("sapphirerapids", dtypes.f32),
    ]:
        module = import_graph(small_encoder())
        attach = pipelines.split(pipelines.preset("cpu", "O0", cpu=cpu))[0]
        lower(module, f"{attach},graph-fold-constants,quant-cast{{to=bf16}}")
        ops = list(next(iter(module.ops)).body.block.ops)
        (mm,) = [op for op in ops if isinstance(op, graph.MatMulOp)]
        assert graph.element_type_of(mm.rhs) == expected, cpu
    module = import_graph(small_encoder())
    lower(
        module,
        'target-attach-cpu{cpu="znver5"},graph-fold-constants,'
        "quant-cast{to=bf16 contractions=false}",
    )
    (mm,) = [op for op in module.walk() if isinstance(op, graph.MatMulOp)]
    assert graph.element_type_of(mm.rhs) == dtypes.f32


def test_bf16_fallback_without_avx512bf16():
    """cpu="znver5,-avx512bf16": no GEMM call, f32 contractions, same answer."""
    import models

    model = models.mlp_gelu_model(batch=5, d_in=33, hidden=70, d_out=9)
    cpu = "znver5,-avx512bf16"
    assert _gemm_calls(model, cpu) == 0
    x = np.random.default_rng(5).standard_normal((5, 33)).astype(np.float32)
    ref = smelt.compile(model).run({"x": x})["y"]
    try:
        low = smelt.compile(model, precision="bf16", cpu=cpu)
        out = low.run({"x": x})["y"]
    except SmeltError as e:  # a host that cannot run znver5 code
        pytest.skip(str(e))
    assert cosine(out, ref) >= 0.999
