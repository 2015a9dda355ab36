"""The API boundary: each kind of problem has its SmeltError subclass, and a bug
inside smelt comes out as one InternalError naming the stage, never a traceback."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli
from smelt.passes.graph_fuse import GraphFusePass


def _model(op="Relu", **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _broken_fuse(self, ctx, module):
    raise ZeroDivisionError("a bug")


def test_a_failing_pass_is_an_internal_error_naming_it(monkeypatch):
    monkeypatch.setattr(GraphFusePass, "apply", _broken_fuse)
    with pytest.raises(smelt.InternalError, match="in pass graph-fuse: Zero") as e:
        smelt.compile(_model(), "cpu")
    assert "please report" in str(e.value) and "ZeroDivisionError" in e.value.details


def test_the_cli_prints_one_line_and_the_traceback_only_with_debug(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setattr(GraphFusePass, "apply", _broken_fuse)
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    assert cli.main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("smelt: error: internal error")
    assert cli.main(["run", str(path), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("smelt: error:")


def test_a_failing_run_is_an_internal_error(monkeypatch):
    model = smelt.compile(_model(), "cpu")

    def broken(arrays):
        raise KeyError("lost")

    monkeypatch.setattr(model.program, "run", broken)
    with pytest.raises(smelt.InternalError, match="internal error in the run"):
        model.run({"x": np.zeros((2, 3), np.float32)})


def test_error_kinds():
    with pytest.raises(smelt.UnsupportedModel):
        smelt.compile(_model("Bernoulli"), "cpu")  # its body: RandomUniformLike
    with pytest.raises(smelt.InvalidModel):
        smelt.compile(_model("Relu", bogus=1), "cpu")
    model = smelt.compile(_model(), "cpu")
    with pytest.raises(smelt.InvalidInput):
        model.run({"x": np.zeros((2, 3), np.int32)})
    with pytest.raises(smelt.InvalidInput):
        model.run({"y": np.zeros((2, 3), np.float32)})


def _relu_declared(shape):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_models_onnx_full_check_rejects_are_refused():
    """A declared output shape that contradicts inference: onnx's full checker
    refuses it (and so does smelt, unless told to skip that check)."""
    with pytest.raises(smelt.InvalidModel, match="full_check"):
        smelt.compile(_relu_declared([5, 5]), "cpu")
    # the message names the node and the value whose declared shape is wrong
    with pytest.raises(smelt.InvalidModel, match=r"not valid ONNX at Relu#0: the "
                       r"declared type of 'y' contradicts what it computes"):
        smelt.compile(_relu_declared([5, 5]), "cpu")
    named = _relu_declared([5, 5])
    named.graph.node[0].name = "act"
    with pytest.raises(smelt.InvalidModel, match=r"at Relu 'act': .* of 'y'"):
        smelt.compile(named, "cpu")
    smelt.compile(_relu_declared([5, 5]), "cpu", check_model=False)
    smelt.compile(_relu_declared(None), "cpu")  # unshaped outputs are inferred


def test_full_check_sees_large_weights_as_typed_inputs():
    """Large float weights reach onnx's checker as typed graph inputs (it would
    serialize them: seconds for a model of hundreds of MB): a declared shape that
    contradicts a weight's shape is still refused, a right one compiles, and the
    caller's model keeps its initializers."""
    w = np.ones((64, 128), np.float32)  # 8,192 elements: moved
    shape = numpy_helper.from_array(np.array([1, 8192], np.int64), "s")  # stays

    def model(declared):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Reshape", ["m", "s"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, declared)],
            [numpy_helper.from_array(w, "w"), shape],
        )  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    with pytest.raises(smelt.InvalidModel, match="declared type of 'y'"):
        smelt.compile(model([1, 4096]), "cpu")
    good = model([1, 8192])
    smelt.compile(good, "cpu")
    assert [t.name for t in good.graph.initializer] == ["w", "s"]
