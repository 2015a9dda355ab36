"""Pool windows that do not fit their input (issue #33): the output size follows
ONNX's rule as onnxruntime computes it, on a grid of small 1-D and 2-D cases.

The rule (`graph.pool_out`): the division truncates toward zero, so a window that
overhangs the padded input by less than a stride still counts (MaxPool kernel 3,
stride 3 over one cell gives one window, where smelt gave none); ceil_mode rounds
up, but the last window must start inside the input or its left padding; a size
below 0 is refused. onnxruntime is the oracle. onnx.reference counts with a real
floor instead (0 windows where onnxruntime has 1) and onnx 1.23's shape inference
misses the ceil_mode rule (3 windows where both runtimes have 2): the test says
where each disagrees with onnxruntime, so a change in either shows up here."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import smelt
from smelt.dialects import graph
from smelt.errors import InvalidModel

ort.set_default_logger_severity(4)
RNG = np.random.default_rng(33)

# (op, count_include_pad): MaxPool has no such attribute
OPS = [("MaxPool", None), ("AveragePool", 0), ("AveragePool", 1)]
# (length, kernel, stride, pad_lo, pad_hi, dilation, ceil_mode) over one spatial dim
GRID = [
    c
    for c in itertools.product(
        (1, 2, 3, 5), (1, 2, 3, 4), (1, 2, 3), (0, 1, 2), (0, 1, 2), (1, 2), (0, 1)
    )
    if c[3] < c[1] and c[4] < c[1]  # pads < kernel (onnxruntime's rule, validated)
]


def _counts(case) -> int:
    length, k, s, lo, hi, d, ceil = case
    return graph.pool_out(length, k, s, lo, hi, d, bool(ceil))


def _windows_hold_input(case) -> bool:
    """Whether every window covers an input cell (dilation can put one wholly in
    the padding: see test_windows_wholly_in_the_padding)."""
    length, k, s, lo, _, d, _ = case
    return all(
        any(0 <= o * s - lo + j * d < length for j in range(k))
        for o in range(_counts(case))
    )


def _node(op, include, case, name) -> onnx.NodeProto:
    _, k, s, lo, hi, d, ceil = case
    attrs = {"kernel_shape": [k], "strides": [s], "pads": [lo, hi], "ceil_mode": ceil}
    attrs |= {"dilations": [d]} if d != 1 else {}
    attrs |= {} if include is None else {"count_include_pad": include}
    return helper.make_node(op, ["x"], [name], name=name, **attrs)


def _model(nodes, shape) -> onnx.ModelProto:
    graph_ = helper.make_graph(
        nodes,
        "pools",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [
            helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None)
            for n in nodes
        ],
    )
    return helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 19)])


def _ort(m: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(
        m.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"x": x})


def _check_grid(op, include, cases):
    """`cases` whose output size is not negative, as one model per input length
    (one compile each), output by output against onnxruntime."""
    for length in sorted({c[0] for c in cases}):
        mine = [c for c in cases if c[0] == length and _counts(c) >= 0]
        mine = [c for c in mine if _windows_hold_input(c)]
        nodes = [_node(op, include, c, f"y{i}") for i, c in enumerate(mine)]
        m = _model(nodes, [2, 3, length])
        x = RNG.standard_normal((2, 3, length)).astype(np.float32)
        want = _ort(m, x)
        got = smelt.compile(m).run({"x": x})
        for i, (case, w) in enumerate(zip(mine, want, strict=True)):
            assert got[f"y{i}"].shape == w.shape == (2, 3, _counts(case)), case
            np.testing.assert_allclose(
                got[f"y{i}"], w, rtol=1e-6, atol=1e-6, err_msg=str(case)
            )


OP_IDS = ["max", "average", "average-pad"]


@pytest.mark.parametrize("index", range(len(OPS)), ids=OP_IDS)
def test_pool_grid_sample_matches_onnxruntime(index):
    """Every 7th grid case (a different seventh per op), fast."""
    _check_grid(*OPS[index], GRID[index::7])


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(OPS)), ids=OP_IDS)
def test_pool_grid_matches_onnxruntime(index):
    """The whole grid (about 1,000 cases per op; minutes)."""
    _check_grid(*OPS[index], GRID)


def test_grid_covers_the_overhang():
    """The grid holds windows that overhang the padded input (the truncating
    division counts them), ceil_mode windows dropped for starting past it, and
    empty outputs."""
    overhang = [
        c for c in GRID
        if not c[6] and c[0] + c[3] + c[4] < (c[1] - 1) * c[5] + 1 and _counts(c) > 0
    ]  # fmt: skip
    dropped = [
        c for c in GRID
        if c[6] and _counts(c) < -(-(c[0] + c[3] + c[4] - (c[1] - 1) * c[5] - 1)
                                   // c[2]) + 1
    ]  # fmt: skip
    empty = [c for c in GRID if _counts(c) == 0]
    assert len(overhang) > 20 and len(dropped) > 20 and len(empty) > 20


# the issue's probes, over 2 spatial dims: (input shape, attributes, output shape)
ISSUE = [
    ((1, 1, 1, 4), {"kernel_shape": [3, 2], "strides": [3, 3]}, (1, 1, 1, 1)),
    ((1, 1, 1, 4), {"kernel_shape": [4, 2], "pads": [1, 0, 1, 0]}, (1, 1, 0, 3)),
    ((1, 2, 3, 5), {"kernel_shape": [5, 4], "strides": [3, 2],
                    "pads": [1, 0, 0, 1]}, (1, 2, 1, 2)),
    ((1, 2, 4, 4), {"kernel_shape": [3, 3], "strides": [2, 3],
                    "pads": [1, 1, 1, 1], "ceil_mode": 1}, (1, 2, 3, 2)),
]  # fmt: skip


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("shape, attrs, out", ISSUE, ids=range(len(ISSUE)))
def test_issue_windows(op, shape, attrs, out):
    m = _model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    (want,) = _ort(m, x)
    got = smelt.compile(m).run({"x": x})["y"]
    assert got.shape == want.shape == out
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_max_pool_indices_of_an_overhanging_window():
    """MaxPool's Indices output over a window that overhangs the padded input."""
    attrs = {"kernel_shape": [3, 2], "strides": [3, 3]}
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="pool", **attrs)
    graph_ = helper.make_graph(
        [node],
        "pools",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 1, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
    )
    m = helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 19)])
    x = RNG.standard_normal((1, 2, 1, 4)).astype(np.float32)
    want = _ort(m, x)
    got = smelt.compile(m).run({"x": x})
    np.testing.assert_array_equal(got["y"], want[0])
    np.testing.assert_array_equal(got["i"], want[1])


