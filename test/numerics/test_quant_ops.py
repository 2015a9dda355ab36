"""Quantization through smelt.compile against oracles exact on every host
(int8_oracle.py): a QDQ matmul with a per-channel int8 weight (kept as int8
data) against onnxruntime's QDQ graph as written, QuantizeLinear's rounding ties
and saturation against onnxruntime, and the QOperator ops (QLinearMatMul,
QLinearConv, MatMulInteger, ConvInteger) at odd shapes, in uint8 and int8,
against onnx's reference evaluator (integer numpy: onnxruntime's u8·s8 kernels
saturate on hosts without VNNI)."""

from __future__ import annotations

import numpy as np
import pytest
from int8_oracle import ort_outputs, reference_outputs
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler.driver import import_graph
from smelt.dialects import dtypes, graph
from smelt.dialects import quant as q
from smelt.errors import SmeltError

RNG = np.random.default_rng(14)
F32 = TensorProto.FLOAT
ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def model(nodes, inputs, outputs, initializers=(), opset: int = 21):
    """A model of `nodes`; inputs and outputs as (name, element type, shape)."""
    info = helper.make_tensor_value_info
    g = helper.make_graph(
        nodes,
        "m",
        [info(n, t, s) for n, t, s in inputs],
        [info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(a, n) for n, a in initializers],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def both(m, feeds, oracle: str = "ort"):
    """(smelt's outputs, the oracle's): "ort" onnxruntime's default run, "ort-qdq"
    its run of the graph as written (no int8 kernel), "reference" onnx's
    reference evaluator."""
    ours = smelt.compile(m).run(feeds)
    ours = list(ours.values()) if isinstance(ours, dict) else list(ours)
    if oracle == "reference":
        return ours, reference_outputs(m, feeds)
    return ours, ort_outputs(m, feeds, optimized=oracle == "ort")


def _integers(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


# --- QDQ -----------------------------------------------------------------------------


def _qdq_matmul(act=np.uint8):
    w = _integers(np.int8, (7, 11))
    w_scale = RNG.uniform(0.01, 0.05, 11).astype(np.float32)
    inits = [
        ("w", w),
        ("w_scale", w_scale),
        ("w_zp", np.zeros(11, np.int8)),
        ("x_scale", np.array(0.02, np.float32)),
        ("x_zp", np.array(128 if act == np.uint8 else 3, act)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y"]),
    ]
    return model(nodes, [("x", F32, [5, 7])], [("y", F32, [5, 11])], inits)


@pytest.mark.parametrize("act", [np.uint8, np.int8])
def test_qdq_matmul_with_a_per_channel_int8_weight(act):
    m = _qdq_matmul(act)
    x = RNG.uniform(-2, 2, (5, 7)).astype(np.float32)
    (ours,), (theirs,) = both(m, {"x": x}, "ort-qdq")
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_a_dequantized_weight_stays_int8_data():
    module = import_graph(_qdq_matmul())
    deq = [op for op in module.walk() if isinstance(op, q.DequantizeOp)]
    weight = next(op for op in deq if graph.shape_of(op.input) == (7, 11))
    assert isinstance(weight.input.owner, graph.ConstantOp)
    assert graph.element_type_of(weight.input) == dtypes.i8
    qtype = weight.uniform_type()
    assert qtype is not None and qtype.quantized_dimension == 1
    assert len(qtype.scales) == 11
    qtype.verify_for(weight.input.type)
    floats = [
        op for op in module.walk()
        if isinstance(op, graph.ConstantOp) and graph.shape_of(op.result) == (7, 11)
        and graph.element_type_of(op.result) == dtypes.f32
    ]  # fmt: skip
    assert not floats


# --- QuantizeLinear: ties and saturation ---------------------------------------------


@pytest.mark.parametrize(
    "dtype,zp", [(np.uint8, 128), (np.uint8, 0), (np.int8, 0), (np.int8, -5)]
)
def test_quantize_rounds_ties_to_even_and_saturates(dtype, zp):
    ties = np.arange(-10.5, 11, 1.0, dtype=np.float32)  # every x.5 from -10.5
    extremes = np.array([1e9, -1e9, 300, -300, 127.5, -128.5, 255.5], np.float32)
    x = np.concatenate([ties, ties * 0.5, extremes]).astype(np.float32)
    m = model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
        [("x", F32, [x.size]), ("s", F32, []), ("z", ONNX_TYPE[dtype], [])],
        [("y", ONNX_TYPE[dtype], [x.size])],
    )
    for scale in (1.0, 0.5, 0.25):
        feeds = {"x": x, "s": np.array(scale, np.float32), "z": np.array(zp, dtype)}
        (ours,), (theirs,) = both(m, feeds)
        np.testing.assert_array_equal(ours, theirs)
        info = np.iinfo(dtype)
        assert ours.min() == info.min and ours.max() == info.max


def test_quantize_per_axis_on_a_rank_3_tensor():
    x = RNG.uniform(-3, 3, (2, 5, 3)).astype(np.float32)
    s = RNG.uniform(0.01, 0.1, 5).astype(np.float32)
    z = _integers(np.int8, 5)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=-2)]
    m = model(
        nodes,
        [("x", F32, [2, 5, 3]), ("s", F32, [5]), ("z", TensorProto.INT8, [5])],
        [("y", TensorProto.INT8, [2, 5, 3])],
    )
    (ours,), (theirs,) = both(m, {"x": x, "s": s, "z": z})
    np.testing.assert_array_equal(ours, theirs)


