"""ConvTranspose, Resize, Einsum, LpPool, LpNormalization and InstanceNormalization
(imported as compositions of graph ops) compiled for the CPU, against onnxruntime
on cases the ONNX node-conformance set does not cover. Fixed seeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

import smelt


def single_node_model(
    op: str,
    inputs: dict[str, np.ndarray],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 19,
    **attrs,
) -> onnx.ModelProto:
    """A one-node model: `inputs` are graph inputs, `initializers` constants; the
    node's inputs are both, in that order ("" for an absent one)."""
    initializers = initializers or {}
    names = [*inputs, *initializers]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(
                k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape
            )
            for k, v in inputs.items()
        ],
        [onnx.ValueInfoProto(name="y")],
        [numpy_helper.from_array(v, k) for k, v in initializers.items() if k],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(model: onnx.ModelProto, inputs: dict[str, np.ndarray], tol=1e-4) -> None:
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (want,) = session.run(None, inputs)
    got = smelt.compile(model, "cpu").run(inputs)["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "xshape, wshape, attrs",
    [
        ((1, 4, 5, 6), (4, 3, 3, 2), dict(strides=[2, 3], pads=[1, 0, 2, 1])),
        ((2, 4, 5, 5), (4, 2, 3, 3), dict(group=2, dilations=[2, 1], strides=[2, 2])),
        ((1, 2, 4, 4), (2, 3, 3, 3), dict(strides=[2, 2], output_padding=[1, 1])),
        ((1, 2, 5, 6), (2, 2, 3, 3), dict(pads=[3, 3, 1, 3])),  # cuts the input
        ((1, 3, 7), (3, 2, 4), dict(strides=[3], pads=[1, 2], dilations=[2])),
        ((1, 2, 4, 4), (2, 1, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ],
)
def test_conv_transpose(xshape, wshape, attrs):
    x, w, b = rand(*xshape), rand(*wshape), rand(wshape[1] * attrs.get("group", 1))
    model = single_node_model("ConvTranspose", {"x": x}, {"w": w, "b": b}, **attrs)
    check(model, {"x": x})


@pytest.mark.parametrize(
    "xshape, wshape, attrs",
    [
        ((1, 2, 3, 4, 3), (2, 3, 2, 3, 2),
         dict(strides=[2, 1, 3], pads=[1, 0, 0, 0, 2, 1])),
        ((2, 4, 3, 3, 4), (4, 1, 3, 2, 2),
         dict(group=2, dilations=[2, 1, 1], output_padding=[1, 0, 0],
              strides=[2, 2, 1])),
    ],
)  # fmt: skip
def test_conv_transpose_3d(xshape, wshape, attrs):
    x, w = rand(*xshape), rand(*wshape)
    b = rand(wshape[1] * attrs.get("group", 1))
    model = single_node_model("ConvTranspose", {"x": x}, {"w": w, "b": b}, **attrs)
    check(model, {"x": x})


def test_conv_transpose_4d_is_refused():
    x, w = rand(1, 1, 2, 2, 2, 2), rand(1, 1, 2, 2, 2, 2)
    model = single_node_model("ConvTranspose", {"x": x}, {"w": w})
    with pytest.raises(smelt.SmeltError, match="4-D ConvTranspose"):
        smelt.compile(model, "cpu")


@pytest.mark.parametrize(
    "opset, shape, scales, sizes, attrs",
    [
        (13, (2, 3, 5, 7), [1, 1, 1.7, 0.6], None, dict(mode="linear")),
        (13, (1, 2, 6, 4), None, [1, 2, 3, 9],
         dict(mode="cubic", coordinate_transformation_mode="align_corners")),
        (11, (1, 1, 4, 5), [1, 1, 2.5, 1.5], None,
         dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn")),
        (13, (1, 3, 5, 4), [1, 1.0, 3.0, 0.5], None,
         dict(mode="nearest", nearest_mode="round_prefer_ceil")),
        (18, (1, 2, 8, 6), None, [3, 4],
         dict(mode="linear", axes=[3, 2], antialias=1)),
        (13, (1, 2, 23, 40), [1, 1, 1.9, 0.4], None,
         dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5)),
        (18, (1, 2, 30, 17), None, [1, 2, 9, 34], dict(mode="cubic", antialias=1)),
        (13, (1, 1, 12, 16), None, [1, 1, 7, 33],
         dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
              extrapolation_value=-2.0)),
        (13, (3, 5), [2.0, 0.5], None,
         dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel")),
    ],
)  # fmt: skip
def test_resize(opset, shape, scales, sizes, attrs):
    x = rand(*shape)
    consts = {
        "roi": np.zeros(0, np.float32),
        "scales": np.array(scales or [], np.float32),
    }
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        consts["roi"] = np.array([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2], np.float32)
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
    model = single_node_model("Resize", {"x": x}, consts, opset=opset, **attrs)
    check(model, {"x": x})


def test_resize_nearest_keeps_integers():
    x = RNG.integers(0, 255, (1, 3, 4, 4)).astype(np.uint8)
    consts = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], "f4")}
    model = single_node_model("Resize", {"x": x}, consts, mode="nearest")
    check(model, {"x": x}, tol=0)


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
        ("...ij,...jk", [(2, 1, 3, 4), (1, 5, 4, 6)]),
        ("bii->b", [(3, 4, 4)]),
        ("ij,kj->ikj", [(2, 3), (4, 3)]),
        ("abc,cd->", [(2, 3, 4), (4, 5)]),
    ],
)
def test_einsum(equation, shapes):
    inputs = {f"x{i}": rand(*s) for i, s in enumerate(shapes)}
    model = single_node_model("Einsum", inputs, opset=12, equation=equation)
    check(model, inputs)


@pytest.mark.parametrize(
    "shape, attrs",
    [
        ((1, 2, 9), dict(kernel_shape=[3], p=3, strides=[2], pads=[1, 1])),
        ((1, 2, 6, 7), dict(kernel_shape=[2, 3], p=1, auto_pad="SAME_UPPER")),
    ],
)
def test_lp_pool(shape, attrs):
    x = rand(*shape)
    model = single_node_model("LpPool", {"x": x}, opset=18, **attrs)
    check(model, {"x": x})


def test_lp_normalization_zero_norm():
    x = rand(3, 4)
    x[1] = 0
    model = single_node_model("LpNormalization", {"x": x}, axis=1, p=1)
    got = smelt.compile(model, "cpu").run({"x": x})["y"]
    want = x / np.maximum(np.abs(x).sum(axis=1, keepdims=True), 1e-30)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_instance_norm_3d():
    x, s, b = rand(2, 3, 4, 3, 5), rand(3), rand(3)
    model = single_node_model(
        "InstanceNormalization", {"x": x}, {"s": s, "b": b}, epsilon=1e-3
    )
    check(model, {"x": x})