REFUSED = [c for c in GRID if _counts(c) < 0]


@pytest.mark.parametrize("case", REFUSED[::4], ids=str)
def test_negative_sizes_refused_as_onnxruntime_refuses(case):
    m = _model([_node("MaxPool", None, case, "y")], [1, 1, case[0]])
    with pytest.raises(Exception):  # noqa: B017 (onnxruntime raises many kinds)
        _ort(m, np.ones((1, 1, case[0]), np.float32))
    with pytest.raises(InvalidModel, match="MaxPool 'y': kernel_shape .* output size"):
        smelt.compile(m)


def test_where_the_other_oracles_disagree():
    """onnx.reference floors where onnxruntime truncates (a window that
    overhangs by less than a stride), onnx's shape inference skips the ceil_mode
    rule; the cases are named so that a fix in either shows up."""
    floor_cases = [c for c in GRID if not c[6] and _counts(c) == 1]
    floor_cases = [c for c in floor_cases if c[0] + c[3] + c[4] < (c[1] - 1) * c[5] + 1]
    case = floor_cases[0]
    m = _model([_node("MaxPool", None, case, "y")], [1, 1, case[0]])
    x = np.ones((1, 1, case[0]), np.float32)
    assert _ort(m, x)[0].shape[-1] == 1
    assert ReferenceEvaluator(m).run(None, {"x": x})[0].shape[-1] == 0
    case = (5, 1, 3, 0, 0, 1, 1)  # windows at 0 and 3; one at 6 would start past 5
    m = _model([_node("MaxPool", None, case, "y")], [1, 1, 5])
    inferred = onnx.shape_inference.infer_shapes(m).graph.output[0]
    assert inferred.type.tensor_type.shape.dim[2].dim_value == 3
    assert _ort(m, np.ones((1, 1, 5), np.float32))[0].shape[-1] == _counts(case) == 2


