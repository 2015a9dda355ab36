"""The numpy reference executor: single ONNX nodes against onnxruntime (the corners
the onnx node cases miss), dtype discipline, graph.fused and run_graph checks."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region

from smelt.dialects import dtypes
from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.frontend.onnx import import_model
from smelt.reference.executor import evaluate, run_graph
from smelt.reference.kernels import ALL_KERNELS

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def node_model(op_type, inputs, consts=None, n_out=1, opset=17, **attrs):
    """A one-node model: `inputs` are graph inputs, `consts` initializers."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph = helper.make_graph(
        [node],
        "node",
        [
            helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
            )
            for n, a in inputs.items()
        ],
        [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def check_against_ort(model, inputs, rtol=1e-5, atol=1e-6):
    import onnxruntime as ort

    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    want = session.run(None, inputs)
    got = list(run_graph(import_model(model), inputs).values())
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


X = f32(2, 4, 9, 11)
X3 = f32(2, 3, 5, 6, 7)
TIES = RNG.integers(-2, 3, (2, 3, 6, 7)).astype(np.float32)  # ties: the first wins
CASES = {
    "conv_groups_dilations_asym_pads": (
        "Conv", {"x": X}, {"w": f32(6, 2, 3, 2), "b": f32(6)},
        {"group": 2, "dilations": [2, 1], "pads": [1, 0, 2, 3], "strides": [2, 3]},
    ),
    "conv_depthwise_same_lower": (
        "Conv", {"x": X}, {"w": f32(4, 1, 3, 3)},
        {"group": 4, "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    ),
    "conv_1d": ("Conv", {"x": f32(1, 3, 20)}, {"w": f32(5, 3, 4)},
                {"strides": [2], "pads": [1, 2], "dilations": [2]}),
    "maxpool_ceil_pads_dilations": (
        "MaxPool", {"x": X}, {},
        {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1],
         "ceil_mode": 1, "dilations": [1, 2]},
    ),
    "avgpool_ceil_include_pad": (
        "AveragePool", {"x": X}, {},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
         "ceil_mode": 1, "count_include_pad": 1},
    ),
    "avgpool_exclude_pad": (
        "AveragePool", {"x": X}, {},
        {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 2, 1, 0]},
    ),
    "avgpool_same_upper": (
        "AveragePool", {"x": X}, {},
        {"kernel_shape": [2, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ),
    "lrn": ("LRN", {"x": X}, {}, {"size": 3, "alpha": 0.1, "beta": 0.6, "bias": 2.0}),
    "div_int_truncates": (
        "Div", {"a": np.array([7, -7, 7, -7, 0, -1], np.int32)},
        {"b": np.array([2, 2, -2, -2, 3, 5], np.int32)}, {},
    ),
    "pow_float_int_exponent": (
        "Pow", {"a": f32(3, 4)}, {"b": np.array([2, 3, 0, 1], np.int64)}, {},
    ),
    "gather_negative": (
        "Gather", {"x": f32(5, 3)}, {"i": np.array([[-1, 0], [2, -5]], np.int64)},
        {"axis": 0},
    ),
    "slice_negative_steps": (
        "Slice", {"x": f32(6, 7, 5)},
        {"s": np.array([-1, 100, 1]), "e": np.array([-100, 1, 5]),
         "a": np.array([0, 1, -1]), "st": np.array([-2, -3, 1])}, {},
    ),
    "pad_reflect_axes": (
        "Pad", {"x": f32(2, 5, 6)},
        {"p": np.array([2, 1, 3, 0]), "v": np.float32(0), "ax": np.array([2, 1])},
        {"mode": "reflect"}, 18,
    ),
    "pad_constant_negative": (
        "Pad", {"x": f32(4, 5)}, {"p": np.array([1, -2, -1, 3]), "v": np.float32(7)},
        {},
    ),
    "pad_wrap": ("Pad", {"x": f32(3, 4)}, {"p": np.array([2, 3, 1, 2])},
                 {"mode": "wrap"}, 19),
    "pad_edge": ("Pad", {"x": f32(3, 4)}, {"p": np.array([2, 0, 1, 4])},
                 {"mode": "edge"}),
    "softmax_opset11_coerces_2d": ("Softmax", {"x": f32(2, 3, 4)}, {}, {"axis": 1}, 11),
    "clip_int_missing_max": (
        "Clip", {"x": np.arange(-5, 5, dtype=np.int32)}, {"lo": np.int32(-2)}, {},
    ),
    "reduce_mean_negative_axis": (
        "ReduceMean", {"x": X}, {"a": np.array([-1, 1])}, {"keepdims": 0}, 18,
    ),
    "reduce_sum_int": (
        "ReduceSum", {"x": np.arange(24, dtype=np.int32).reshape(2, 3, 4)},
        {"a": np.array([1])}, {},
    ),
    "split_uneven_num_outputs": (
        "Split", {"x": f32(7, 3)}, {}, {"axis": 0, "num_outputs": 3}, 18, 3,
    ),
    "gemm_trans_alpha_beta": (
        "Gemm", {"a": f32(5, 3)}, {"b": f32(4, 5), "c": f32(4)},
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
    ),
    "layer_norm_axis1": (
        "LayerNormalization", {"x": f32(2, 3, 4)}, {"s": f32(3, 4)},
        {"axis": 1, "epsilon": 1e-3}, 17, 3,
    ),
    "batch_norm": (
        "BatchNormalization", {"x": X},
        {"s": f32(4), "b": f32(4), "m": f32(4), "v": np.abs(f32(4)) + 0.5},
        {"epsilon": 1e-3},
    ),
    "expand_bidirectional": (
        "Expand", {"x": f32(3, 1)}, {"s": np.array([2, 1, 4])}, {},
    ),
    "cast_float_to_int_truncates": (
        "Cast", {"x": np.array([-2.7, -0.5, 0.5, 2.9], np.float32)}, {},
        {"to": TensorProto.INT32},
    ),
    "cast_float_to_bool": (
        "Cast", {"x": np.array([0.0, -0.5, 2.0], np.float32)}, {},
        {"to": TensorProto.BOOL},
    ),
    "flatten_negative_axis": ("Flatten", {"x": X}, {}, {"axis": -3}),
    "leaky_relu": ("LeakyRelu", {"x": f32(3, 4)}, {}, {"alpha": 0.2}),
    "sigmoid_extremes": (
        "Sigmoid", {"x": np.array([-100, -10, 0, 10, 100], np.float32)}, {}, {},
    ),
    "erf": ("Erf", {"x": f32(64)}, {}, {}),
    # attributes that later opsets turned into inputs
    "clip_opset6": ("Clip", {"x": f32(3, 4)}, {}, {"min": -0.3, "max": 0.4}, 6),
    "slice_opset9": (
        "Slice", {"x": f32(5, 6)}, {},
        {"starts": [1, -4], "ends": [100, -1], "axes": [0, 1]}, 9,
    ),
    "pad_opset2": (
        "Pad", {"x": f32(3, 4)}, {}, {"pads": [1, 0, 2, 3], "value": 1.5}, 2,
    ),
    "split_opset11": ("Split", {"x": f32(6, 2)}, {}, {"split": [1, 5]}, 11, 2),
    "reduce_sum_opset11": (
        "ReduceSum", {"x": X}, {}, {"axes": [0, -2], "keepdims": 1}, 11,
    ),
    "unsqueeze_opset11": ("Unsqueeze", {"x": f32(3, 4)}, {}, {"axes": [-1, 0]}, 11),
    # pools of any spatial rank, MaxPool's Indices, training-mode BatchNormalization
    "maxpool_3d_ceil_pads_dilations": (
        "MaxPool", {"x": X3}, {},
        {"kernel_shape": [2, 3, 2], "strides": [2, 1, 3], "pads": [1, 0, 1, 0, 1, 1],
         "ceil_mode": 1, "dilations": [2, 1, 1]},
    ),
    "avgpool_3d_ceil_include_pad": (
        "AveragePool", {"x": X3}, {},
        {"kernel_shape": [3, 2, 3], "strides": [2, 2, 2], "pads": [1, 1, 0, 1, 0, 2],
         "ceil_mode": 1, "count_include_pad": 1},
    ),
    "avgpool_3d_exclude_pad_dilations": (
        "AveragePool", {"x": X3}, {},
        {"kernel_shape": [2, 2, 2], "dilations": [2, 1, 2], "pads": [1, 1, 1, 0, 1, 1]},
        19,
    ),
    "maxpool_indices_ties_pads": (
        "MaxPool", {"x": TIES}, {}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        12, 2,
    ),
    "maxpool_indices_column_major_ceil_dilations": (
        "MaxPool", {"x": TIES}, {},
        {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [0, 1, 1, 0],
         "dilations": [2, 1], "ceil_mode": 1, "storage_order": 1}, 12, 2,
    ),
    "maxpool_indices_3d_column_major": (
        "MaxPool", {"x": X3}, {},
        {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 1],
         "storage_order": 1}, 12, 2,
    ),
    "maxpool_indices_1d_same_upper": (
        "MaxPool", {"x": f32(2, 3, 11)}, {},
        {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}, 12, 2,
    ),
    "batch_norm_training": (
        "BatchNormalization", {"x": X},
        {"s": f32(4), "b": f32(4), "m": f32(4), "v": np.abs(f32(4)) + 0.5},
        {"epsilon": 1e-3, "momentum": 0.7, "training_mode": 1}, 15, 3,
    ),
    "batch_norm_training_rank3_default_momentum": (
        "BatchNormalization", {"x": f32(5, 3, 7)},
        {"s": f32(3), "b": f32(3), "m": f32(3), "v": np.abs(f32(3)) + 0.5},
        {"training_mode": 1}, 14, 3,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_against_onnxruntime(name):
    op_type, inputs, consts, attrs, *rest = CASES[name]
    opset = rest[0] if rest else 17
    n_out = rest[1] if len(rest) > 1 else 1
    model = node_model(op_type, inputs, consts, n_out, opset, **attrs)
    check_against_ort(model, inputs)


def test_lrn_even_size_follows_the_spec():
    # onnxruntime refuses even sizes and onnx.reference loops over the wrong dim,
    # so the spec's formula is spelled out here: channels c - 1 .. c + 2 for size 4.
    model = node_model("LRN", {"x": X}, size=4, alpha=0.1, beta=0.6, bias=2.0)
    got = run_graph(import_model(model), {"x": X})["y0"]
    c = X.shape[1]
    sq = np.stack(
        [(X[:, max(0, i - 1) : min(c, i + 3)] ** 2).sum(1) for i in range(c)], 1
    )
    np.testing.assert_allclose(got, X / (2.0 + 0.1 / 4 * sq) ** 0.6, rtol=1e-5)


def _op(cls, operands, **attrs):
    block = Block(arg_types=[g.tensor(dtypes.from_numpy(a.dtype), a.shape)
                             for a in operands])  # fmt: skip
    return cls.build(block.args, **attrs)


def test_float32_stays_float32():
    x = f32(2, 3, 5, 5)
    op = _op(g.LrnOp, [x], size=3, alpha=1e-3, beta=0.75, bias=1.0)
    assert ALL_KERNELS[g.LrnOp](op, [x]).dtype == np.float32
    op = _op(g.LayerNormOp, [x, f32(5), f32(5)], axis=3, epsilon=1e-5)
    assert [r.dtype for r in evaluate(op, [x, f32(5), f32(5)])] == [np.float32] * 3


def test_pow_integer_negative_exponent():
    a = np.array([2, 1, -1, -1, 3], np.int64)
    b = np.array([-1, -3, -3, -2, 2], np.int64)
    (r,) = evaluate(_op(g.PowOp, [a, b]), [a, b])
    assert r.tolist() == [0, 1, -1, 1, 9]


def test_fused_runs_its_region():
    x = f32(4, 4)
    t = g.tensor(dtypes.f32, (4, 4))
    body = Block(arg_types=[t, t])
    add = g.AddOp.build(body.args)
    relu = g.ReluOp.build([add.result])
    body.add_ops([add, relu, g.YieldOp.create(operands=[relu.result])])
    main_block = Block(arg_types=[t])
    fused = g.FusedOp.create(
        operands=[main_block.args[0], main_block.args[0]],
        result_types=[t],
        attributes={"kind": g.to_attr("elementwise")},
        regions=[Region(body)],
    )
    main_block.add_ops([fused, func.ReturnOp(fused.results[0])])
    main = func.FuncOp("main", ([t], [t]), Region(main_block))
    out = run_graph(ModuleOp([main]), {"input_0": x})
    np.testing.assert_array_equal(out["output_0"], np.maximum(x + x, 0))


def test_run_graph_checks_inputs():
    model = node_model("Relu", {"x": f32(2, 3)})
    module = import_model(model)
    with pytest.raises(SmeltError, match="missing"):
        run_graph(module, {})
    with pytest.raises(SmeltError, match="expects float32"):
        run_graph(module, {"x": np.zeros((2, 3))})
    with pytest.raises(SmeltError, match=r"\[2, 3\]"):
        run_graph(module, {"x": np.zeros((3, 2), np.float32)})


def test_every_graph_op_has_a_kernel():
    ops = [op for op in g.Graph.operations if issubclass(op, g.GraphOp)]
    assert [op.name for op in ops if op not in ALL_KERNELS] == []


def test_conv_is_not_slow():
    import time

    x, w, b = f32(1, 64, 56, 56), f32(64, 64, 3, 3), f32(64)
    op = _op(g.Conv2dOp, [x, w, b], strides=[1, 1], pads=[1, 1, 1, 1],
             dilations=[1, 1], group=1, layout="nchw")  # fmt: skip
    start = time.perf_counter()
    (y,) = evaluate(op, [x, w, b])
    assert y.shape == (1, 64, 56, 56) and time.perf_counter() - start < 2.0


POOL_2X2 = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0],
            "dilations": [1, 1], "ceil_mode": 0}  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "arrays", "attrs", "message"),
    [
        (g.MatMulOp, [f32(2, 3), np.zeros((3, 2), np.float16)], {}, "element type"),
        (g.GatherOp, [f32(4), f32(2)], {"axis": 0}, "indices must be integers"),
        (g.GemmOp, [f32(2, 3), f32(3, 4), f32(3, 4)],
         {"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0}, "broadcast"),
        (g.PadOp, [f32(2), f32(2)], {"pads": [1, 1], "mode": "constant"}, "one elem"),
        (g.MaxPoolWithIndicesOp, [f32(1, 2, 4, 4)],
         {**POOL_2X2, "layout": "nhwc", "storage_order": 0}, "nchw only"),
        (g.MaxPoolWithIndicesOp, [f32(1, 2, 4, 4)],
         {**POOL_2X2, "layout": "nchw", "storage_order": 2}, "must be 0 or 1"),
    ],
)  # fmt: skip
def test_verifier_rejects_what_the_kernels_cannot_run(cls, arrays, attrs, message):
    from xdsl.utils.exceptions import VerifyException

    with pytest.raises(VerifyException, match=message):
        _op(cls, arrays, **attrs)


def test_bf16_reduce_max_of_negative_values():
    """max's identity for bf16 (numpy kind 'V') is -inf, not 0."""
    import ml_dtypes
    from xdsl.ir import Block

    from smelt.dialects import dtypes
    from smelt.dialects import graph as g
    from smelt.reference.executor import evaluate

    x = np.array([[-np.inf, -3.0], [-np.inf, -np.inf]], ml_dtypes.bfloat16)
    block = Block(arg_types=[g.tensor(dtypes.bf16, [2, 2])])
    op = g.ReduceMaxOp.build(block.args, None, axes=[1], keepdims=0)
    (y,) = evaluate(op, [x])
    assert y.astype(np.float32).tolist() == [-3.0, -np.inf]
