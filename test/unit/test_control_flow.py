"""If / Loop / Scan folded or unrolled at import, and inputs fixed by `constants=`,
checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli, opt

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def _check(model, feeds, ort_feeds=None, **options) -> None:
    compiled = smelt.compile(model, "cpu", **options)
    got = compiled.run(feeds)
    want = _ort(model, ort_feeds or feeds)
    for name, expected in zip(compiled.output_names, want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6)


def _branch(name: str, nodes, out: str, shape) -> onnx.GraphProto:
    return helper.make_graph(
        nodes, name, [], [helper.make_tensor_value_info(out, F32, shape)]
    )


def _shape_if_model(rows: int) -> onnx.ModelProto:
    """If(Shape(x)[0] == 2): x + x (outer x), else x * 3."""
    then = _branch("then", [helper.make_node("Add", ["x", "x"], ["t"])], "t", None)
    other = _branch(
        "else", [helper.make_node("Mul", ["x", "three"], ["e"])], "e", None
    )
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Equal", ["n", "two"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array(3, np.float32), "three"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", F32, [rows, 4])],
        [helper.make_tensor_value_info("y", F32, [rows, 4])],
        inits,
    )


@pytest.mark.parametrize("rows", [2, 3])  # then branch, else branch
def test_if_on_a_shape_condition(rows: int) -> None:
    x = np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32)
    _check(_shape_if_model(rows), {"x": x})


def _sr_model() -> onnx.ModelProto:
    """y = If(sr == 16000): x * 2 else x * 3, with sr an int64 scalar input."""
    then = _branch("then", [helper.make_node("Add", ["x", "x"], ["t"])], "t", None)
    other = _branch(
        "else", [helper.make_node("Mul", ["x", "three"], ["e"])], "e", None
    )
    nodes = [
        helper.make_node("Equal", ["sr", "rate"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    inits = [
        numpy_helper.from_array(np.array(16000, np.int64), "rate"),
        numpy_helper.from_array(np.array(3, np.float32), "three"),
    ]
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("x", F32, [4]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", F32, [4])],
        inits,
    )


def test_if_on_a_computed_condition_is_refused() -> None:
    with pytest.raises(smelt.SmeltError) as error:
        smelt.compile(_sr_model(), "cpu")
    message = str(error.value)
    assert "If#1" in message and "run time" in message
    assert "constants={'sr': value}" in message


@pytest.mark.parametrize("sr", [16000, 8000])
def test_constants_fold_an_if(sr: int) -> None:
    x = np.arange(4, dtype=np.float32)
    feeds = {"x": x, "sr": np.array(sr, np.int64)}
    _check(_sr_model(), {"x": x}, feeds, constants={"sr": sr})


def test_constants_naming_no_input_is_refused() -> None:
    with pytest.raises(smelt.SmeltError, match=r"'rate_hz'.*inputs: x, sr"):
        smelt.compile(_sr_model(), "cpu", constants={"rate_hz": 16000})


def test_cli_constant(tmp_path, capsys) -> None:
    path = str(tmp_path / "sr.onnx")
    onnx.save(_sr_model(), path)
    assert cli.main(["run", path, "--constant", "sr=16000", "--check"]) == 0
    assert "check PASSED" in capsys.readouterr().out
    assert cli.main(["run", path, "--constant", "sr"]) == 1
    assert "bad --constant 'sr'" in capsys.readouterr().err
    assert opt.main([path, "--constant", "sr=8000"]) == 0
    assert "graph.mul" in capsys.readouterr().out


def test_loop_with_a_constant_trip_count() -> None:
    """Five iterations carrying a (a += b) and b (b = b * 2 + i), scanning a."""
    i64, f32 = TensorProto.INT64, F32
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["a", "b"], ["a2"]),
            helper.make_node("Cast", ["i"], ["fi"], to=F32),
            helper.make_node("Mul", ["b", "two"], ["b2x"]),
            helper.make_node("Add", ["b2x", "fi"], ["b2"]),
            helper.make_node("Identity", ["a2"], ["scan"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", i64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a", f32, [3]),
            helper.make_tensor_value_info("b", f32, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a2", f32, [3]),
            helper.make_tensor_value_info("b2", f32, [3]),
            helper.make_tensor_value_info("scan", f32, [3]),
        ],
    )
    node = helper.make_node(
        "Loop", ["M", "", "a0", "b0"], ["a", "b", "scans"], body=body
    )
    model = _model(
        [node],
        [helper.make_tensor_value_info(n, f32, [3]) for n in ("a0", "b0")],
        [
            helper.make_tensor_value_info("a", f32, [3]),
            helper.make_tensor_value_info("b", f32, [3]),
            helper.make_tensor_value_info("scans", f32, [5, 3]),
        ],
        [
            numpy_helper.from_array(np.array(5, np.int64), "M"),
            numpy_helper.from_array(np.array(2, np.float32), "two"),
        ],
    )
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(3).astype(np.float32) for n in ("a0", "b0")}
    _check(model, feeds)


def test_loop_with_a_data_dependent_exit_is_refused() -> None:
    body = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "ten"], ["cond_out"]),
            helper.make_node("Add", ["a", "a"], ["a2"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a", F32, [3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("a2", F32, [3]),
        ],
    )
    model = _model(
        [helper.make_node("Loop", ["M", "", "a0"], ["a"], body=body)],
        [helper.make_tensor_value_info("a0", F32, [3])],
        [helper.make_tensor_value_info("a", F32, [3])],
        [
            numpy_helper.from_array(np.array(5, np.int64), "M"),
            numpy_helper.from_array(np.array(10, np.float32), "ten"),
        ],
    )
    with pytest.raises(smelt.SmeltError, match="Loop#0: .*data-dependent exit"):
        smelt.compile(model, "cpu")


def test_scan_reverse_along_axis_1() -> None:
    """A running sum over axis 1 of x, read backwards, stacked along axis 1."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc", "xt"], ["acc2"]),
            helper.make_node("Mul", ["acc2", "xt"], ["yt"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("acc", F32, [2]),
            helper.make_tensor_value_info("xt", F32, [2]),
        ],
        [
            helper.make_tensor_value_info("acc2", F32, [2]),
            helper.make_tensor_value_info("yt", F32, [2]),
        ],
    )
    node = helper.make_node(
        "Scan",
        ["init", "x"],
        ["final", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[-1],
    )
    model = _model(
        [node],
        [
            helper.make_tensor_value_info("init", F32, [2]),
            helper.make_tensor_value_info("x", F32, [2, 5]),
        ],
        [
            helper.make_tensor_value_info("final", F32, [2]),
            helper.make_tensor_value_info("ys", F32, [2, 5]),
        ],
    )
    rng = np.random.default_rng(2)
    feeds = {
        "init": rng.standard_normal(2).astype(np.float32),
        "x": rng.standard_normal((2, 5)).astype(np.float32),
    }
    _check(model, feeds)


def _cumsum_model(op: str) -> onnx.ModelProto:
    return _model(
        [helper.make_node(op, ["x", "axis"], ["y"], reverse=1)],
        [
            helper.make_tensor_value_info("x", F32, [3, 4]),
            helper.make_tensor_value_info("axis", TensorProto.INT32, []),
        ],
        [helper.make_tensor_value_info("y", F32, [3, 4])],
    )


@pytest.mark.parametrize("op", ["CumSum"])  # CumProd: newer than onnxruntime
def test_cumulative_over_a_run_time_axis(op: str) -> None:
    model = _cumsum_model(op)
    compiled = smelt.compile(model, "cpu")
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    for axis in (-2, -1, 0, 1):
        feeds = {"x": x, "axis": np.array(axis, np.int32)}
        (want,) = _ort(model, feeds)
        np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-5)
    with pytest.raises(smelt.SmeltError, match=rf"{op}#0: its axis .* out of range"):
        compiled.run({"x": x, "axis": np.array(2, np.int32)})
