"""Big weights live in aligned memory of their own (`smelt.dialects.weights`):
the importer puts them there, constants made of them share it, packing writes
into it, and the compiled program reads them where they lie (weight segments),
so that a compile holds each big weight once."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import ModuleOp, VectorType

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.dialects import graph, loop
from smelt.dialects.weights import ALIGN, ALIGNED_BYTES, WeightBytes, storage_of
from smelt.runtime import artifact
from smelt.targets.cpu import STREAM_ACCUMULATORS

BIG = (ALIGNED_BYTES // 4) * 2  # f32 elements: twice the threshold


def test_a_big_array_is_stored_aligned_and_shared_back():
    a = np.arange(BIG, dtype=np.float32).reshape(-1, 64)
    attr = graph.array_to_dense(a)
    data = attr.data.data
    assert isinstance(data, WeightBytes) and not data.flags.writeable
    assert data.ctypes.data % ALIGN == 0
    back = graph.dense_to_array(attr)
    np.testing.assert_array_equal(back, a)
    # an array read from a constant makes a constant of the very same bytes
    assert graph.array_to_dense(back).data.data is data
    assert graph.array_to_dense(back.reshape(-1)).data.data is data
    # a strided view is copied (in C order), not shared
    t = graph.array_to_dense(back.T)
    assert t.data.data is not data
    np.testing.assert_array_equal(graph.dense_to_array(t), a.T)


def test_small_arrays_keep_bytes():
    a = np.arange(16, dtype=np.float32)
    assert type(graph.array_to_dense(a).data.data) is bytes
    assert storage_of(a.reshape(4, 4).T) == a.reshape(4, 4).T.tobytes()


def test_weight_bytes_compare_by_content_like_bytes():
    a = np.arange(BIG, dtype=np.float32)
    x, y = WeightBytes.copy_of(a), WeightBytes.copy_of(a)
    assert x is not y and x == y and hash(x) == hash(y)
    assert x == a.tobytes() and not x != y
    b = a.copy()
    b[BIG // 2] = -1  # differs only in the middle, which the hash does not see
    z = WeightBytes.copy_of(b)
    assert hash(z) == hash(x) and z != x
    assert graph.array_to_dense(a) == graph.array_to_dense(a.copy())
    assert graph.array_to_dense(a) != graph.array_to_dense(b)


def test_a_writable_weight_bytes_is_not_shared():
    w = WeightBytes.empty(BIG * 4)  # still being filled: whoever fills it may write
    a = w.view(np.ndarray).view(np.float32)
    assert storage_of(a) is not w


def _fc_model(m: int, n: int, k: int) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1),
             helper.make_node("Relu", ["y"], ["z"])]  # fmt: skip
    g = helper.make_graph(
        nodes, "fc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w, b


def test_the_importer_keeps_big_initializers_aligned():
    model, w, _ = _fc_model(1, 512, 1024)  # a 2 MiB weight
    module = import_graph(model)
    (const,) = [
        op for op in module.walk()
        if isinstance(op, graph.ConstantOp) and tuple(graph.shape_of(op.result)) == (512, 1024)
    ]  # fmt: skip
    assert isinstance(const.value.data.data, WeightBytes)
    np.testing.assert_array_equal(const.to_array(), w)


def _streaming_pipeline(l3: int) -> str:
    """The O2 preset for this host with the last-level cache said to be `l3` bytes."""
    text = pipelines.preset("cpu", "O2", 1, "host")
    head, _, rest = text.partition("}")
    return f"{head} l3={l3}}}{rest}"


@pytest.mark.parametrize("m", [1, 3])
def test_a_weight_bigger_than_the_cache_is_read_where_it_lies(m):
    """A batch-1 fully connected layer over a weight bigger than the last-level
    cache reads it unpacked, in the dot form (`schedules.streams_weight`); the
    program's weight segment is the imported weight itself, not a copy."""
    n, k = 512, 1024  # 2 MiB of weights against a said 1 MiB L3
    model, w, b = _fc_model(m, n, k)
    module = import_graph(model)
    lowered = lower(module, _streaming_pipeline(1 << 20))
    consts = [op for op in lowered.walk() if isinstance(op, loop.ConstantOp)]
    big = [op for op in consts if len(op.value.data.data) == n * k * 4]
    (weight,) = big
    packed = not np.array_equal(graph.dense_to_array(weight.value).reshape(n, k), w)
    assert packed == (m > 1)  # one row streams the weight as it lies; three pack it
    # its dot product keeps STREAM_ACCUMULATORS vector sums (independent FMA chains)
    marked = [
        op for op in lowered.walk()
        if isinstance(op, loop.ForOp) and loop.ACCUMULATORS_ATTR in op.attributes
    ]  # fmt: skip
    vector_sums = [
        [a for a in op.body.block.args[1:] if isinstance(a.type, VectorType)]
        for op in marked
    ]
    assert (max(map(len, vector_sums), default=0) == STREAM_ACCUMULATORS) == (m == 1)

    compiled = smelt.compile(model, "cpu", pipeline=_streaming_pipeline(1 << 20))
    x = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
    z = compiled.run({"x": x})["z"]
    np.testing.assert_allclose(z, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)
    segments = compiled.program.weights
    assert len(segments) == 2  # the blob (bias), then the weight
    assert all(s.ctypes.data % ALIGN == 0 for s in segments)
    if m == 1:
        np.testing.assert_array_equal(segments[1].view(np.float32).reshape(n, k), w)


def test_segments_survive_an_artifact(tmp_path):
    model, w, b = _fc_model(1, 512, 1024)
    compiled = smelt.compile(model, "cpu", pipeline=_streaming_pipeline(1 << 20))
    path = tmp_path / "fc.smelt"
    artifact.save(compiled, path)
    again = artifact.load(path, trust=True)
    x = np.random.default_rng(2).standard_normal((1, 1024)).astype(np.float32)
    np.testing.assert_array_equal(again.run({"x": x})["z"], compiled.run({"x": x})["z"])
    assert [s.nbytes for s in again.program.weights] == [
        s.nbytes for s in compiled.program.weights
    ]
    assert all(s.ctypes.data % ALIGN == 0 for s in again.program.weights)


def test_a_module_compiled_twice_reads_its_weights_in_place_both_times():
    """Without releasing the IR's bytes (a module kept for another compile), the
    program shares the IR's aligned weight, and a second compile still works."""
    model, w, b = _fc_model(1, 512, 1024)
    module = import_graph(model)
    assert isinstance(module, ModuleOp)
    x = np.random.default_rng(3).standard_normal((1, 1024)).astype(np.float32)
    (const,) = [
        op for op in module.walk()
        if isinstance(op, graph.ConstantOp) and len(op.value.data.data) == w.nbytes
    ]  # fmt: skip
    first = smelt.compile(module.clone(), "cpu", pipeline=_streaming_pipeline(1 << 20))
    assert first.program.weights[1].ctypes.data == const.value.data.data.ctypes.data
    second = smelt.compile(module, "cpu", pipeline=_streaming_pipeline(1 << 20))
    np.testing.assert_array_equal(first.run({"x": x})["z"], second.run({"x": x})["z"])
    np.testing.assert_allclose(
        first.run({"x": x})["z"], np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4
    )
