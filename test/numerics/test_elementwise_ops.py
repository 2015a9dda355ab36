"""Logical, bitwise, comparison, Mod, Sign, Round, IsNaN / IsInf, trigonometric,
Mean and PRelu through smelt.compile: fused chains on vector-sized shapes, integer
edge cases (x mod 0, MIN mod -1, shifts past the width) and dtypes the ONNX
conformance cases miss; onnxruntime or numpy as the oracle."""

from __future__ import annotations

import ast

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.dialects import graph
from smelt.dialects.loop import ForOp
from smelt.errors import SmeltError
from smelt.lowering.triton.source import emit_triton

RNG = np.random.default_rng(7)
F32, I32, U8, BOOL = TensorProto.FLOAT, TensorProto.INT32, TensorProto.UINT8, 9


def model(nodes, inputs, outputs, opset: int = 18):
    """A model of `nodes`; inputs and outputs as (name, element type, shape)."""
    info = helper.make_tensor_value_info
    g = helper.make_graph(
        nodes,
        "m",
        [info(n, t, s) for n, t, s in inputs],
        [info(n, t, s) for n, t, s in outputs],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def node(op: str, inputs: list[str], output: str, **attrs):
    return helper.make_node(op, inputs, [output], **attrs)


def run(m, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return smelt.compile(m).run(feeds)


def onnxruntime(m, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(m.SerializeToString()).run(None, feeds)


def structure(m) -> tuple[int, int]:
    """(graph.fused kernels after graph-fuse, vector loops after loop-vectorize)."""
    seen = {}

    def record(previous, module, _next):
        if previous is not None:
            seen[previous.name] = module.clone()

    lower(import_graph(m), pipelines.preset("cpu"), record)
    fused = [op for op in seen["graph-fuse"].walk() if isinstance(op, graph.FusedOp)]
    vector = [
        op
        for op in seen["loop-vectorize"].walk()
        if isinstance(op, ForOp) and op.step.data > 1
    ]
    return len(fused), len(vector)


def test_fused_chain_of_new_float_ops_vectorizes_and_matches_onnxruntime():
    shape = [4, 67]
    nodes = [
        node("Sin", ["x"], "a"),
        node("Cosh", ["a"], "b"),
        node("Mod", ["b", "d"], "c", fmod=1),
        node("Round", ["c"], "r"),
        node("Atan", ["r"], "t"),
        node("Asinh", ["x"], "h"),
        node("Add", ["t", "h"], "u"),
        node("PRelu", ["u", "slope"], "y"),
    ]
    inputs = [("x", F32, shape), ("d", F32, shape), ("slope", F32, [67])]
    m = model(nodes, inputs, [("y", F32, shape)])
    feeds = {
        "x": RNG.uniform(-4, 4, shape).astype(np.float32),
        "d": RNG.uniform(0.2, 1, shape).astype(np.float32),
        "slope": RNG.uniform(-1, 1, [67]).astype(np.float32),
    }
    np.testing.assert_allclose(
        run(m, feeds)["y"], onnxruntime(m, feeds)[0], rtol=1e-5, atol=1e-6
    )
    kernels, vector_loops = structure(m)
    assert kernels == 1 and vector_loops >= 1  # one kernel, its inner loop vectorized


def test_trig_and_round_on_f16_and_f64_match_numpy():
    x64 = RNG.uniform(-0.95, 0.95, [3, 70])
    x64[0, :4] = [0.5, 1.5, -2.5, 2.5]  # halves round to even
    ops = {
        "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin,
        "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh,
        "Asinh": np.arcsinh, "Atanh": np.arctanh, "Round": np.round,
    }  # fmt: skip
    for dtype, onnx_type, rtol in (
        (np.float16, TensorProto.FLOAT16, 1e-3),
        (np.float64, TensorProto.DOUBLE, 1e-12),
    ):
        x = x64.astype(dtype)
        nodes = [node(op, ["x"], op) for op in ops]
        nodes.append(node("Acosh", ["x1"], "Acosh"))
        outputs = [(op, onnx_type, [3, 70]) for op in [*ops, "Acosh"]]
        inputs = [("x", onnx_type, [3, 70]), ("x1", onnx_type, [3, 70])]
        x1 = np.abs(x) + dtype(1)
        got = run(model(nodes, inputs, outputs), {"x": x, "x1": x1})
        wide, wide1 = x.astype(np.float64), x1.astype(np.float64)
        for op, fn in [*ops.items(), ("Acosh", lambda _: np.arccosh(wide1))]:
            assert got[op].dtype == dtype
            with np.errstate(invalid="ignore"):  # asin(1.5) and such: NaN
                expected = fn(wide).astype(dtype)
            np.testing.assert_allclose(
                got[op], expected, rtol=rtol, atol=rtol, err_msg=op
            )


@pytest.mark.parametrize("dtype, onnx_type", [
    (np.int32, I32), (np.int8, TensorProto.INT8), (np.uint16, TensorProto.UINT16),
    (np.int64, TensorProto.INT64),
])  # fmt: skip
def test_integer_mod_with_zero_divisors_and_overflow(dtype, onnx_type):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, [5, 70], endpoint=True).astype(dtype)
    b = RNG.integers(-9 if info.min else 0, 9, [5, 70]).astype(dtype)
    b[0, :10] = 0
    if info.min:
        a[1, :3], b[1, :3] = info.min, -1
    nodes = [node("Mod", ["a", "b"], "m0"), node("Mod", ["a", "b"], "m1", fmod=1)]
    inputs = [("a", onnx_type, [5, 70]), ("b", onnx_type, [5, 70])]
    outputs = [("m0", onnx_type, [5, 70]), ("m1", onnx_type, [5, 70])]
    got = run(model(nodes, inputs, outputs), {"a": a, "b": b})
    with np.errstate(all="ignore"):  # numpy: x % 0 and fmod(x, 0) are 0
        np.testing.assert_array_equal(got["m0"], np.mod(a, b))
        np.testing.assert_array_equal(got["m1"], np.fmod(a, b))
    assert not got["m0"][1, :3].any() if info.min else True


def test_float_mod_signs_follow_divisor_or_dividend():
    a = np.array([5.5, -5.5, 5.5, -5.5, 3.0, -0.0, 7.0, 1e30] * 9, np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 3.0, np.inf, 3.0] * 9, np.float32)
    nodes = [node("Mod", ["a", "b"], "m0"), node("Mod", ["a", "b"], "m1", fmod=1)]
    inputs = [("a", F32, [72]), ("b", F32, [72])]
    got = run(model(nodes, inputs, [("m0", F32, [72]), ("m1", F32, [72])]), {
        "a": a, "b": b
    })  # fmt: skip
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got["m0"], np.mod(a, b))
        np.testing.assert_array_equal(got["m1"], np.fmod(a, b))


