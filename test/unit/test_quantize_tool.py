"""smelt quantize: the QDQ models it writes (onnx.checker, onnxruntime), the
calibration ranges of each method, the weight / bias encodings, --exclude, the
accuracy budget, calibration folders and the memory bound."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli
from smelt.errors import SmeltError
from smelt.quantize.calibration import (
    BINS,
    Calibration,
    TensorStats,
    collect,
    entropy_threshold,
    tensor_range,
)  # fmt: skip


def conv_net(seed: int = 0) -> onnx.ModelProto:
    """x[1,3,16,16] → Conv+Relu → Conv+Relu → GlobalAveragePool → Flatten →
    Gemm."""
    rng = np.random.default_rng(seed)

    def init(name, *shape, scale=0.3):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name
        )

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    inits = [init("w1", 8, 3, 3, 3), init("b1", 8, scale=0.1),
             init("w2", 16, 8, 3, 3, scale=0.15), init("b2", 16, scale=0.1),
             init("w3", 10, 16), init("b3", 10, scale=0.1)]  # fmt: skip
    graph = helper.make_graph(
        nodes, "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def mlp(seed: int = 0) -> onnx.ModelProto:
    """x[4,32] → MatMul+Add → Relu → MatMul → y[4,8]."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((32, 64)) / np.sqrt(32)).astype(np.float32)
    w2 = (rng.standard_normal((64, 8)) / np.sqrt(64)).astype(np.float32)
    b1 = (rng.standard_normal(64) * 0.1).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    inits = [numpy_helper.from_array(a, n) for n, a in [("w1", w1), ("w2", w2),
                                                        ("b1", b1)]]  # fmt: skip
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def calib(name: str, shape, n: int = 16, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal((n, *shape)).astype(np.float32)}


def run(model: onnx.ModelProto, feeds: dict) -> list:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def inits(model) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
@pytest.mark.parametrize("activations", ["u8", "s8"])
def test_conv_net_writes_valid_qdq(method, activations):
    model = conv_net()
    data = calib("x", (1, 3, 16, 16))
    result = smelt.quantize(model, data, method=method, activations=activations)
    q = result.model
    onnx.checker.check_model(q, full_check=True)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("Conv") == 2 and "QuantizeLinear" in ops
    x = data["x"][0]
    (ref,), (got,) = run(model, {"x": x}), run(q, {"x": x})
    assert cosine(ref, got) > 0.98
    zp = inits(q)["x_zero_point"]
    assert zp.dtype == (np.uint8 if activations == "u8" else np.int8)
    if activations == "s8":
        assert zp == 0


def test_per_channel_weight_scales_and_int32_bias():
    model = conv_net()
    result = smelt.quantize(model, calib("x", (1, 3, 16, 16)))
    arrays, w1 = inits(result.model), inits(model)["w1"]
    np.testing.assert_allclose(arrays["w1_scale"], np.abs(w1).max(axis=(1, 2, 3)) / 127,
                               rtol=1e-6)
    assert arrays["w1_quantized"].dtype == np.int8
    assert np.abs(arrays["w1_quantized"]).max() == 127
    dq = {n.output[0]: n for n in result.model.graph.node
          if n.op_type == "DequantizeLinear"}  # fmt: skip
    assert dq["w1_DequantizeLinear_Output"].attribute[0].i == 0  # Conv: axis 0
    assert dq["w3_DequantizeLinear_Output"].attribute[0].i == 0  # Gemm transB=1
    # bias: int32, scale s_x · s_w per channel
    assert arrays["b1_quantized"].dtype == np.int32
    np.testing.assert_allclose(arrays["b1_scale"],
                               arrays["x_scale"] * arrays["w1_scale"], rtol=1e-6)
    np.testing.assert_allclose(arrays["b1_quantized"] * arrays["b1_scale"],
                               inits(model)["b1"], atol=arrays["b1_scale"].max())


