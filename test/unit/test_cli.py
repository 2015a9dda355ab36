"""Bad input reaches the user as one clear line and a non-zero exit, never a traceback."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper


def smelt_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "smelt.compiler.cli", *args],
        capture_output=True, text=True, timeout=300,
    )


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("smelt: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def relu_model(shape) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="act")], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.onnx"
    data = relu_model([2, 3]).SerializeToString()
    path.write_bytes(data[: len(data) // 2])
    assert_one_line_error(smelt_cli("run", str(path)), "cut.onnx")


def test_missing_file(tmp_path):
    assert_one_line_error(smelt_cli("run", str(tmp_path / "nope.onnx")), "nope.onnx")


def test_unknown_ops_are_all_listed(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("HardSwishy", ["a"], ["b"], name="first_bad", domain="x.y"),
        helper.make_node("Frobnicate", ["b"], ["y"], name="second_bad", domain="x.y"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("x.y", 1)]
    )
    path = tmp_path / "unknown.onnx"
    onnx.save(model, path)
    assert_one_line_error(
        smelt_cli("run", str(path)), "HardSwishy", "first_bad", "Frobnicate", "second_bad"
    )


def test_dynamic_dim_needs_input_shape(tmp_path):
    path = tmp_path / "dyn.onnx"
    onnx.save(relu_model(["batch", 3]), path)
    assert_one_line_error(smelt_cli("run", str(path)), "x", "--input-shape")
    fixed = smelt_cli("run", str(path), "--input-shape", "x=2x3")
    assert fixed.returncode == 0, fixed.stderr


def test_wrong_input_shape_at_run_time(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model([2, 3]), path)
    inputs = tmp_path / "x.npz"
    np.savez(inputs, x=np.zeros((3, 2), np.float32))
    assert_one_line_error(smelt_cli("run", str(path), "--inputs", str(inputs)), "'x'", "[2, 3]")


def test_bad_input_shape_flag(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model([2, 3]), path)
    assert_one_line_error(smelt_cli("run", str(path), "--input-shape", "x=2xq"), "--input-shape")


@pytest.mark.parametrize("feeds, needle", [
    ({}, "missing input"),
    ({"x": np.zeros((2, 3), np.float32), "z": np.zeros(1)}, "unknown input"),
    ({"x": np.zeros((2, 3), np.float64)}, "dtype float64"),
])
def test_api_input_checks(tmp_path, feeds, needle):
    import smelt

    model = smelt.compile(relu_model([2, 3]))
    with pytest.raises(smelt.SmeltError, match=needle):
        model.run(feeds)


def test_run_profile_prints_kernel_table(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model([4, 8]), path)
    result = smelt_cli("run", str(path), "--profile", "3")
    assert result.returncode == 0, result.stderr
    assert "profile over 3 runs" in result.stdout
    assert any(line.split()[:2] == ["relu_0", "1"] for line in result.stdout.splitlines())
    # each kernel line ends with its ONNX nodes
    lines = result.stdout.splitlines()
    assert any(line.split()[::4] == ["relu_0", "act"] for line in lines)
    gpu = smelt_cli("run", str(path), "--profile", "3", "--target", "gpu")
    assert_one_line_error(gpu, "cpu target only")


def test_check_compares_shapes_and_dtypes(tmp_path, capsys):
    """--check fails on an output of the right values but another shape or dtype
    (a subtraction would have broadcast it)."""
    from smelt.compiler.cli import check_against_onnxruntime

    path = tmp_path / "relu.onnx"
    onnx.save(relu_model([2, 3]), path)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    feeds, y = {"x": x}, np.maximum(x, 0)
    name = relu_model([2, 3]).graph.output[0].name
    assert check_against_onnxruntime(str(path), feeds, {name: y}, 1e-6) == 0
    assert check_against_onnxruntime(str(path), feeds, {name: y[:, None]}, 1e-6) == 2
    assert "smelt gave float32[2, 1, 3], onnxruntime float32[2, 3]" in capsys.readouterr().out
    assert check_against_onnxruntime(str(path), feeds, {name: y.astype(np.float64)}, 1) == 2


def test_input_files_and_output_paths_fail_cleanly(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model(["n", 3]), path)
    x = np.ones((2, 3), np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", x=x)
    data = (tmp_path / "x.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    assert_one_line_error(
        smelt_cli("run", str(path), "--inputs", str(tmp_path / "x.npy")), "np.savez"
    )
    assert_one_line_error(
        smelt_cli("run", str(path), "--inputs", str(tmp_path / "cut.npz")), "cut.npz"
    )
    assert_one_line_error(
        smelt_cli("run", str(path), "--inputs", str(tmp_path / "x.npz"),
                  "-o", str(tmp_path / "no" / "such" / "out.npz")),
        "cannot write the outputs",
    )  # fmt: skip
    # the inputs file fixes the dynamic dim
    ok = smelt_cli("run", str(path), "--inputs", str(tmp_path / "x.npz"), "--check")
    assert ok.returncode == 0 and "check PASSED" in ok.stdout, ok.stderr
    bad = smelt_cli("run", str(path), "--inputs", str(tmp_path / "x.npz"),
                    "--profile", "-5")  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--profile: must be 0 or more" in bad.stderr


def test_random_weights_make_the_check_able_to_fail():
    """The README's first command: light_squeezenet's shipped weights are constant
    fills (its probabilities come out nearly uniform); --random-weights gives it
    seeded weights, the same ones to onnxruntime, so --check compares outputs
    that carry information (and the logits join the outputs)."""
    ok = smelt_cli("run", "light_squeezenet", "--random-weights", "3", "--check")
    assert ok.returncode == 0 and "check PASSED" in ok.stdout, ok.stderr
    lines = [ln for ln in ok.stdout.splitlines() if "max relative error" in ln]
    assert len(lines) == 2, ok.stdout  # the probabilities and the logits
    from smelt.compiler.cli import resolve_model
    from smelt.frontend.random_weights import random_weights

    model = onnx.load(resolve_model("light_squeezenet"))
    a, b = random_weights(model, 3), random_weights(model, 4)
    wa = {t.name: t.raw_data for t in a.graph.initializer}
    wb = {t.name: t.raw_data for t in b.graph.initializer}
    assert wa.keys() == wb.keys() and any(wa[k] != wb[k] for k in wa)  # seeded