def test_bit_shifts_past_the_width_give_zero():
    x = RNG.integers(0, 256, [2, 66]).astype(np.uint8)
    amount = RNG.integers(0, 8, [2, 66]).astype(np.uint8)
    amount[0, :4] = [8, 9, 200, 255]
    nodes = [
        node("BitShift", ["x", "n"], "l", direction="LEFT"),
        node("BitShift", ["x", "n"], "r", direction="RIGHT"),
    ]
    inputs = [("x", U8, [2, 66]), ("n", U8, [2, 66])]
    got = run(model(nodes, inputs, [("l", U8, [2, 66]), ("r", U8, [2, 66])]), {
        "x": x, "n": amount
    })  # fmt: skip
    far = amount >= 8
    small = np.where(far, 0, amount)
    np.testing.assert_array_equal(got["l"], np.where(far, 0, x << small))
    np.testing.assert_array_equal(got["r"], np.where(far, 0, x >> small))


def test_logical_and_bitwise_chains_match_numpy():
    a, b, c = (RNG.random([3, 90]) < 0.5 for _ in range(3))
    i = RNG.integers(-1000, 1000, [3, 90]).astype(np.int32)
    j = RNG.integers(-1000, 1000, [3, 90]).astype(np.int32)
    nodes = [
        node("Or", ["a", "b"], "o"),
        node("Xor", ["a", "c"], "x"),
        node("Not", ["x"], "n"),
        node("And", ["o", "n"], "y"),
        node("GreaterOrEqual", ["i", "j"], "ge"),
        node("LessOrEqual", ["i", "j"], "le"),
        node("And", ["ge", "le"], "eq"),
        node("BitwiseOr", ["i", "j"], "bo"),
        node("BitwiseAnd", ["bo", "j"], "ba"),
        node("BitwiseXor", ["ba", "i"], "bx"),
        node("BitwiseNot", ["bx"], "bits"),
        node("Sign", ["i"], "sign"),
    ]
    s = [3, 90]
    inputs = [("a", BOOL, s), ("b", BOOL, s), ("c", BOOL, s), ("i", I32, s),
              ("j", I32, s)]  # fmt: skip
    outputs = [("y", BOOL, s), ("eq", BOOL, s), ("bits", I32, s), ("sign", I32, s)]
    got = run(model(nodes, inputs, outputs), {"a": a, "b": b, "c": c, "i": i, "j": j})
    np.testing.assert_array_equal(got["y"], (a | b) & ~(a ^ c))
    np.testing.assert_array_equal(got["eq"], i == j)
    np.testing.assert_array_equal(got["bits"], ~(((i | j) & j) ^ i))
    np.testing.assert_array_equal(got["sign"], np.sign(i))


