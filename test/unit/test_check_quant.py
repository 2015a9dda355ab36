"""`smelt run --check` of a QDQ model: in output quantization steps, against the
oracle that is exact on this host (onnxruntime's int8 kernels with VNNI or 7-bit
weights, else the QDQ graph as written, else onnx's reference evaluator); both
host paths run here by forcing the VNNI decision."""

import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_quantize_tool import calib, mlp

import smelt
from smelt.compiler import check_quant, cli
from smelt.compiler.check_quant import (
    check_in_steps,
    choose_oracle,
    output_steps,
    quantized_model,
    weights_fit_7_bits,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))

X = {"x": np.random.default_rng(5).standard_normal((4, 32)).astype(np.float32)}


def quantize(tmp_path, *flags: str) -> str:
    """The test MLP through `smelt quantize` (`flags` added); the file's path."""
    onnx.save(mlp(), tmp_path / "m.onnx")
    np.savez(tmp_path / "cal.npz", **calib("x", (4, 32)))
    out = str(tmp_path / "m.int8.onnx")
    rc = cli.main(["quantize", str(tmp_path / "m.onnx"), "--calibration",
                   str(tmp_path / "cal.npz"), "-o", out, *flags])  # fmt: skip
    assert rc == 0
    return out


def run_check(path: str, capsys, *flags: str) -> tuple[int, str]:
    np.savez(path + ".x.npz", **X)
    capsys.readouterr()
    rc = cli.main(["run", path, "--inputs", path + ".x.npz", "-q", "--check", *flags])
    return rc, capsys.readouterr().out


def scaled_output_step(path: str, factor: float) -> onnx.ModelProto:
    """The model at `path` with the scale of the DequantizeLinear that sets its
    output's step times `factor` (that node only: a dequantize scale gone wrong)."""
    model = onnx.load(path)
    inits = {t.name: t for t in model.graph.initializer}
    last = next(
        n
        for n in reversed(model.graph.node)
        if n.op_type == "DequantizeLinear" and n.input[0] not in inits
    )
    scale = numpy_helper.to_array(inits[last.input[1]])
    assert float(scale) == output_steps(model)["y"]
    model.graph.initializer.append(const("wrong_scale", scale * factor))
    last.input[1] = "wrong_scale"
    return model


@pytest.mark.parametrize("vnni", [True, False])
def test_smelt_quantize_file_passes_in_output_steps(
    tmp_path, capsys, monkeypatch, vnni
):
    monkeypatch.setattr(check_quant, "host_has_vnni", lambda: vnni)
    rc, out = run_check(quantize(tmp_path), capsys)
    assert rc == 0, out
    assert "check PASSED: 100.00% of output elements within 1 output step" in out
    why = (
        "its int8 kernels: exact on this host with VNNI"
        if vnni
        else "QDQ graph as written: int8 kernels are not exact on this host without VNNI"
    )
    assert f"of onnxruntime ({why}); needs 99.9%" in out


def test_the_oracle_reads_the_host_not_cpu(tmp_path, capsys, monkeypatch):
    """onnxruntime's kernels follow the machine: --cpu x86-64-v3 does not move the
    oracle, a host without VNNI does."""
    path = quantize(tmp_path)
    monkeypatch.setattr(check_quant, "host_has_vnni", lambda: True)
    rc, out = run_check(path, capsys, "--cpu", "x86-64-v3")
    assert rc == 0 and "exact on this host with VNNI" in out, out


def test_7_bit_weights_keep_onnxruntime_int8_without_vnni(tmp_path, monkeypatch):
    monkeypatch.setattr(check_quant, "host_has_vnni", lambda: False)
    seven = quantized_model(quantize(tmp_path, "--reduce-range"))
    assert weights_fit_7_bits(seven)
    oracle = choose_oracle(seven)
    assert oracle.kind == "onnxruntime" and "fits 7 bits" in oracle.why
    eight = quantized_model(quantize(tmp_path))
    assert not weights_fit_7_bits(eight)
    assert choose_oracle(eight).kind == "onnxruntime-unoptimized"


@pytest.mark.parametrize("vnni", [True, False])
def test_a_miscompiled_scale_fails(tmp_path, capsys, monkeypatch, vnni):
    """smelt's outputs made with the output's dequantize scale 1.5× (what a
    compiler that mixed up a requantize scale would give) fail against the right
    file, on either oracle."""
    monkeypatch.setattr(check_quant, "host_has_vnni", lambda: vnni)
    path = quantize(tmp_path)
    model = quantized_model(path)
    good = smelt.compile(path, "cpu").run(X)
    wrong = smelt.compile(scaled_output_step(path, 1.5), "cpu").run(X)
    capsys.readouterr()
    assert check_in_steps(path, model, X, good) == 0
    assert check_in_steps(path, model, X, wrong) == 2
    out = capsys.readouterr().out
    assert "check FAILED" in out and "worst" in out


