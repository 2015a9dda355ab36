"""`smelt show`: the graph before and after fusion as pictures, written as SVG,
HTML, Model Explorer JSON and Graphviz text."""

import json
import os
import sys
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli, pipelines
from smelt.compiler.driver import import_graph
from smelt.compiler.show import graph_spec, pictures, summary, write

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
import models  # noqa: E402


def _model() -> onnx.ModelProto:
    """x → MatMul(w) → Add(b) → Relu → Reshape → y: one matmul kernel with its
    epilogue, then a view."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    s = numpy_helper.from_array(np.array([4, 2], np.int64), "s")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Reshape", ["r", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])], [w, b, s],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def pics():
    return pictures(import_graph(_model()), None)


def test_before_and_after_fusion(pics):
    before, after = pics
    assert [p.title for p in pics] == ["before fusion", "after fusion"]
    assert not before.groups
    assert [n.label for n in before.nodes] == [
        "x", "matmul", "add", "relu", "reshape", "y"
    ]  # fmt: skip
    (kernel,) = after.groups
    assert kernel.kind == "matmul"
    assert [after.node(n).label for n in kernel.nodes] == ["matmul", "add", "relu"]
    matmul = after.node(kernel.nodes[0])
    assert matmul.weight_bytes == 8 * 4 * 4 and matmul.onnx == ["mm"]
    inner = [e for e in after.edges if e.inner]
    assert [e.type for e in inner] == ["2x4xf32", "2x4xf32"]
    into = next(e for e in after.edges if e.src == after.nodes[0].id)
    assert (into.type, into.bytes, into.inner) == ("2x8xf32", 64, False)
    assert summary(after) == "4 ops, 1 graph-level kernels (1 fused)"
    assert summary(before) == "4 ops, 3 graph-level kernels (0 fused)"


def test_the_graph_part_of_a_pipeline_is_cut_at_graph_fuse():
    before, rest = graph_spec(pipelines.preset("cpu", "O2", cpu="x86-64-v3"))
    assert before[0].startswith("target-attach-cpu") and rest[0] == "graph-fuse"
    assert not any(s.startswith(("convert-", "loop-")) for s in before + rest)
    spec = "graph-simplify,convert-graph-to-loop"
    assert graph_spec(spec) == (["graph-simplify"], [])


def test_svg_html_json_dot(pics, tmp_path):
    for suffix in ("svg", "html", "json", "dot"):
        write(pics, str(tmp_path / f"g.{suffix}"), "m.onnx")
    svg = ET.parse(tmp_path / "g.svg").getroot()
    ns = "{http://www.w3.org/2000/svg}"
    kernels = [g for g in svg.iter(f"{ns}g") if g.get("class") == "kernel"]
    assert [g.get("id") for g in kernels] == ["k1"]
    texts = [t.text for t in svg.iter(f"{ns}text")]
    assert "2x8xf32 · 64 B" in texts and "before fusion" in texts
    page = (tmp_path / "g.html").read_text()
    assert page.count("<svg") == 2 and "kernels (after fusion)" in page
    graphs = json.loads((tmp_path / "g.json").read_text())["graphs"]
    assert [g["id"] for g in graphs] == ["before fusion", "after fusion"]
    relu = next(n for n in graphs[1]["nodes"] if n["label"] == "relu")
    assert relu["namespace"] == "k1" and relu["style"]["backgroundColor"]
    assert relu["incomingEdges"][0]["sourceNodeOutputId"] == "0"
    assert relu["outputsMetadata"][0]["attrs"][0]["value"] == "2x4xf32"
    matmul = next(n for n in graphs[1]["nodes"] if n["label"] == "matmul")
    assert {"key": "onnx_nodes", "value": "mm"} in matmul["attrs"]
    dot = (tmp_path / "g.dot").read_text()
    assert dot.count("digraph") == 2 and "subgraph cluster_k1" in dot


def test_cli_and_the_kernel_count_matches_a_compile(tmp_path, capsys):
    path = tmp_path / "enc.onnx"
    onnx.save(models.encoder_layer_model(seq=4, hidden=16, heads=2, ffn=32), path)
    assert cli.main(["show", str(path), "-o", str(tmp_path / "enc.svg")]) == 0
    printed = capsys.readouterr().out
    compiled = smelt.compile(str(path), level="O1")
    kernels = compiled.info["stats"]["kernels"]  # the encoder's lowering adds none
    assert f"{kernels} graph-level kernels" in printed.split(";")[1]
    assert cli.main(["show", str(path), "-o", str(tmp_path / "enc.png")]) == 1
    assert "end it with .svg" in capsys.readouterr().err