def test_blocked_quantization_with_a_partial_last_block():
    from onnx.reference import ReferenceEvaluator

    x = RNG.uniform(-3, 3, (3, 5)).astype(np.float32)
    s = RNG.uniform(0.01, 0.1, (3, 3)).astype(np.float32)
    z = _integers(np.int8, (3, 3))
    blocks = {"axis": 1, "block_size": 2}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **blocks),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **blocks),
    ]
    m = model(
        nodes,
        [("x", F32, [3, 5]), ("s", F32, [3, 3]), ("z", TensorProto.INT8, [3, 3])],
        [("y", F32, [3, 5])],
    )
    feeds = {"x": x, "s": s, "z": z}
    ours = smelt.compile(m).run(feeds)
    ours = next(iter(ours.values())) if isinstance(ours, dict) else ours[0]
    np.testing.assert_array_equal(ours, ReferenceEvaluator(m).run(None, feeds)[0])


def test_float8_is_refused_clearly():
    nodes = [helper.make_node("DequantizeLinear", ["x", "s"], ["y"])]
    m = model(
        nodes,
        [("x", TensorProto.FLOAT8E4M3FN, [4]), ("s", F32, [])],
        [("y", F32, [4])],
    )
    with pytest.raises(SmeltError, match="FLOAT8E4M3FN is not supported"):
        smelt.compile(m)


# --- QOperator ops -------------------------------------------------------------------


def _close(ours, theirs):
    """Requantized outputs: the scale product may be rounded to float32 or kept
    in float64 (onnx's reference: int32 · float32 in numpy), so near-ties may
    differ by one step."""
    diff = np.abs(ours.astype(np.int32) - theirs.astype(np.int32))
    assert diff.max() <= 1
    assert (diff == 0).mean() >= 0.99


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_odd_shapes(dtype):
    a, b = _integers(dtype, (3, 5, 7)), _integers(dtype, (7, 13))
    t = ONNX_TYPE[dtype]
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "y_s", "y_z"]
    inits = [
        ("a_s", np.array(0.03, np.float32)),
        ("a_z", np.array(7, dtype)),
        ("b_s", np.array(0.02, np.float32)),
        ("b_z", np.array(-3 if dtype == np.int8 else 130, dtype)),
        ("y_s", np.array(0.9, np.float32)),
        ("y_z", np.array(5, dtype)),
    ]
    m = model(
        [helper.make_node("QLinearMatMul", names, ["y"])],
        [("a", t, [3, 5, 7]), ("b", t, [7, 13])],
        [("y", t, [3, 5, 13])],
        inits,
    )
    (ours,), (theirs,) = both(m, {"a": a, "b": b}, "reference")
    _close(ours, theirs)


def test_qlinear_conv_per_channel_with_bias_stride_and_pads():
    x, w = _integers(np.uint8, (2, 3, 9, 11)), _integers(np.int8, (5, 3, 3, 3))
    names = ["x", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z", "bias"]
    inits = [
        ("x_s", np.array(0.05, np.float32)),
        ("x_z", np.array(120, np.uint8)),
        ("w", w),
        ("w_s", RNG.uniform(0.005, 0.02, 5).astype(np.float32)),
        ("w_z", np.zeros(5, np.int8)),
        ("y_s", np.array(0.2, np.float32)),
        ("y_z", np.array(100, np.uint8)),
        ("bias", RNG.integers(-500, 500, 5).astype(np.int32)),
    ]
    conv = helper.make_node(
        "QLinearConv", names, ["y"], strides=[2, 1], pads=[1, 0, 1, 2]
    )
    m = model(
        [conv],
        [("x", TensorProto.UINT8, [2, 3, 9, 11])],
        [("y", TensorProto.UINT8, [2, 5, 5, 11])],
        inits,
    )
    (ours,), (theirs,) = both(m, {"x": x}, "reference")
    _close(ours, theirs)


@pytest.mark.parametrize("b_type", [np.uint8, np.int8])
def test_matmul_integer_is_exact(b_type):
    a, b = _integers(np.uint8, (4, 9)), _integers(b_type, (9, 6))
    m = model(
        [helper.make_node("MatMulInteger", ["a", "b", "a_z", "b_z"], ["y"])],
        [("a", TensorProto.UINT8, [4, 9]), ("b", ONNX_TYPE[b_type], [9, 6])],
        [("y", TensorProto.INT32, [4, 6])],
        [("a_z", np.array(17, np.uint8)), ("b_z", np.array(3, b_type))],
    )
    (ours,), (theirs,) = both(m, {"a": a, "b": b}, "reference")
    np.testing.assert_array_equal(ours, theirs)


def test_conv_integer_is_exact():
    x, w = _integers(np.uint8, (1, 2, 7, 5)), _integers(np.uint8, (3, 2, 2, 3))
    m = model(
        [
            helper.make_node(
                "ConvInteger", ["x", "w", "x_z", "w_z"], ["y"], pads=[1, 1, 0, 1]
            )
        ],
        [
            ("x", TensorProto.UINT8, [1, 2, 7, 5]),
            ("w", TensorProto.UINT8, [3, 2, 2, 3]),
        ],
        [("y", TensorProto.INT32, [1, 3, 7, 5])],
        [("x_z", np.array(9, np.uint8)), ("w_z", np.array(200, np.uint8))],
    )
    (ours,), (theirs,) = both(m, {"x": x, "w": w}, "reference")
    np.testing.assert_array_equal(ours, theirs)