def test_matmul_weights_per_output_column():
    model = mlp()
    result = smelt.quantize(model, calib("x", (4, 32)))
    arrays, w1 = inits(result.model), inits(model)["w1"]
    np.testing.assert_allclose(arrays["w1_scale"], np.abs(w1).max(axis=0) / 127,
                               rtol=1e-6)
    dq = [n for n in result.model.graph.node if n.output[0].startswith("w1_Deq")]
    assert dq[0].attribute[0].i == 1


def test_reduce_range_writes_7_bit_weights_that_avx2_multiplies_with_vpmaddubsw():
    """reduce_range: weights in [-64, 64] (scale max|w| / 64), still accurate; on
    a CPU without VNNI (x86-64-v3) quant-pack-gemm then takes vpmaddubsw."""
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.pipelines import preset, split
    from smelt.dialects.quant_gemm import QGemmOp

    model = mlp()
    data = calib("x", (4, 32), n=32)
    result = smelt.quantize(model, data, reduce_range=True, report=True)
    arrays, w1 = inits(result.model), inits(model)["w1"]
    np.testing.assert_allclose(arrays["w1_scale"], np.abs(w1).max(axis=0) / 64,
                               rtol=1e-6)  # fmt: skip
    assert np.abs(arrays["w1_quantized"]).max() == 64
    assert result.accuracy.cosine >= 0.99
    module = import_graph(result.model)
    passes = split(preset("cpu", cpu="x86-64-v3"))
    lower(module, ",".join(passes[: passes.index("quant-pack-gemm") + 1]))
    variants = {op.attr("variant") for op in module.walk() if isinstance(op, QGemmOp)}
    assert variants == {"maddubs256"}


def test_mlp_cosine_and_report():
    model = mlp()
    data = calib("x", (4, 32), n=32)
    result = smelt.quantize(model, data, report=True)
    onnx.checker.check_model(result.model)
    assert result.accuracy.cosine >= 0.99
    x = data["x"][3]
    assert cosine(run(model, {"x": x})[0], run(result.model, {"x": x})[0]) >= 0.99
    text = result.format()
    assert "model bytes: fp32" in text and "cosine" in text and "dB  h" in text
    assert set(result.accuracy.tensors) == {"x", "h", "r"}


def test_exclude_keeps_a_node_f32():
    model = mlp()
    result = smelt.quantize(model, calib("x", (4, 32)), exclude=["fc2"])
    fc2 = next(n for n in result.model.graph.node if n.name == "fc2")
    assert list(fc2.input) == ["r", "w2"]  # float input, float weight
    assert "w2" in inits(result.model) and result.quantized == ["fc1"]
    with pytest.raises(SmeltError, match="names no node"):
        smelt.quantize(model, calib("x", (4, 32)), exclude=["nope"])


def test_op_types_select_what_is_quantized():
    result = smelt.quantize(conv_net(), calib("x", (1, 3, 16, 16)), op_types=["Gemm"])
    assert result.quantized == ["Gemm_6"]
    conv = next(n for n in result.model.graph.node if n.op_type == "Conv")
    assert conv.input[1] == "w1"


def test_accuracy_budget_keeps_layers_until_met():
    model = conv_net()
    data = calib("x", (1, 3, 16, 16), n=8)
    plain = smelt.quantize(model, data, report=True)
    target = plain.accuracy.sqnr + 6.0  # beyond full int8: something must stay f32
    result = smelt.quantize(model, data, accuracy_budget=f"sqnr={target}")
    assert result.kept and result.budget.met(result.accuracy)
    assert len(result.kept) + len(result.quantized) == 3
    assert "kept" in result.format() and "met" in result.format()
    everything = smelt.quantize(model, data, accuracy_budget="cos=1.5")
    assert sorted(everything.kept) == ["Conv_0", "Conv_2", "Gemm_6"]
    with pytest.raises(SmeltError, match="bad accuracy budget"):
        smelt.quantize(model, data, accuracy_budget="fast")


