"""Interpreter cases for test_triton_interpret.py: each runs in its own process with
TRITON_INTERPRET=1 set before Triton is imported (Triton decides at import time
whether its own language functions are interpreted)."""

from __future__ import annotations

import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, shape_inference

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.lowering.triton import schedule
from smelt.lowering.triton.runtime import TritonProgram

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
from models import (
    encoder_layer_model,
    mlp_model,
    rel_error,
    run_onnxruntime,
)
from test_triton_emit import parse

RNG = np.random.default_rng(0)


def run_model(model, feeds: dict[str, np.ndarray]) -> tuple[TritonProgram, dict]:
    module = import_graph(model)
    lower(module, pipelines.preset("gpu"))
    program = TritonProgram(module, device="cpu")
    expected = run_onnxruntime(model, feeds)
    outputs = {name: np.zeros_like(v) for name, v in expected.items()}
    program.run(list(feeds.values()) + list(outputs.values()))
    for name, value in expected.items():
        assert rel_error(outputs[name], value) < 1e-5, name
    return program, outputs


def case_mlp_through_smelt_compile():
    model = mlp_model(batch=4, d_in=16, hidden=32, d_out=10)
    compiled = smelt.compile(model, target="gpu")
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    got = compiled.run({"x": x})["probs"]
    assert rel_error(got, run_onnxruntime(model, {"x": x})["probs"]) < 1e-5
    modes = [launch.kernel.mode for launch in compiled.program.launches]
    assert modes == ["dot", "dot", "elementwise"]


def case_encoder_layer():
    model = encoder_layer_model(seq=16, hidden=32, heads=2, ffn=64)
    program, _ = run_model(
        model, {"x": RNG.standard_normal((1, 16, 32)).astype(np.float32)}
    )
    modes = [launch.kernel.mode for launch in program.launches]
    assert modes.count("dot") == 8 and modes.count("rows") == 3


