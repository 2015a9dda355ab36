"""Seed models of the fuzzer: small valid graphs built by code, plus a few onnx
backend node-test models, each with one set of run-time inputs."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cache

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

OPSET = 17

# onnx backend node tests used as seeds (those absent from the installed onnx are
# skipped): plain, small, and covering the op families smelt imports.
BACKEND_SEEDS = (
    "test_relu", "test_gather_0", "test_conv_with_strides_padding",
    "test_maxpool_2d_pads", "test_softmax_axis_1", "test_transpose_default",
    "test_reduce_sum_keepdims_example", "test_matmul_2d", "test_concat_2d_axis_0",
    "test_averagepool_2d_pads", "test_batchnorm_example",
    "test_gemm_default_matrix_bias", "test_where_example", "test_cast_FLOAT_to_DOUBLE",
    "test_slice", "test_add_bcast",
)  # fmt: skip

# inputs of backend seeds that decide an output shape: made initializers, as the
# conformance harness does (smelt needs them constant)
FROZEN = {
    "test_reduce_sum_keepdims_example": ("axes",),
    "test_slice": ("starts", "ends", "axes", "steps"),
}


@dataclass
class Seed:
    """A valid model and inputs that run it."""

    name: str
    model: onnx.ModelProto
    feeds: dict[str, np.ndarray]


def _model(nodes, inputs, outputs, inits=(), opset: int = OPSET) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "fuzz_seed", inputs, outputs, list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _info(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, elem, shape)


def make_feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict | None:
    """Inputs for the declared graph inputs of `model` (integers in [0, 3), so
    that they index the seeds' data), or None when a declared input is not a
    small, concrete numeric tensor."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tt.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if any(d < 0 or d > 64 for d in dims) or int(np.prod(dims)) > 100_000:
            return None
        try:
            dtype = h.tensor_dtype_to_np_dtype(tt.elem_type)
        except (KeyError, ValueError, TypeError):
            return None
        if dtype == np.bool_:
            feeds[value.name] = rng.random(dims) < 0.5
        elif dtype.kind in "iu":
            feeds[value.name] = rng.integers(0, 3, dims).astype(dtype)
        elif dtype.kind == "f" and dtype.itemsize in (2, 4, 8) and dtype.name != "V":
            feeds[value.name] = rng.standard_normal(dims).astype(dtype)
        else:
            return None
    return feeds


def _conv_relu_pool() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    nodes = [
        h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Relu", ["c"], ["r"], name="relu"),
        h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    inits = [
        _init("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32)),
        _init("b", rng.standard_normal(3).astype(np.float32)),
    ]
    return _model(
        nodes, [_info("x", T.FLOAT, [1, 2, 8, 8])],
        [_info("y", T.FLOAT, [1, 3, 4, 4])], inits,
    )  # fmt: skip


def _matmul_softmax() -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        h.make_node("Add", ["m", "b"], ["a"]),
        h.make_node("Softmax", ["a"], ["y"], axis=-1, name="softmax"),
    ]
    inits = [
        _init("w", rng.standard_normal((8, 5)).astype(np.float32)),
        _init("b", rng.standard_normal(5).astype(np.float32)),
    ]
    return _model(
        nodes, [_info("x", T.FLOAT, [2, 4, 8])], [_info("y", T.FLOAT, [2, 4, 5])],
        inits,
    )  # fmt: skip


def _gather_reshape() -> onnx.ModelProto:
    nodes = [
        h.make_node("Gather", ["data", "idx"], ["g"], axis=0, name="gather"),
        h.make_node("Reshape", ["g", "shape"], ["r"], name="reshape"),
        h.make_node("Transpose", ["r"], ["y"], perm=[1, 0]),
    ]
    inits = [_init("shape", np.array([4, -1], np.int64))]
    return _model(
        nodes,
        [_info("data", T.FLOAT, [6, 4]), _info("idx", T.INT64, [3])],
        [_info("y", T.FLOAT, [3, 4])], inits,
    )  # fmt: skip


def _broadcast_reduce() -> onnx.ModelProto:
    nodes = [
        h.make_node("Add", ["a", "b"], ["s"]),
        h.make_node("Mul", ["s", "k"], ["m"]),
        h.make_node("Sigmoid", ["m"], ["q"]),
        h.make_node("ReduceSum", ["q", "axes"], ["y"], keepdims=0, name="sum"),
    ]
    inits = [
        _init("k", np.array([0.5], np.float32)),
        _init("axes", np.array([1], np.int64)),
    ]
    return _model(
        nodes,
        [_info("a", T.FLOAT, [3, 1, 4]), _info("b", T.FLOAT, [1, 5, 4])],
        [_info("y", T.FLOAT, [3, 4])], inits,
    )  # fmt: skip


def _norm_pool_gemm() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    nodes = [
        h.make_node("BatchNormalization", ["x", "s", "o", "mu", "var"], ["n"]),
        h.make_node("AveragePool", ["n"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Flatten", ["p"], ["f"], axis=1),
        h.make_node("Gemm", ["f", "w", "c"], ["y"], transB=1, name="gemm"),
    ]
    inits = [
        _init("s", rng.random(2).astype(np.float32) + 0.5),
        _init("o", rng.standard_normal(2).astype(np.float32)),
        _init("mu", rng.standard_normal(2).astype(np.float32)),
        _init("var", rng.random(2).astype(np.float32) + 0.5),
        _init("w", rng.standard_normal((3, 8)).astype(np.float32)),
        _init("c", rng.standard_normal(3).astype(np.float32)),
    ]
    return _model(
        nodes, [_info("x", T.FLOAT, [2, 2, 4, 4])], [_info("y", T.FLOAT, [2, 3])],
        inits,
    )  # fmt: skip


def _concat_slice_cast() -> onnx.ModelProto:
    nodes = [
        h.make_node("Concat", ["a", "b"], ["c"], axis=1, name="concat"),
        h.make_node("Slice", ["c", "st", "en", "ax"], ["s"], name="slice"),
        h.make_node("Cast", ["s"], ["i"], to=T.INT32),
        h.make_node("Cast", ["i"], ["y"], to=T.FLOAT),
    ]
    inits = [
        _init("st", np.array([1], np.int64)),
        _init("en", np.array([5], np.int64)),
        _init("ax", np.array([1], np.int64)),
    ]
    return _model(
        nodes,
        [_info("a", T.FLOAT, [2, 3]), _info("b", T.FLOAT, [2, 3])],
        [_info("y", T.FLOAT, [2, 4])], inits,
    )  # fmt: skip


BUILT = {
    "conv_relu_pool": _conv_relu_pool,
    "matmul_softmax": _matmul_softmax,
    "gather_reshape": _gather_reshape,
    "broadcast_reduce": _broadcast_reduce,
    "norm_pool_gemm": _norm_pool_gemm,
    "concat_slice_cast": _concat_slice_cast,
}


def _backend_seeds() -> list[Seed]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from onnx.backend.test.case.node import collect_testcases

            cases = {c.name: c for c in collect_testcases()}
    except Exception:  # noqa: BLE001 (an onnx without its test cases: no seeds)
        return []
    seeds = []
    for name in BACKEND_SEEDS:
        case = cases.get(name)
        if case is None or not case.data_sets:
            continue
        inputs = case.data_sets[0][0]
        names = [i.name for i in case.model.graph.input]
        feeds = {
            n: numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v
            for n, v in zip(names, inputs)
        }
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        for frozen in FROZEN.get(name, ()):  # inputs that decide a shape
            model.graph.initializer.append(_init(frozen, arrays.pop(frozen)))
        keep = [v for v in model.graph.input if v.name in arrays]
        del model.graph.input[:]
        model.graph.input.extend(keep)
        seeds.append(Seed(name, model, arrays))
    return seeds


@cache
def seeds(backend: bool = True) -> tuple[Seed, ...]:
    """Every seed: the built graphs first, then the backend node tests."""
    built = []
    for index, (name, build) in enumerate(BUILT.items()):
        model = build()
        built.append(Seed(name, model, make_feeds(model, np.random.default_rng(index))))
    return tuple(built + (_backend_seeds() if backend else []))
