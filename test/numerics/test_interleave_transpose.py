"""Transposes that move a short dimension innermost (NCHW → NHWC of a 3-channel
image, ShuffleNet's channel shuffle) through the CPU presets: loop-vectorize
interleaves g input rows with one vector.shuffle and stores the g·E output
elements at once (`passes/vectorize_interleave.py`). Every element is copied,
so the result must equal numpy's transpose exactly, for each dtype, both
ISAs, 1 and 2 threads, whole vectors and tails."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper
from onnx.helper import np_dtype_to_tensor_dtype

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.instrument import module_text
from smelt.passes.vectorize_interleave import MAX_GROUP

# (input shape, perm, whether the output's last dim is short and the input's
# last dim becomes the output's second-to-last: the interleave applies)
CASES = [
    ((1, 3, 20, 37), (0, 2, 3, 1), True),  # an image to NHWC: g = 3, tails of 5
    ((2, 5, 4, 28), (0, 1, 3, 2), True),  # a channel shuffle: g = 4, 16 + 12
    ((3, 8, 19), (0, 2, 1), True),  # g = 8 (MAX_GROUP), a tail of 3
    ((6, 2, 40), (0, 2, 1), True),  # g = 2
    ((7, 9, 33), (2, 1, 0), False),  # the input's row is not the output's
    ((2, 9, 24), (0, 2, 1), False),  # g = 9 > MAX_GROUP: left to LLVM
]
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.int64, np.bool_]


def _model(shape, perm, dtype):
    elem = np_dtype_to_tensor_dtype(np.dtype(dtype))
    out_shape = [shape[p] for p in perm]
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))], "t",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, out_shape)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _input(shape, dtype) -> np.ndarray:
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(-100, 100, size=shape).astype(dtype) + (
        rng.random(shape).astype(dtype) if np.dtype(dtype).kind == "f" else 0
    )


def _shuffles(model, threads: int, cpu: str) -> int:
    spec = pipelines.preset("cpu", "O2", threads, cpu)
    text = module_text(lower(import_graph(model), spec))
    return text.count("vector.shuffle")


def _check(shape, perm, dtype, threads: int, cpu: str) -> None:
    model = _model(shape, perm, dtype)
    x = _input(shape, dtype)
    got = smelt.compile(model, "cpu", threads=threads, cpu=cpu).run({"x": x})["y"]
    expected = np.transpose(x, perm)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,perm,interleaved", CASES)
def test_short_row_transpose_is_exact(shape, perm, interleaved, dtype) -> None:
    _check(shape, perm, dtype, 1, "host")
    shuffles = _shuffles(_model(shape, perm, dtype), 1, "host")
    assert (shuffles > 0) == interleaved, shuffles


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cpu", ["host", "x86-64-v3"])
@pytest.mark.parametrize("shape,perm,interleaved", CASES)
def test_short_row_transpose_threads_and_isa(shape, perm, interleaved, cpu, threads):
    _check(shape, perm, np.float32, threads, cpu)
    if interleaved:
        assert _shuffles(_model(shape, perm, np.float32), threads, cpu) > 0


def test_group_bound_is_the_documented_one() -> None:
    """The g = 8 case above sits at MAX_GROUP and the g = 9 one just past it."""
    assert MAX_GROUP == 8