def _conv_model() -> object:
    """conv(pad 1) + batchnorm + relu, then max pool, global and plain average pool."""
    w = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    vectors = {
        "b": RNG.standard_normal(8), "s": RNG.random(8) + 0.5,
        "bb": RNG.standard_normal(8), "mu": RNG.standard_normal(8) * 0.1,
        "var": RNG.random(8) + 0.5,
    }  # fmt: skip
    inits = [numpy_helper.from_array(w, "w")] + [
        numpy_helper.from_array(v.astype(np.float32), k) for k, v in vectors.items()
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["bn"]),
        n("Relu", ["bn"], ["r"]),
        n(
            "MaxPool",
            ["r"],
            ["p"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        n("GlobalAveragePool", ["p"], ["g"]),
        n("AveragePool", ["r"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 10])
    outs = [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
        for o in ["p", "g", "ap"]
    ]
    graph = helper.make_graph(nodes, "conv", [x], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return shape_inference.infer_shapes(model)


def case_conv_batchnorm_relu_and_pools():
    program, _ = run_model(
        _conv_model(), {"x": RNG.standard_normal((2, 3, 10, 10)).astype(np.float32)}
    )
    modes = [launch.kernel.mode for launch in program.launches]
    assert "dot" in modes and "rows" in modes  # the conv; the global average pool


def case_rows_longer_than_one_block():
    """Softmax and layer norm over 100 columns in blocks of 32 (four chunks, a tail)."""
    schedule.ROWS_MAX_R = 32
    n = helper.make_node
    scale = numpy_helper.from_array(RNG.random(100).astype(np.float32) + 0.5, "s")
    bias = numpy_helper.from_array(RNG.standard_normal(100).astype(np.float32), "b")
    nodes = [
        n("Softmax", ["x"], ["p"], axis=-1),
        n("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1),
        n("ReduceMax", ["x"], ["m"], axes=[1], keepdims=0),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 100])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in "pym"]
    graph = helper.make_graph(nodes, "rows", [x], outs, [scale, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": RNG.standard_normal((5, 100)).astype(np.float32)}
    program, _ = run_model(shape_inference.infer_shapes(model), feeds)
    sizes = {launch.kernel.constexprs.get("BLOCK_R") for launch in program.launches}
    assert sizes == {32}


SCALARS = """
func.func @ops(%f: memref<8xf32>, %i: memref<8xi32>, %u: memref<8xi8>,
               %of: memref<8xf32>, %oi: memref<8xi32>, %ob: memref<8xi1>) attributes {loop.kernel} {
  %c3 = arith.constant 3 : i32
  %c200 = arith.constant 200 : i32
  %ninf = arith.constant 0xff800000 : f32
  %two = arith.constant 2.0 : f32
  loop.for %k = 0 to 8 step 1 parallel {
    %x = memref.load %f[%k] : memref<8xf32>
    %n = memref.load %i[%k] : memref<8xi32>
    %b = memref.load %u[%k] : memref<8xi8>
    %q = arith.divsi %n, %c3 : i32
    %r = arith.remsi %n, %c3 : i32
    %bu = arith.extui %b : i8 to i32
    %lt = arith.cmpi ult, %bu, %c200 : i32
    %s0 = arith.addi %q, %r : i32
    %s1 = arith.muli %s0, %bu : i32
    %s = arith.select %lt, %s1, %q : i32
    memref.store %s, %oi[%k] : memref<8xi32>
    %t = math.tanh %x : f32
    %a = math.absf %x : f32
    %p = math.powf %a, %two : f32
    %e = math.erf %x : f32
    %fl = math.floor %x : f32
    %m = arith.maximumf %x, %ninf : f32
    %v0 = arith.addf %t, %p : f32
    %v1 = arith.addf %v0, %e : f32
    %v2 = arith.addf %v1, %fl : f32
    %v3 = arith.addf %v2, %m : f32
    memref.store %v3, %of[%k] : memref<8xf32>
    %pos = arith.cmpf ogt, %x, %ninf : f32
    memref.store %pos, %ob[%k] : memref<8xi1>
    loop.yield
  }
  func.return
}
func.func @main(%f: memref<8xf32>, %i: memref<8xi32>, %u: memref<8xi8>,
                %of: memref<8xf32>, %oi: memref<8xi32>, %ob: memref<8xi1>)
    attributes {smelt.input_names = ["f", "i", "u"], smelt.output_names = ["of", "oi", "ob"]} {
  func.call @ops(%f, %i, %u, %of, %oi, %ob) : (memref<8xf32>, memref<8xi32>, memref<8xi8>, memref<8xf32>, memref<8xi32>, memref<8xi1>) -> ()
  func.return
}
"""


def case_scalar_ops_match_numpy():
    import math

    f = np.array([-2.5, -1.0, -0.25, 0.0, 0.5, 1.5, np.nan, -np.inf], np.float32)
    i = np.array([-7, -6, -1, 0, 1, 5, 7, 100], np.int32)
    u = np.array([0, 1, 2, 3, 199, 200, 255, 128], np.uint8)
    of, oi, ob = np.zeros(8, np.float32), np.zeros(8, np.int32), np.zeros(8, np.bool_)
    TritonProgram(parse(SCALARS), device="cpu").run([f, i, u, of, oi, ob])
    q = np.trunc(i / 3).astype(np.int32)
    r = i - q * 3
    expect_i = np.where(u.astype(np.int32) < 200, (q + r) * u.astype(np.int32), q)
    np.testing.assert_array_equal(oi, expect_i)
    erf = np.array([math.erf(v) for v in f.astype(np.float64)])
    expect_f = np.tanh(f) + np.abs(f) ** 2 + erf + np.floor(f) + f
    np.testing.assert_allclose(of[:6], expect_f[:6], rtol=1e-5)
    assert np.isnan(of[6])  # maximumf propagates NaN
    np.testing.assert_array_equal(ob, f > -np.inf)


def case_reductions_and_scans():
    """ReduceProd / ReduceMin (block-reduced rows), LogSoftmax, Hardmax, ArgMax with
    select_last_index, CumSum (sequential sweeps, not block reductions) and TopK."""
    n = helper.make_node
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    nodes = [
        n("ReduceProd", ["x"], ["prod"], axes=[1], keepdims=0),
        n("ReduceMin", ["x"], ["min"], axes=[1], keepdims=1),
        n("LogSoftmax", ["x"], ["logp"], axis=-1),
        n("Hardmax", ["x"], ["hard"], axis=-1),
        n("ArgMax", ["r"], ["arg"], axis=1, keepdims=0, select_last_index=1),
        n("CumSum", ["x", "axis"], ["cum"], exclusive=1, reverse=1),
        n("CumSum", ["x", "axis"], ["cum2"]),  # stores the yielded running total
        n("TopK", ["x", "k"], ["top", "top_i"], axis=-1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 40])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, [4, 40])
    names = ["prod", "min", "logp", "hard", "arg", "cum", "cum2", "top", "top_i"]
    outs = [
        helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
        for o in names
    ]
    graph = helper.make_graph(nodes, "scans", [x, r], outs, [axis, k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {
        "x": (RNG.random((4, 40)) + 0.5).astype(np.float32),
        "r": RNG.integers(0, 3, (4, 40)).astype(np.float32),  # ties
    }
    run_model(shape_inference.infer_shapes(model), feeds)


def case_indexing_ops():
    """Gathers and scatters by run-time indices (the scatter's updates run in
    order in one serial phase: duplicates add up, the last write wins)."""
    from test_indexing_ops import model

    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    idx = np.array([[1, -1, 0, 1, 1, 3]] * 3, np.int64)  # duplicates along axis 0
    upd = RNG.standard_normal((3, 6)).astype(np.float32)
    for reduction in ("none", "add"):
        feeds = {"d": data, "i": idx, "u": upd}
        run_model(
            model("ScatterElements", feeds, [4, 6], np.float32, axis=0,
                  reduction=reduction), feeds,
        )  # fmt: skip
    feeds = {"d": data, "i": np.array([[[1], [-1]], [[0], [2]]], np.int64)}
    run_model(model("GatherND", feeds, [2, 2, 6], np.float32), feeds)
    feeds = {"d": data, "i": RNG.integers(-6, 6, (4, 3)).astype(np.int64)}
    run_model(model("GatherElements", feeds, [4, 3], np.float32, axis=1), feeds)


def case_logic_bitwise_mod_and_trig_ops():
    """Mod (both kinds, x mod 0), shifts past the width, bitwise and logical ops,
    compares, IsNaN / IsInf, Sign, PRelu, sin and cos (the libdevice functions
    have no interpreter version: test_elementwise_ops checks their source)."""
    shape = [3, 40]
    x = RNG.uniform(-3, 3, shape).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    d = RNG.uniform(0.3, 1, shape).astype(np.float32)
    i = RNG.integers(-100, 100, shape).astype(np.int32)
    j = RNG.integers(-5, 5, shape).astype(np.int32)
    u = RNG.integers(0, 256, shape).astype(np.uint8)
    n = RNG.integers(0, 12, shape).astype(np.uint8)
    nodes = [
        helper.make_node("Sin", ["x"], ["sin"]),
        helper.make_node("Cos", ["x"], ["cos"]),
        helper.make_node("Sign", ["x"], ["sign"]),
        helper.make_node("Mod", ["x", "d"], ["fmod"], fmod=1),
        helper.make_node("PRelu", ["x", "d"], ["prelu"]),
        helper.make_node("IsNaN", ["x"], ["nan"]),
        helper.make_node("IsInf", ["x"], ["inf"], detect_negative=0),
        helper.make_node("Mod", ["i", "j"], ["mod"]),
        helper.make_node("Mod", ["i", "j"], ["rem"], fmod=1),
        helper.make_node("BitShift", ["u", "n"], ["left"], direction="LEFT"),
        helper.make_node("BitShift", ["u", "n"], ["right"], direction="RIGHT"),
        helper.make_node("BitwiseNot", ["i"], ["inv"]),
        helper.make_node("GreaterOrEqual", ["i", "j"], ["ge"]),
        helper.make_node("LessOrEqual", ["i", "j"], ["le"]),
        helper.make_node("Xor", ["ge", "le"], ["ne"]),
        helper.make_node("Not", ["ne"], ["eq"]),
    ]
    info = helper.make_tensor_value_info
    f, b = TensorProto.FLOAT, TensorProto.BOOL
    i32, u8 = TensorProto.INT32, TensorProto.UINT8
    inputs = [("x", f), ("d", f), ("i", i32), ("j", i32), ("u", u8), ("n", u8)]
    outputs = [(o, f) for o in ("sin", "cos", "sign", "fmod", "prelu")]
    outputs += [("nan", b), ("inf", b), ("mod", i32), ("rem", i32)]
    outputs += [("left", u8), ("right", u8), ("inv", i32), ("eq", b)]
    graph = helper.make_graph(
        nodes,
        "ops",
        [info(name, t, shape) for name, t in inputs],
        [info(name, t, shape) for name, t in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    got = smelt.compile(model, target="gpu").run(
        {"x": x, "d": d, "i": i, "j": j, "u": u, "n": n}
    )
    far, small = n >= 8, np.minimum(n, 7)
    with np.errstate(all="ignore"):
        expected = {
            "sin": np.sin(x), "cos": np.cos(x), "sign": np.sign(x),
            "fmod": np.fmod(x, d), "prelu": np.where(x < 0, x * d, x),
            "nan": np.isnan(x), "inf": np.isposinf(x), "mod": np.mod(i, j),
            "rem": np.fmod(i, j), "left": np.where(far, 0, u << small),
            "right": np.where(far, 0, u >> small), "inv": ~i, "eq": i == j,
        }  # fmt: skip
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=name)