def test_a_wrong_scale_in_the_file_is_the_file_s_semantics(tmp_path, capsys):
    """The oracle runs the same file: a model written with a wrong scale is
    compiled faithfully, and the check (of the compiler, not of the
    quantization) passes."""
    path = str(tmp_path / "wrong.onnx")
    onnx.save(scaled_output_step(quantize(tmp_path), 1.5), path)
    rc, out = run_check(path, capsys)
    assert rc == 0, out


def test_onnxruntime_quantize_static_file(tmp_path, capsys, monkeypatch):
    from quant_ort_models import ort_quantize

    batches = [{"x": c} for c in calib("x", (4, 32), n=4)["x"]]
    path = str(tmp_path / "m.qs.onnx")
    onnx.save(ort_quantize(mlp(), batches, "s8"), path)
    for vnni in (True, False):
        monkeypatch.setattr(check_quant, "host_has_vnni", lambda v=vnni: v)
        rc, out = run_check(path, capsys)
        assert rc == 0 and "check PASSED" in out and "output step" in out, out


def qdq_tail(nodes, inits, out_type=TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", out_type, [2, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def const(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def test_output_steps_skip_weights_and_read_integer_outputs():
    w = const("w", np.ones((4, 3)), np.int8)
    inits = [w, const("ws", 0.5), const("s", 0.25), const("zp", 0, np.uint8)]
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wf"]),
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xf"]),
        helper.make_node("MatMul", ["wf", "xf"], ["m"]),  # weight first: walked first
        helper.make_node("Relu", ["m"], ["y"]),
        helper.make_node("Relu", ["x"], ["z"]),
    ]
    steps = output_steps(qdq_tail(nodes, inits))
    assert steps == {"y": 0.25, "z": None}
    nodes[-2] = helper.make_node("QuantizeLinear", ["m", "s", "zp"], ["y"])
    assert output_steps(qdq_tail(nodes, inits, TensorProto.UINT8))["y"] == 1.0


@pytest.mark.parametrize(
    "weight, fits",
    [(np.full((4, 3), 64), True), (np.full((4, 3), -65), False), (None, False)],
)
def test_weights_fit_7_bits(weight, fits):
    inits = [const("s", 0.25), const("zp", 0, np.uint8), const("ws", 0.1)]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xf"]),
    ]
    if weight is None:  # a run-time operand: not known to be exact
        nodes.append(helper.make_node("Transpose", ["xf"], ["wf"]))
    else:
        inits.append(const("w", weight, np.int8))
        nodes.append(helper.make_node("DequantizeLinear", ["w", "ws"], ["w8"]))
        nodes.append(helper.make_node("Transpose", ["w8"], ["wt"], perm=[0, 1]))
        nodes.append(helper.make_node("Identity", ["wt"], ["wf"]))
    nodes += [helper.make_node("MatMul", ["xf", "wf"], ["y"]),
              helper.make_node("Relu", ["x"], ["z"])]  # fmt: skip
    assert weights_fit_7_bits(qdq_tail(nodes, inits)) is fits


def test_integer_contractions_without_vnni_use_onnx_reference(monkeypatch):
    """MatMulInteger runs an int8 kernel even unoptimized: onnx's evaluator is
    the exact oracle there."""
    monkeypatch.setattr(check_quant, "host_has_vnni", lambda: False)
    inits = [const("s", 0.05), const("zp", 0, np.uint8),
             const("w", np.arange(12).reshape(4, 3) * 20 - 110, np.int8)]  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
        helper.make_node("MatMulInteger", ["xq", "w"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["af"], to=TensorProto.FLOAT),
        helper.make_node("QuantizeLinear", ["af", "s", "zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "s", "zp"], ["y"]),
        helper.make_node("Relu", ["x"], ["z"]),
    ]
    model = qdq_tail(nodes, inits)
    assert not weights_fit_7_bits(model)  # |w| up to 110
    oracle = choose_oracle(model)
    assert oracle.kind == "onnx-reference", oracle
    feeds = {"x": np.abs(X["x"][:2, :4])}
    source = model.SerializeToString()
    ref = check_quant.oracle_outputs(oracle, source, model, feeds, None)
    assert check_in_steps(source, model, feeds, ref) == 0
    off = {"y": ref["y"] + np.float32(0.05 * 2), "z": ref["z"]}
    assert check_in_steps(source, model, feeds, off) == 2
