"""NCHW MaxPool / AveragePool (lowering/lower_pool_nchw.py), unscheduled (O1) and
through the CPU schedule (O2 without graph-convert-layout), against onnxruntime:
pads (the padded copy: lowest / 0 in the pad cells), strides 1 and 2 (rows wide
enough to vectorize), asymmetric pads, ceil_mode, dilations, count_include_pad,
a window wholly in the padding, 1-D and 3-D pools, a fused prologue (the
guarded loops), and a fused epilogue. The inputs are all negative where a pad
cell read as 0 would show in a maximum."""

from __future__ import annotations

import numpy as np
import pytest
from models import rel_error, run_onnxruntime
from onnx import TensorProto, helper

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.instrument import module_text

# (op, input shape, kernel, strides, pads, dilations, ceil_mode, count_include_pad)
POOLS = [
    ("MaxPool", (1, 4, 40, 40), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0, 0),
    ("MaxPool", (2, 3, 21, 35), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0, 0),
    ("MaxPool", (1, 3, 17, 33), (3, 2), (2, 2), (0, 1, 2, 0), (1, 1), 1, 0),
    ("MaxPool", (1, 2, 13, 20), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 1, 0),
    ("MaxPool", (1, 2, 6, 7), (2, 2), (1, 1), (1, 1, 1, 1), (3, 3), 0, 0),  # hollow
    ("MaxPool", (1, 5, 30, 30), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0, 0),
    ("AveragePool", (1, 4, 40, 40), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0, 0),
    ("AveragePool", (1, 4, 40, 40), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0, 1),
    ("AveragePool", (1, 3, 17, 33), (3, 3), (2, 1), (1, 0, 2, 1), (1, 1), 1, 0),
    ("AveragePool", (1, 3, 17, 33), (3, 3), (2, 1), (1, 0, 2, 1), (1, 1), 1, 1),
    ("AveragePool", (1, 2, 6, 7), (2, 2), (1, 1), (1, 1, 1, 1), (3, 3), 0, 0),
    ("MaxPool", (1, 3, 50), (3,), (2,), (1, 1), (1,), 0, 0),  # 1-D
    ("AveragePool", (1, 3, 50), (4,), (1,), (2, 1), (1,), 0, 0),
    ("MaxPool", (1, 2, 5, 6, 19), (2, 3, 3), (1, 2, 1), (1, 1, 1, 0, 1, 1),
     (1, 1, 1), 0, 0),  # 3-D  # fmt: skip
]
NCHW_O2 = pipelines.preset("cpu", "O2").replace(pipelines.NHWC[0] + ",", "")


def _pool_model(case, wrap: str = ""):
    op, shape, kernel, strides, pads, dilations, ceil, include = case
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads,
                 dilations=dilations, ceil_mode=ceil)  # fmt: skip
    if op == "AveragePool":
        attrs["count_include_pad"] = include
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = []
    source = "x"
    if wrap == "prologue":  # an elementwise producer that graph-fuse fuses in
        nodes.append(helper.make_node("Neg", ["x"], ["nx"]))
        source = "nx"
    target = "p" if wrap == "epilogue" else "y"
    nodes.append(helper.make_node(op, [source], [target], **attrs))
    if wrap == "epilogue":
        nodes.append(helper.make_node("Sigmoid", ["p"], ["y"]))
    graph = helper.make_graph(nodes, "pool", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _feeds(case, wrap: str = "") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    x = -np.abs(rng.standard_normal(case[1])).astype(np.float32) - 0.5
    return {"x": -x if wrap == "prologue" else x}  # negative into the pool


def _compile(model, level: str):
    if level == "O1":
        return smelt.compile(model, "cpu", level="O1")
    return smelt.compile(model, "cpu", pipeline=NCHW_O2)


@pytest.mark.parametrize("level", ["O1", "nchw-O2"])
@pytest.mark.parametrize("case", range(len(POOLS)))
def test_nchw_pool(case: int, level: str) -> None:
    model = _pool_model(POOLS[case])
    feeds = _feeds(POOLS[case])
    ours = _compile(model, level).run(feeds)["y"]
    theirs = run_onnxruntime(model, feeds)["y"]
    assert ours.shape == theirs.shape
    assert rel_error(ours, theirs) <= 1e-6


@pytest.mark.parametrize("wrap", ["prologue", "epilogue"])
@pytest.mark.parametrize("case", [0, 2, 7])
def test_nchw_pool_fused(case: int, wrap: str) -> None:
    model = _pool_model(POOLS[case], wrap)
    feeds = _feeds(POOLS[case], wrap)
    ours = _compile(model, "nchw-O2").run(feeds)["y"]
    theirs = run_onnxruntime(model, feeds)["y"]
    assert rel_error(ours, theirs) <= 1e-6


def _kernel(text: str, name: str) -> str:
    """The body of the first kernel whose name holds `name`."""
    at = text.index(name, text.index("func.func @"))
    body = text[text.rindex("func.func @", 0, at) :]
    return body[: body.index("func.return")]


@pytest.mark.parametrize("case", [0, 1, 7])
def test_nchw_pool_is_unguarded_and_unrolled(case: int) -> None:
    """Pads go to a padded copy (pool_pad), so the pool reads without guards;
    the window is unrolled (no kh / kw loop left) and, for stride 1, the output
    row is vectorized by loop-vectorize (stride 2 is left to LLVM's)."""
    text = module_text(lower(import_graph(_pool_model(POOLS[case])), NCHW_O2))
    assert "func.func @pool_pad" in text
    name = "max_pool" if POOLS[case][0] == "MaxPool" else "average_pool"
    pool = _kernel(text, name)
    assert 'loop.pattern = "window"' in pool, pool
    assert "arith.select" not in pool and "arith.minsi" not in pool, pool
    assert '"kw"' not in pool and '"kh"' not in pool, pool
    if POOLS[case][3] == (1, 1):
        assert "vector.load" in pool, pool


def test_prologue_keeps_guarded_loops() -> None:
    """A fused prologue computes the pool's input: no padded copy of it."""
    model = _pool_model(POOLS[0], "prologue")
    text = module_text(lower(import_graph(model), NCHW_O2))
    assert "pool_pad" not in text
    assert "arith.select" in _kernel(text, "fused_max_pool"), text