def test_is_inf_directions_is_nan_and_sign_of_specials():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 2.0, -3.0] * 10, np.float32)
    nodes = [
        node("IsInf", ["x"], "pos", detect_negative=0),
        node("IsInf", ["x"], "neg", detect_positive=0),
        node("IsInf", ["x"], "any"),
        node("IsNaN", ["x"], "nan"),
        node("Where", ["nan", "zero", "x"], "clean"),
        node("Sign", ["clean"], "sign"),
    ]
    inputs = [("x", F32, [70]), ("zero", F32, [1])]
    outputs = [(n, BOOL, [70]) for n in ("pos", "neg", "any", "nan")]
    m = model(nodes, inputs, [*outputs, ("sign", F32, [70])])
    feeds = {"x": x, "zero": np.zeros(1, np.float32)}
    got = run(m, feeds)
    for name, value in zip(["pos", "neg", "any", "nan", "sign"], onnxruntime(m, feeds)):
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_mean_of_three_broadcast_inputs_matches_onnxruntime():
    nodes = [node("Mean", ["a", "b", "c"], "y")]
    inputs = [("a", F32, [3, 80]), ("b", F32, [80]), ("c", F32, [3, 1])]
    m = model(nodes, inputs, [("y", F32, [3, 80])])
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, _, s in inputs}
    np.testing.assert_allclose(
        run(m, feeds)["y"], onnxruntime(m, feeds)[0], rtol=1e-6, atol=1e-7
    )


def test_prelu_on_integers_and_a_slope_that_does_not_fit_is_refused():
    x = RNG.integers(-50, 50, [4, 5]).astype(np.int32)
    slope = RNG.integers(-3, 4, [5]).astype(np.int32)
    m = model([node("PRelu", ["x", "s"], "y")], [("x", I32, [4, 5]), ("s", I32, [5])],
              [("y", I32, [4, 5])], opset=16)  # fmt: skip
    np.testing.assert_array_equal(
        run(m, {"x": x, "s": slope})["y"], np.where(x < 0, x * slope, x)
    )
    bad = model([node("PRelu", ["x", "s"], "y")], [("x", F32, [4, 5]),
                ("s", F32, [3, 4, 5])], [("y", F32, [3, 4, 5])])  # fmt: skip
    with pytest.raises(SmeltError, match="does not broadcast to the input's shape"):
        import_graph(bad)


