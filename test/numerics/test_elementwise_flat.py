"""Elementwise kernels flattened by loop-flatten (#30) against onnxruntime: same
shapes, per-channel [C, 1, 1] constants (the channel loop stays outer), [H, W]
broadcasts (only H·W joins), a row broadcast (nothing joins), a fused kernel of
two outputs, a Where over a bool condition; odd sizes (no
vector width divides them) at O2, 1 and 2 threads. The flattening itself is
asserted on the compiled kernels' signatures. Error: max|a - b| / max|b| <= 1e-4."""

from __future__ import annotations

import numpy as np
import pytest
from models import rel_error, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.dialects import loop

F, B = TensorProto.FLOAT, TensorProto.BOOL
X = [1, 7, 5, 9]  # 315 elements per image: 19 vectors of 16 and 11 over


def model(nodes, inputs, outputs, weights=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
        [numpy_helper.from_array(w, n) for n, w in weights],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def kernel_shapes(m, threads):
    """The shapes of every kernel argument after loop-flatten (O2 up to it)."""
    spec = pipelines.preset("cpu", "O2", threads=threads)
    module = import_graph(m)
    lower(module, spec[: spec.index("loop-flatten") + len("loop-flatten")])
    return {
        tuple(t.get_shape())
        for f in module.ops
        if isinstance(f, func.FuncOp) and loop.is_kernel(f)
        for t in f.function_type.inputs.data
    }


def check(m, feeds, threads):
    spec = pipelines.preset("cpu", "O2", threads=threads)
    assert "loop-flatten" in spec
    ours = smelt.compile(m, "cpu", pipeline=spec).run(feeds)
    theirs = run_onnxruntime(m, feeds)
    for name, value in theirs.items():
        assert rel_error(ours[name], value) <= 1e-4, name


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def case(name):
    """(model, feeds) of each case."""
    if name == "same_shape":
        nodes = [helper.make_node("Erf", ["x"], ["e"]),
                 helper.make_node("Mul", ["e", "y"], ["o"])]  # fmt: skip
        m = model(nodes, [("x", F, X), ("y", F, X)], [("o", X)])
        return m, {"x": rand(X), "y": rand(X, 1)}
    if name == "per_channel":
        c = rand([7, 1, 1], 2)
        nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
                 helper.make_node("Add", ["s", "c"], ["o"])]  # fmt: skip
        return model(nodes, [("x", F, X)], [("o", X)], [("c", c)]), {"x": rand(X)}
    if name == "plane":
        p = rand([5, 9], 3)
        nodes = [helper.make_node("Sub", ["x", "p"], ["o"])]
        return model(nodes, [("x", F, X)], [("o", X)], [("p", p)]), {"x": rand(X)}
    if name == "row":
        r = rand([9], 4)
        nodes = [helper.make_node("Div", ["x", "r"], ["o"])]
        return model(nodes, [("x", F, X)], [("o", X)], [("r", r)]), {"x": rand(X)}
    if name == "two_outputs":
        nodes = [helper.make_node("Tanh", ["x"], ["t"]),
                 helper.make_node("Exp", ["t"], ["o1"]),
                 helper.make_node("Neg", ["t"], ["o2"])]  # fmt: skip
        m = model(nodes, [("x", F, X)], [("o1", X), ("o2", X)])
        return m, {"x": rand(X)}
    if name == "where":
        nodes = [helper.make_node("Where", ["b", "x", "y"], ["o"])]
        m = model(nodes, [("b", B, X), ("x", F, X), ("y", F, [7, 1, 1])], [("o", X)])
        b = np.random.default_rng(5).random(X) < 0.5
        return m, {"b": b, "x": rand(X), "y": rand([7, 1, 1], 6)}
    raise AssertionError(name)


# a kernel argument shape that shows the flattening
FLAT = {
    "same_shape": (315,),
    "per_channel": (1, 7, 45),  # the channel loop stays outer
    "plane": (45,),  # the [5, 9] operand; x is (1, 7, 45)
    "row": (1, 7, 5, 9),  # [9] under the rows: nothing joins
    "two_outputs": (315,),
    "where": (1, 7, 45),
}
CASES = list(FLAT)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", CASES)
def test_flat_elementwise_matches_onnxruntime(name, threads):
    m, feeds = case(name)
    check(m, feeds, threads)


@pytest.mark.parametrize("name", list(FLAT))
def test_kernels_flattened(name):
    m, _ = case(name)
    shapes = kernel_shapes(m, 1)
    assert FLAT[name] in shapes, shapes
    if name != "row":
        assert (1, 7, 5, 9) not in shapes, shapes
