"""Masked vector tails (AVX-512 opmasks) against onnxruntime: sizes that no
vector width divides (17, 31, 1,000,003 elements; matmul / conv outputs of 17
and 31 channels; reductions and softmax over odd rows), on the host's code
(`tail=auto`: masked tails where it has AVX-512) at 1 and 2 threads and on AVX2 code
(cpu="x86-64-v3", scalar tails). Error: max|a - b| / max|b| <= 1e-4."""

from __future__ import annotations

import numpy as np
import pytest
from models import rel_error, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import pipelines

CASES = [("host", 1), ("host", 2), ("x86-64-v3", 1)]


def model(nodes, inputs, output, shape, weights=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(w, n) for n, w in weights],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check(m, feeds, cpu, threads):
    """The O3 preset with `loop-vectorize{tail=auto}` (masked tails where the CPU
    has mask registers; the preset's default is scalar tails)."""
    spec = pipelines.preset("cpu", "O3", threads=threads, cpu=cpu)
    assert "loop-vectorize," in spec
    spec = spec.replace("loop-vectorize,", "loop-vectorize{tail=auto},")
    ours = smelt.compile(m, "cpu", pipeline=spec, cpu=cpu).run(feeds)
    theirs = run_onnxruntime(m, feeds)
    for name, value in theirs.items():
        assert rel_error(ours[name], value) <= 1e-4, name


@pytest.mark.parametrize("cpu,threads", CASES)
@pytest.mark.parametrize("n", [17, 31, 1_000_003])
def test_elementwise_odd_lengths(n, cpu, threads):
    rng = np.random.default_rng(n)
    nodes = [
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Mul", ["t", "y"], ["p"]),
        helper.make_node("Exp", ["p"], ["o"]),
    ]
    m = model(nodes, [("x", [n]), ("y", [n])], "o", [n])
    feeds = {k: rng.standard_normal(n).astype(np.float32) for k in "xy"}
    check(m, feeds, cpu, threads)


@pytest.mark.parametrize("cpu,threads", CASES)
@pytest.mark.parametrize("m_,k,n", [(5, 19, 17), (9, 33, 31), (64, 70, 47)])
def test_matmul_odd_columns(m_, k, n, cpu, threads):
    rng = np.random.default_rng(n)
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Add", ["y", "b"], ["z"]),
        helper.make_node("Relu", ["z"], ["o"]),
    ]
    m = model(nodes, [("x", [m_, k])], "o", [m_, n], [("w", w), ("b", b)])
    check(m, {"x": rng.standard_normal((m_, k)).astype(np.float32)}, cpu, threads)


@pytest.mark.parametrize("cpu,threads", CASES)
@pytest.mark.parametrize("cin,cout,group", [(5, 17, 1), (19, 31, 1), (31, 31, 31)])
def test_conv_odd_channels(cin, cout, group, cpu, threads):
    rng = np.random.default_rng(cout + group)
    w = (rng.standard_normal((cout, cin // group, 3, 3)) * 0.2).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4, group=group)
    nodes = [conv, helper.make_node("Relu", ["c"], ["o"])]
    shape = [1, cin, 13, 11]
    m = model(nodes, [("x", shape)], "o", [1, cout, 13, 11], [("w", w), ("b", b)])
    check(m, {"x": rng.standard_normal(shape).astype(np.float32)}, cpu, threads)


@pytest.mark.parametrize("cpu,threads", CASES)
@pytest.mark.parametrize("n", [13, 31])
def test_row_reductions_and_softmax(n, cpu, threads):
    rng = np.random.default_rng(n)
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=-1),
        helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=1),
        helper.make_node("Add", ["s", "mx"], ["o"]),
    ]
    m = model(nodes, [("x", [7, n])], "o", [7, n])
    check(m, {"x": (rng.standard_normal((7, n)) * 3).astype(np.float32)}, cpu, threads)
