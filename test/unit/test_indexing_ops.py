"""Indexing ops through the compiled CPU path: out-of-range run-time indices of
GatherElements / GatherND / ScatterElements / ScatterND fail the run with a clear
error (never a wrong answer or an access outside a buffer), at 1 and 2 threads;
in-range cases (negative indices, duplicates, reductions, batch dims, other dtypes)
match onnxruntime. Fixed seeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import SmeltError

RNG = np.random.default_rng(7)
TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16,
         np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}  # fmt: skip


def model(op: str, inputs: dict, out_shape, out_type, inits=(), opset=18, **attrs):
    """A one-node model: `inputs` maps names to arrays (their shapes and types)."""
    infos = [
        helper.make_tensor_value_info(n, TYPES[a.dtype.type], a.shape)
        for n, a in inputs.items()
    ]
    names = list(inputs) + [name for name, _ in inits]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], op, infos,
        [helper.make_tensor_value_info("y", TYPES[out_type], out_shape)],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnxruntime_run(m: onnx.ModelProto, feeds: dict) -> np.ndarray:
    session = onnxruntime.InferenceSession(
        m.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)[0]


def check_out_of_range(m, feeds: dict, bad: dict, pattern: str, threads: int):
    compiled = smelt.compile(m, "cpu", threads=threads)
    want = onnxruntime_run(m, feeds)
    np.testing.assert_array_equal(compiled.run(feeds)["y"], want)
    with pytest.raises(SmeltError, match=pattern):
        compiled.run({**feeds, **bad})
    # the failure does not stick to the next run
    np.testing.assert_array_equal(compiled.run(feeds)["y"], want)


DATA = np.arange(6 * 40, dtype=np.float32).reshape(6, 40)


@pytest.mark.parametrize("threads", [1, 2])
def test_gather_elements_out_of_range(threads):
    idx = RNG.integers(-6, 6, (5, 40)).astype(np.int64)
    m = model("GatherElements", {"d": DATA, "i": idx}, [5, 40], np.float32, axis=0)
    for bad in (6, -7, 10**9):
        wrong = idx.copy()
        wrong[3, 17] = bad
        check_out_of_range(
            m, {"d": DATA, "i": idx}, {"i": wrong},
            r"GatherElements along axis 0 of a 6x40 tensor: an index is out of "
            r"range \[-6, 6\)", threads,
        )  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
def test_gather_nd_out_of_range(threads):
    idx = np.array([[[1], [-1]], [[0], [5]]], np.int64)  # batch_dims=1: dim 1
    data = np.arange(2 * 6 * 40, dtype=np.float32).reshape(2, 6, 40)
    m = model("GatherND", {"d": data, "i": idx}, [2, 2, 40], np.float32, batch_dims=1)
    wrong = idx.copy()
    wrong[1, 0, 0] = 6
    check_out_of_range(
        m, {"d": data, "i": idx}, {"i": wrong},
        r"GatherND into a 2x6x40 tensor: an index for dim 1 is out of range "
        r"\[-6, 6\)", threads,
    )  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_elements_out_of_range(threads, reduction):
    idx = RNG.integers(-40, 40, (6, 3)).astype(np.int64)
    upd = RNG.standard_normal((6, 3)).astype(np.float32)
    feeds = {"d": DATA, "i": idx, "u": upd}
    m = model("ScatterElements", feeds, [6, 40], np.float32, axis=1,
              reduction=reduction)  # fmt: skip
    wrong = idx.copy()
    wrong[5, 2] = 40
    check_out_of_range(
        m, feeds, {"i": wrong},
        r"ScatterElements along axis 1 of a 6x40 tensor: an index is out of range "
        r"\[-40, 40\)", threads,
    )  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mul"])
def test_scatter_nd_out_of_range(threads, reduction):
    idx = np.array([[4], [-6], [1]], np.int64)  # distinct rows: order-free
    upd = RNG.standard_normal((3, 40)).astype(np.float32)
    feeds = {"d": DATA, "i": idx, "u": upd}
    m = model("ScatterND", feeds, [6, 40], np.float32, reduction=reduction)
    check_out_of_range(
        m, feeds, {"i": np.array([[4], [-7], [1]], np.int64)},
        r"ScatterND into a 6x40 tensor: an index for dim 0 is out of range "
        r"\[-6, 6\)", threads,
    )  # fmt: skip


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_elements_duplicates_in_order(reduction, dtype):
    """Duplicate indices apply in order (the last write wins for none), on one
    thread even when the model runs on two."""
    data = RNG.integers(-5, 5, (64, 300)).astype(dtype)
    idx = RNG.integers(-3, 3, (100, 300)).astype(np.int64)
    upd = RNG.integers(-5, 5, (100, 300)).astype(dtype)
    feeds = {"d": data, "i": idx, "u": upd}
    m = model("ScatterElements", feeds, [64, 300], dtype, axis=0, reduction=reduction)
    got = smelt.compile(m, "cpu", threads=2).run(feeds)["y"]
    np.testing.assert_array_equal(got, onnxruntime_run(m, feeds))


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_element_and_slice_indices(reduction):
    data = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    for idx, upd_shape in (([[0, 1], [2, -1], [0, 1]], (3, 5)),
                           ([[1, 2, 3], [-1, 0, 4]], (2,))):  # fmt: skip
        idx = np.array(idx, np.int64)
        upd = RNG.standard_normal(upd_shape).astype(np.float32)
        feeds = {"d": data, "i": idx, "u": upd}
        m = model("ScatterND", feeds, [3, 4, 5], np.float32, reduction=reduction)
        got = smelt.compile(m, "cpu").run(feeds)["y"]
        np.testing.assert_allclose(got, onnxruntime_run(m, feeds), rtol=1e-6)


def test_gather_nd_and_elements_other_dtypes():
    data = RNG.integers(-100, 100, (3, 4, 5)).astype(np.int32)
    idx = np.array([[[0, 1]], [[2, -1]]], np.int64)  # batch_dims 0
    feeds = {"d": data, "i": idx}
    m = model("GatherND", feeds, [2, 1, 5], np.int32)
    np.testing.assert_array_equal(
        smelt.compile(m, "cpu").run(feeds)["y"], onnxruntime_run(m, feeds)
    )
    half = RNG.standard_normal((4, 6)).astype(np.float16)
    idx = RNG.integers(-6, 6, (4, 3)).astype(np.int64)
    feeds = {"d": half, "i": idx}
    m = model("GatherElements", feeds, [4, 3], np.float16, axis=1)
    np.testing.assert_array_equal(
        smelt.compile(m, "cpu").run(feeds)["y"], onnxruntime_run(m, feeds)
    )


def test_trilu_k_at_run_time_and_reverse_sequence_lens_checked():
    x = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    m = model("Trilu", {"x": x, "k": np.array(0, np.int64)}, [2, 4, 6], np.float32,
              upper=0)  # fmt: skip
    compiled = smelt.compile(m, "cpu")
    for k in (-2, 0, 3, 100):
        feeds = {"x": x, "k": np.array(k, np.int64)}
        np.testing.assert_array_equal(compiled.run(feeds)["y"], np.tril(x, k))
    seq = RNG.standard_normal((3, 4, 2)).astype(np.float32)  # batch 3, time 4
    lens = np.array([4, 0, 2], np.int64)
    m = model("ReverseSequence", {"x": seq, "l": lens}, [3, 4, 2], np.float32,
              batch_axis=0, time_axis=1)  # fmt: skip
    compiled = smelt.compile(m, "cpu")
    feeds = {"x": seq, "l": lens}
    np.testing.assert_array_equal(compiled.run(feeds)["y"], onnxruntime_run(m, feeds))
    with pytest.raises(SmeltError, match=r"sequence length is out of range \[0, 4\]"):
        compiled.run({"x": seq, "l": np.array([4, 5, 0], np.int64)})


def test_one_hot_out_of_range_is_off_and_compress_folds():
    idx = np.array([[0, -1, 3, 7], [-4, -5, 2, 1]], np.int64)
    values = np.array([2, 9], np.float32)
    depth = ("depth", np.array(4, np.int64))
    m = model("OneHot", {"i": idx, "v": values}, [2, 4, 4], np.float32,
              inits=[depth], axis=1)  # fmt: skip
    m.graph.node[0].input[:] = ["i", "depth", "v"]
    feeds = {"i": idx, "v": values}
    np.testing.assert_array_equal(
        smelt.compile(m, "cpu").run(feeds)["y"], onnxruntime_run(m, feeds)
    )
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    keep = ("c", np.array([True, False, True]))
    m = model("Compress", {"x": x}, [3, 2], np.float32, inits=[keep], axis=1)
    np.testing.assert_array_equal(
        smelt.compile(m, "cpu").run({"x": x})["y"], x[:, [0, 2]]
    )


def test_scatter_updates_stay_serial():
    """The update nest is a `reduction` nest with its checks: loop-parallelize
    leaves it on one thread."""
    from smelt.compiler import pipelines
    from smelt.compiler.driver import import_graph, lower
    from smelt.dialects import loop
    from smelt.passes.loop_parallelize import THREADS_ATTR

    feeds = {"d": np.zeros((512, 300), np.float32),
             "i": np.zeros((400, 300), np.int64),
             "u": np.zeros((400, 300), np.float32)}  # fmt: skip
    m = model("ScatterElements", feeds, [512, 300], np.float32, axis=0,
              reduction="add")  # fmt: skip
    module = import_graph(m)
    lower(module, pipelines.preset("cpu", "O2", 2).removesuffix(",buffer-plan"))
    updates = [
        op for op in module.walk()
        if isinstance(op, loop.ForOp)
        and any(isinstance(o, loop.CheckOp) for o in op.walk())
    ]  # fmt: skip
    assert updates and all(op.kind.data == loop.REDUCTION for op in updates)
    assert not any(THREADS_ATTR in op.attributes for op in updates)
