"""Source locations: graph ops carry their ONNX node names (MLIR locations) from the
import through fusion and lowering, so kernels, profile rows, pass errors and
run-time check failures name the nodes of the model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func
from xdsl.parser import Parser

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.instrument import module_text
from smelt.dialects import graph, locations, loop
from smelt.errors import InternalError, InvalidInput, SmeltError
from smelt.universe import make_context

OPSET = [helper.make_opsetid("", 17)]


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=OPSET)


def _mlp() -> onnx.ModelProto:
    """mm → act (fuse), then an unnamed Softmax and a Selu (a function body)."""
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["t"], name="mm"),
        helper.make_node("Relu", ["t"], ["r"], name="act"),
        helper.make_node("Softmax", ["r"], ["s"], axis=-1),
        helper.make_node("Selu", ["s"], ["y"], name="sp"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    return _model(nodes, [x], [y], [w])


def _gather(name: str = "embed") -> onnx.ModelProto:
    data = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "d")
    nodes = [
        helper.make_node("Gather", ["d", "i"], ["g"], name=name),
        helper.make_node("Relu", ["g"], ["y"], name="after"),
    ]
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    return _model(nodes, [i], [y], [data])


def _graph_ops(module) -> list:
    return [op for op in module.walk() if isinstance(op, graph.GraphOp)]


def test_every_imported_op_names_its_node():
    module = import_graph(_mlp())
    names = {op.name: locations.names(op) for op in _graph_ops(module)}
    assert all(_graph_ops(module)) and all(names.values())
    assert names["graph.matmul"] == ["mm"] and names["graph.relu"] == ["act"]
    assert names["graph.softmax"] == ["Softmax#2"]  # no name: op type and index
    # Selu is expanded from onnx's function body: ops named Caller/Inner
    assert names["graph.exp"] == ["sp/Exp"] and names["graph.where"] == ["sp/Where"]


def test_an_unnamed_caller_names_its_body_by_op_type_and_index():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    model = _model([helper.make_node("Selu", ["x"], ["y"])], [x], [x])
    model.graph.output[0].name = "y"
    module = import_graph(model)
    assert {n for op in _graph_ops(module) for n in locations.names(op)} >= {
        "Selu#0/Exp", "Selu#0/Where"
    }


def test_locations_survive_printing_and_parsing():
    module = import_graph(_mlp())
    lower(module, "graph-fuse")
    text = module_text(module, full_constants=True, debuginfo=True)
    parsed = Parser(make_context(), text).parse_module()
    before = [locations.names(op) for op in module.walk()]
    after = [locations.names(op) for op in parsed.walk()]
    assert before == after
    fused = [op for op in parsed.walk() if isinstance(op, graph.FusedOp)]
    assert ["mm", "act"] in [locations.names(op) for op in fused]


def test_kernels_and_calls_keep_the_names_through_the_cpu_pipeline():
    module = import_graph(_mlp())
    lower(module, pipelines.preset("cpu", "O2", 1))
    kernels = [
        op for op in module.ops if isinstance(op, func.FuncOp) and loop.is_kernel(op)
    ]
    main = next(op for op in module.ops if op.sym_name.data == "main")
    calls = [op for op in main.body.ops if isinstance(op, func.CallOp)]
    assert kernels and calls
    assert all(locations.names(k) for k in kernels)
    assert all(locations.names(c) for c in calls)
    named = {n for c in calls for n in locations.names(c)}
    assert {"mm", "act", "Softmax#2", "sp/Exp", "sp/Where"} <= named


def test_profile_rows_list_their_onnx_nodes():
    compiled = smelt.compile(_mlp(), profile=True)
    compiled.run({"x": np.ones((4, 8), np.float32)})
    rows = compiled.profile()
    nodes = {row.kernel: row.nodes for row in rows}
    assert nodes["fused_matmul_0"] == ("mm", "act")
    assert all(row.nodes for row in rows)
    kernel, calls, seconds, names = rows[0]  # a row is a named tuple
    assert names == rows[0].nodes


def test_a_shared_kernel_lists_the_nodes_of_every_call():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"], name="first"),
        helper.make_node("Exp", ["a"], ["b"], name="between"),
        helper.make_node("Sigmoid", ["b"], ["y"], name="second"),
    ]
    spec = "graph-fuse{elementwise=false},convert-graph-to-loop,loop-dedup-kernels"
    module = lower(import_graph(_model(nodes, [x], [y])), spec)
    kernels = {
        op.sym_name.data: locations.names(op)
        for op in module.ops if isinstance(op, func.FuncOp) and loop.is_kernel(op)
    }  # fmt: skip
    assert kernels["sigmoid_0"] == ["first", "second"]
    main = next(op for op in module.ops if op.sym_name.data == "main")
    calls = [locations.names(op) for op in main.body.ops if isinstance(op, func.CallOp)]
    assert calls == [["first"], ["between"], ["second"]]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_run_time_check_names_its_node(threads):
    compiled = smelt.compile(_gather(), threads=threads)
    np.testing.assert_array_equal(
        compiled.run({"i": np.array([0, -1, 2])})["y"],
        np.arange(40, dtype=np.float32).reshape(10, 4)[[0, -1, 2]],
    )
    message = r"^ONNX node 'embed': Gather .*out of range"
    with pytest.raises(InvalidInput, match=message):
        compiled.run({"i": np.array([0, 10, 2])})


def test_gather_elements_check_names_its_node():
    data = numpy_helper.from_array(np.ones((3, 4), np.float32), "d")
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [3, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    node = helper.make_node("GatherElements", ["d", "i"], ["y"], axis=1, name="pick")
    compiled = smelt.compile(_model([node], [i], [y], [data]))
    with pytest.raises(InvalidInput, match=r"^ONNX node 'pick': "):
        compiled.run({"i": np.full((3, 2), 7, np.int64)})


def test_a_pass_error_names_the_node():
    text = """
    func.func @main(%x: tensor<4xi32>) -> tensor<4xi32> {
      %y = graph.sigmoid %x : (tensor<4xi32>) -> tensor<4xi32> loc("sig")
      func.return %y : tensor<4xi32>
    }
    """
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(SmeltError, match=r"^ONNX node 'sig': graph.sigmoid on i32"):
        lower(module, "convert-graph-to-loop")


def test_an_internal_error_in_a_lowering_names_the_node(monkeypatch):
    from smelt.lowering import convert_graph_to_loop

    def broken(ctx, op):
        raise KeyError("oops")

    monkeypatch.setitem(convert_graph_to_loop.LOWERINGS, graph.ReluOp, broken)
    module = import_graph(_mlp())
    with pytest.raises(InternalError, match=r"\(on ONNX node 'act'\): KeyError"):
        lower(module, "convert-graph-to-loop")


def test_describe_shortens_long_lists():
    loc = locations.of_names([f"n{i}" for i in range(7)])
    assert locations.describe(loc) == "ONNX nodes 'n0', 'n1', 'n2', 'n3' and 3 more"
    assert locations.describe(locations.of_names([])) == ""
    assert locations.prefixed("boom", locations.node("a")) == "ONNX node 'a': boom"