def test_calibration_from_a_folder(tmp_path):
    data = calib("x", (4, 32), n=5)
    for i in range(5):
        np.savez(tmp_path / f"s{i:02d}.npz", x=data["x"][i])
    from_dir = smelt.quantize(mlp(), str(tmp_path), method="percentile")
    from_npz = smelt.quantize(mlp(), data, method="percentile")
    assert from_dir.ranges == from_npz.ranges
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 3), np.float32))
    with pytest.raises(SmeltError, match="has shape"):
        smelt.quantize(mlp(), str(tmp_path))


def stats_of(x: np.ndarray) -> TensorStats:
    s = TensorStats()
    s.add_range(x)
    s.start_histograms()
    s.add_histograms(x)
    return s


def test_minmax_and_percentile_ranges():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(200_000).astype(np.float32)
    s = stats_of(x)
    assert tensor_range(s, "minmax", 99.99, False) == (float(x.min()), float(x.max()))
    assert tensor_range(s, "minmax", 99.99, True) == (-s.absmax, s.absmax)
    width = s.absmax / BINS
    _, t = tensor_range(s, "percentile", 99.99, True)
    assert abs(t - np.percentile(np.abs(x), 99.99)) <= 2 * width
    lo, hi = tensor_range(s, "percentile", 99.9, False)
    assert abs(hi - np.percentile(x, 99.9)) <= 2 * (x.max() - x.min()) / BINS
    assert abs(lo - np.percentile(x, 0.1)) <= 2 * (x.max() - x.min()) / BINS


def test_entropy_clips_outliers_of_a_gaussian():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(500_000), [60.0, -50.0, 55.0]])
    s = stats_of(x.astype(np.float32))
    lo, hi = tensor_range(s, "entropy", 99.99, False)
    assert 3.5 < hi < 10 and -10 < lo < -3.5  # the outliers are clipped
    assert tensor_range(s, "minmax", 99.99, False) == (-50.0, 60.0)
    # without outliers the threshold keeps the bulk of the distribution
    t = entropy_threshold(np.histogram(np.abs(rng.standard_normal(500_000)), BINS,
                                       (0, 5))[0], 5.0)
    assert 2.5 < t <= 5.0
    # a ReLU's output: the spike of zeros does not drive the search
    relu = stats_of(np.maximum(rng.standard_normal(500_000), 0).astype(np.float32))
    assert tensor_range(relu, "entropy", 99.99, False)[1] > 2.5


def test_histograms_do_not_grow_with_the_sample_count():
    model = mlp()
    from smelt.quantize.evaluate import session

    sizes = []
    for n in (4, 64):
        cal = Calibration(calib("x", (4, 32), n=n), {"x": (4, 32)})
        stats = collect(session(model, ["h", "r"]), cal, ["x", "h", "r"], True)
        sizes.append([(s.hist.shape, s.abs_hist.shape) for s in stats.values()])
        assert all(sum(s.hist) == 4 * 32 * n if t == "x" else True
                   for t, s in stats.items())  # fmt: skip
    assert sizes[0] == sizes[1] == [((BINS,), (BINS,))] * 3


def test_cli_quantize(tmp_path, capsys):
    onnx.save(mlp(), tmp_path / "m.onnx")
    np.savez(tmp_path / "cal.npz", **calib("x", (4, 32)))
    out = tmp_path / "m.int8.onnx"
    rc = cli.main(["quantize", str(tmp_path / "m.onnx"), "--calibration",
                   str(tmp_path / "cal.npz"), "-o", str(out), "--report",
                   "--method", "entropy", "--activations", "s8"])  # fmt: skip
    assert rc == 0 and out.exists()
    printed = capsys.readouterr().out
    assert "per-tensor SQNR" in printed and "cosine" in printed
    onnx.checker.check_model(onnx.load(out))
    rc = cli.main(["quantize", str(tmp_path / "m.onnx"), "--calibration",
                   str(tmp_path / "none.npz"), "-o", str(out)])
    assert rc == 1 and "cannot read calibration" in capsys.readouterr().err
