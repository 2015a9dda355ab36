"""ONNX Loop and Scan bodies that read their step of a sequence, compiled as
`graph.loop`: Gather at the iteration number, Slice by it (x[i:i+1], a strided
window), Scan's scan inputs and outputs in both directions, an int64 carried
value; against onnxruntime (helpers from test_loop_op.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as h
from test_loop_op import (
    BOOL,
    F32,
    I64,
    _close,
    _expected,
    _info,
    _single_carry_model,
)

import smelt
from smelt.dialects import graph as g
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph


def test_a_body_that_gathers_row_i_and_carries_an_integer() -> None:
    """The usual sequence loop: row i of an outer input by Gather, an int64
    running sum of the iteration numbers, a constant scan output."""
    steps, n = 50, 8
    body = h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Gather", ["seq", "i"], ["row"], axis=0),
            h.make_node("Add", ["acc_in", "row"], ["acc_out"]),
            h.make_node("Add", ["isum_in", "i"], ["isum_out"]),
            h.make_node("Identity", ["k"], ["kk"]),
        ],
        "gather_body",
        [
            _info("i", I64, []),
            _info("cond_in", BOOL, []),
            _info("acc_in", F32, [n]),
            _info("isum_in", I64, []),
        ],
        [
            _info("cond_out", BOOL, []),
            _info("acc_out", F32, [n]),
            _info("isum_out", I64, []),
            _info("kk", F32, [2]),
        ],
        [h.make_tensor("k", F32, [2], [1.5, -2.0])],
    )
    graph = h.make_graph(
        [
            h.make_node(
                "Loop", ["M", "", "a0", "s0"], ["acc", "isum", "ks"], body=body
            )
        ],
        "gather_loop",
        [_info("seq", F32, [steps, n]), _info("a0", F32, [n])],
        [
            _info("acc", F32, [n]),
            _info("isum", I64, []),
            _info("ks", F32, [steps, 2]),
        ],
        [
            h.make_tensor("M", I64, [], [steps]),
            h.make_tensor("s0", I64, [], [0]),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(4)
    feeds = {
        "seq": rng.standard_normal((steps, n)).astype(np.float32),
        "a0": rng.standard_normal(n).astype(np.float32),
    }
    assert any(isinstance(o, g.LoopOp) for o in import_model(model).walk())
    _close(smelt.compile(model).run(feeds), _expected(model, feeds))


@pytest.mark.parametrize("steps", [3, 1000])
def test_scan_is_a_loop(steps: int) -> None:
    """Scan-9+: input 0 scanned along axis 1 backwards, output 1 stacked along
    axis 1 in reverse order; a running sum and a running product as state."""
    n = 4
    body = h.make_graph(
        [
            h.make_node("Add", ["s_in", "a"], ["s_out"]),
            h.make_node("Mul", ["p_in", "b"], ["p_out"]),
            h.make_node("Tanh", ["s_out"], ["y0"]),
            h.make_node("Sub", ["p_out", "a"], ["y1"]),
        ],
        "scan_body",
        [
            _info("s_in", F32, [n]),
            _info("p_in", F32, [n]),
            _info("a", F32, [n]),
            _info("b", F32, [n]),
        ],
        [
            _info("s_out", F32, [n]),
            _info("p_out", F32, [n]),
            _info("y0", F32, [n]),
            _info("y1", F32, [n]),
        ],
    )
    scan = h.make_node(
        "Scan", ["s0", "p0", "xa", "xb"], ["s", "p", "ys0", "ys1"], body=body,
        num_scan_inputs=2, scan_input_axes=[1, 0], scan_input_directions=[1, 0],
        scan_output_axes=[0, 1], scan_output_directions=[0, 1],
    )  # fmt: skip
    graph = h.make_graph(
        [scan],
        "scan",
        [
            _info("s0", F32, [n]),
            _info("p0", F32, [n]),
            _info("xa", F32, [n, steps]),
            _info("xb", F32, [steps, n]),
        ],
        [
            _info("s", F32, [n]),
            _info("p", F32, [n]),
            _info("ys0", F32, [steps, n]),
            _info("ys1", F32, [n, steps]),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(5)
    feeds = {
        "s0": rng.standard_normal(n).astype(np.float32),
        "p0": rng.standard_normal(n).astype(np.float32),
        "xa": rng.standard_normal((n, steps)).astype(np.float32) * 0.1,
        "xb": rng.uniform(0.9, 1.1, (steps, n)).astype(np.float32),
    }
    module = import_model(model)
    assert any(isinstance(o, g.LoopOp) for o in module.walk())
    want = _expected(model, feeds)
    _close(run_graph(module, feeds), want)
    _close(smelt.compile(model, threads=2).run(feeds), want)


def _slice_body(end_factor: int = 1) -> onnx.GraphProto:
    """test_loop11's body: y += sum(xs[i:i*f+1]) (f = `end_factor`), a Slice
    whose starts are the iteration number."""
    return h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Mul", ["i", "f"], ["fi"]),
            h.make_node("Add", ["fi", "one"], ["end"]),
            h.make_node("Unsqueeze", ["i", "zero"], ["start1"]),
            h.make_node("Unsqueeze", ["end", "zero"], ["end1"]),
            h.make_node("Slice", ["xs", "start1", "end1"], ["rows"]),
            h.make_node("ReduceSum", ["rows"], ["row"], keepdims=1),
            h.make_node("Add", ["v_in", "row"], ["v_out"]),
        ],
        "slice_body",
        [_info("i", I64, []), _info("cond_in", BOOL, []), _info("v_in", F32, [1])],
        [_info("cond_out", BOOL, []), _info("v_out", F32, [1])],
        [
            h.make_tensor("one", I64, [], [1]),
            h.make_tensor("f", I64, [], [end_factor]),
            h.make_tensor("zero", I64, [1], [0]),
            h.make_tensor("xs", F32, [300], np.arange(300, dtype=np.float32)),
        ],
    )


@pytest.mark.parametrize("trips", [5, 100])
def test_a_loop_slicing_by_the_iteration_number(trips: int) -> None:
    """x[i:i+1] becomes a Gather at the iteration number: still a loop."""
    model = _single_carry_model(trips, _slice_body())
    model.graph.input[0].CopyFrom(_info("x", F32, [1]))
    assert any(isinstance(o, g.LoopOp) for o in import_model(model).walk())
    x = np.array([1.5], np.float32)
    got = smelt.compile(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, x + np.arange(trips).sum())


def test_a_short_loop_slicing_a_growing_window_is_unrolled() -> None:
    model = _single_carry_model(5, _slice_body(2))
    model.graph.input[0].CopyFrom(_info("x", F32, [1]))
    x = np.array([1.5], np.float32)
    want = x + sum(np.arange(i, 2 * i + 1).sum() for i in range(5))
    np.testing.assert_array_equal(smelt.compile(model).run({"x": x})["y"], want)


def test_a_long_loop_slicing_a_growing_window_is_refused() -> None:
    model = _single_carry_model(100, _slice_body(2))
    model.graph.input[0].CopyFrom(_info("x", F32, [1]))
    with pytest.raises(
        smelt.SmeltError,
        match="Loop 'grow': it cannot be compiled as a loop: a node of its body "
        "cannot be compiled inside a loop, where the iteration number .*Slice"
        ".*at most 64",
    ):
        smelt.compile(model)


def test_a_strided_window_at_twice_the_iteration_number() -> None:
    """Slice(x, 2i, 2i+4, axes=[1], steps=[2]) of an outer input, 10 iterations."""
    body = h.make_graph(
        [
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("Mul", ["i", "two"], ["s"]),
            h.make_node("Add", ["s", "four"], ["e"]),
            h.make_node("Reshape", ["s", "shape1"], ["s1"]),
            h.make_node("Reshape", ["e", "shape1"], ["e1"]),
            h.make_node("Slice", ["xs", "s1", "e1", "axis1", "step2"], ["win"]),
            h.make_node("Add", ["v_in", "win"], ["v_out"]),
        ],
        "window",
        [_info("i", I64, []), _info("cond_in", BOOL, []), _info("v_in", F32, [3, 2])],
        [_info("cond_out", BOOL, []), _info("v_out", F32, [3, 2])],
        [
            h.make_tensor("two", I64, [], [2]),
            h.make_tensor("four", I64, [], [4]),
            h.make_tensor("shape1", I64, [1], [1]),
            h.make_tensor("axis1", I64, [1], [1]),
            h.make_tensor("step2", I64, [1], [2]),
        ],
    )
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "", "v0"], ["v"], body=body)],
        "m",
        [_info("xs", F32, [3, 30]), _info("v0", F32, [3, 2])],
        [_info("v", F32, [3, 2])],
        [h.make_tensor("M", I64, [], [10])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(6)
    feeds = {
        "xs": rng.standard_normal((3, 30)).astype(np.float32),
        "v0": rng.standard_normal((3, 2)).astype(np.float32),
    }
    assert any(isinstance(o, g.LoopOp) for o in import_model(model).walk())
    _close(smelt.compile(model).run(feeds), _expected(model, feeds))