def test_triton_source_of_the_new_ops():
    ops = ["Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"]
    nodes = [node(op, ["x"], op) for op in ops]
    nodes += [node("Round", ["x"], "round"), node("IsNaN", ["x"], "nan")]
    nodes += [node("Mod", ["x", "x"], "mod", fmod=1)]
    outputs = [(op, F32, [8]) for op in [*ops, "round", "mod"]] + [("nan", BOOL, [8])]
    module = import_graph(model(nodes, [("x", F32, [8])], outputs))
    lower(module, pipelines.preset("gpu"))
    source = emit_triton(module)
    ast.parse(source)
    for fn in ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh"]:
        assert f"libdevice.{fn}(" in source
    assert "libdevice.atanh(" in source and "libdevice.rint(" in source


def test_conv_then_prelu_with_a_per_channel_slope_in_nhwc():
    """The CPU preset runs convs in NHWC; the slope constant [C, 1, 1] moves along."""
    w = RNG.standard_normal([6, 3, 3, 3]).astype(np.float32)
    slope = RNG.uniform(0, 0.5, [6, 1, 1]).astype(np.float32)
    nodes = [
        node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]),
        node("PRelu", ["c", "slope"], "p"),
        node("Sin", ["p"], "y"),
    ]
    m = model(nodes, [("x", F32, [1, 3, 9, 9])], [("y", F32, [1, 6, 9, 9])])
    m.graph.initializer.extend([
        helper.make_tensor("w", F32, w.shape, w.reshape(-1)),
        helper.make_tensor("slope", F32, slope.shape, slope.reshape(-1)),
    ])  # fmt: skip
    feeds = {"x": RNG.standard_normal([1, 3, 9, 9]).astype(np.float32)}
    np.testing.assert_allclose(
        run(m, feeds)["y"], onnxruntime(m, feeds)[0], rtol=1e-5, atol=1e-5
    )


def test_prelu_before_opset_7_has_one_slope_per_channel():
    x = RNG.standard_normal([2, 3, 3, 3]).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    m = model([node("PRelu", ["x", "s"], "y")], [("x", F32, [2, 3, 3, 3]),
              ("s", F32, [3])], [("y", F32, [2, 3, 3, 3])], opset=6)  # fmt: skip
    expected = np.where(x < 0, x * slope.reshape(3, 1, 1), x)
    np.testing.assert_allclose(run(m, {"x": x, "s": slope})["y"], expected)


def test_legacy_broadcast_with_an_axis_before_opset_7():
    a = RNG.random([2, 3, 4]) < 0.5
    b = RNG.random([3]) < 0.5
    m = model([node("And", ["a", "b"], "y", broadcast=1, axis=1)],
              [("a", BOOL, [2, 3, 4]), ("b", BOOL, [3])], [("y", BOOL, [2, 3, 4])],
              opset=6)  # fmt: skip
    got = run(m, {"a": a, "b": b})["y"]
    np.testing.assert_array_equal(got, a & b.reshape(3, 1))


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_cast_in_a_low_precision_epilogue(dtype):
    """MatMul -> Cast (to its own type) -> Add in f16 / bf16: the cast's value is
    widened back to f32 for the add (it used to reach the emitter as half + float)."""
    import ml_dtypes

    np_type = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(np_type))
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["m"]),
        helper.make_node("Cast", ["m"], ["c"], to=onnx_type),
        helper.make_node("Add", ["c", "bias"], ["y"]),
    ]
    shapes = {"a": [2, 3, 4], "b": [2, 4, 5], "bias": [2, 3, 5]}
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, onnx_type, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", onnx_type, [2, 3, 5])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(3)
    feeds = {n: rng.random(s).astype(np_type) for n, s in shapes.items()}
    got = smelt.compile(model, "cpu").run(feeds)["y"]
    f32 = {n: v.astype(np.float32) for n, v in feeds.items()}
    m = (f32["a"] @ f32["b"]).astype(np_type).astype(np.float32)
    want = (m + f32["bias"]).astype(np_type)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