HOLLOW = [c for c in GRID if _counts(c) > 0 and not _windows_hold_input(c)]


@pytest.mark.parametrize("index", range(len(OPS)), ids=OP_IDS)
def test_windows_wholly_in_the_padding(index):
    """A dilated window wholly in the padding: onnxruntime gives the lowest finite
    float for MaxPool (not -inf) and 0 for AveragePool (not 0 / 0), with or
    without count_include_pad."""
    op, include = OPS[index]
    nodes = [_node(op, include, c, f"y{i}") for i, c in enumerate(HOLLOW)]
    assert len(nodes) > 4
    failures = []
    for length in sorted({c[0] for c in HOLLOW}):
        mine = [n for n, c in zip(nodes, HOLLOW, strict=True) if c[0] == length]
        m = _model(mine, [1, 2, length])
        x = RNG.standard_normal((1, 2, length)).astype(np.float32)
        got = smelt.compile(m).run({"x": x})
        for n, w in zip(mine, _ort(m, x), strict=True):
            if not np.array_equal(got[n.output[0]], w):
                failures.append(n.name)
    assert not failures, failures


# 2-D windows wholly in the padding along H (dilation 2 over one row), through
# the NCHW pool kernel (O1) and the NHWC one (O2's layout conversion)
HOLLOW_2D = {"kernel_shape": [2, 2], "pads": [1, 0, 1, 1], "dilations": [2, 1]}


@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("index", range(len(OPS)), ids=OP_IDS)
def test_2d_windows_wholly_in_the_padding(index, level):
    op, include = OPS[index]
    attrs = HOLLOW_2D | ({} if include is None else {"count_include_pad": include})
    m = _model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], None)
    m.graph.input[0].CopyFrom(
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1, 4])
    )
    x = RNG.standard_normal((1, 3, 1, 4)).astype(np.float32)
    (want,) = _ort(m, x)
    got = smelt.compile(m, level=level).run({"x": x})["y"]
    assert want.shape == (1, 3, 1, 4)
    np.testing.assert_array_equal(got, want)


def test_max_pool_indices_of_a_window_wholly_in_the_padding():
    """The value is onnxruntime's, the lowest finite float. The index is -1
    (graph.max_pool_with_indices' contract) where onnxruntime gives the flat index
    of spatial position -1 in each dim: n·C·L + c·L - 1 in 1-D, which for c > 0
    points into the previous channel's block (an artifact of its loop, which
    starts each index at -1); checked as that, so that a change shows up."""
    case = HOLLOW[0]
    length = case[0]
    node = _node("MaxPool", None, case, "y")
    node.output.append("i")
    m = _model([node], [2, 3, length])
    m.graph.output.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    x = RNG.standard_normal((2, 3, length)).astype(np.float32)
    want = _ort(m, x)
    got = smelt.compile(m).run({"x": x})
    hollow = want[0] == np.finfo(np.float32).min
    assert hollow.any() and not np.isinf(want[0]).any()
    np.testing.assert_array_equal(got["y"], want[0])
    flat = np.arange(6).reshape(2, 3, 1) * length - 1
    flat = np.broadcast_to(flat, hollow.shape)
    np.testing.assert_array_equal(want[1][hollow], flat[hollow])
    np.testing.assert_array_equal(got["i"][hollow], -1)
    np.testing.assert_array_equal(got["i"][~hollow], want[1][~hollow])


@pytest.mark.parametrize("index", range(len(OPS)), ids=OP_IDS)
def test_reference_executor_on_hollow_windows(index):
    """smelt's reference executor (constant folding, explore's fallback oracle)
    gives onnxruntime's values for windows wholly in the padding too."""
    from smelt.compiler.driver import import_graph
    from smelt.reference.executor import run_graph

    op, include = OPS[index]
    nodes = [_node(op, include, c, f"y{i}") for i, c in enumerate(HOLLOW)]
    for length in sorted({c[0] for c in HOLLOW}):
        mine = [n for n, c in zip(nodes, HOLLOW, strict=True) if c[0] == length]
        m = _model(mine, [1, 2, length])
        x = RNG.standard_normal((1, 2, length)).astype(np.float32)
        got = run_graph(import_graph(m), {"x": x})
        for n, w in zip(mine, _ort(m, x), strict=True):
            np.testing.assert_array_equal(got[n.output[0]], w, err_msg=n.name)
