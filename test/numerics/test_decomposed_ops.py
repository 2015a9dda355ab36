"""GridSample, RoiAlign, DeformConv, Col2Im, DFT, STFT, Det, TensorScatter,
MaxUnpool and BitCast (imported as compositions of graph ops) compiled for the CPU,
on cases the ONNX node-conformance set does not cover: against onnx's reference
(the semantics smelt follows) and, where they agree, onnxruntime. Fixed seeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import smelt

RNG = np.random.default_rng(0)


def model(
    op: str,
    inputs: dict[str, np.ndarray],
    constants: dict[str, np.ndarray] | None = None,
    opset: int = 22,
    outputs: int = 1,
    **attrs,
) -> onnx.ModelProto:
    """A one-node model: `inputs` are graph inputs, `constants` initializers; the
    node takes them in that order ("" for an absent one)."""
    constants = constants or {}
    names = [*inputs, *constants]
    out = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, names, out, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(
                k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape
            )
            for k, v in inputs.items()
        ],
        [onnx.ValueInfoProto(name=o) for o in out],
        [numpy_helper.from_array(v, k) for k, v in constants.items() if k],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(
    m: onnx.ModelProto, feeds: dict[str, np.ndarray], tol=1e-5, ort: bool = True
) -> None:
    got = smelt.compile(m, "cpu").run(feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    oracles = [want]
    if ort:
        session = onnxruntime.InferenceSession(
            m.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        oracles.append(session.run(None, feeds))
    for expected in oracles:
        for i, w in enumerate(expected):
            g = got[f"y{i}"]
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize(
    "mode, padding, align, k",
    [
        ("linear", "reflection", 0, 2),  # grid reaching far outside: folds twice
        ("cubic", "zeros", 1, 2),
        ("cubic", "reflection", 0, 2),
        ("nearest", "border", 0, 3),
        ("linear", "border", 1, 3),
    ],
)
def test_grid_sample(mode, padding, align, k):
    x = rand(2, 3, *(5, 4, 3)[:k])
    grid = rand(2, *(3, 4, 2)[:k], k, scale=2.0)  # many points outside [-1, 1]
    m = model("GridSample", {"x": x, "g": grid}, mode=mode,
              padding_mode=padding, align_corners=align)  # fmt: skip
    check(m, {"x": x, "g": grid})


def test_grid_sample_bicubic_border_follows_onnx_reference():
    """Cubic with border padding: onnx's reference clamps the coordinate, then
    each tap; onnxruntime (PyTorch) only the taps. smelt follows the reference."""
    x, grid = rand(1, 2, 4, 5), rand(1, 3, 3, 2, scale=2.0)
    m = model("GridSample", {"x": x, "g": grid}, mode="cubic", padding_mode="border")
    check(m, {"x": x, "g": grid}, ort=False)


@pytest.mark.parametrize("mode, coords", [("avg", "half_pixel"),
                                          ("max", "output_half_pixel")])  # fmt: skip
def test_roi_align(mode, coords):
    x = rand(2, 3, 9, 11)
    rois = RNG.uniform(-3, 12, (5, 4)).astype(np.float32)
    rois[:, 2:] = rois[:, :2] + RNG.uniform(0, 8, (5, 2)).astype(np.float32)
    batch = np.array([0, 1, 1, 0, 1], np.int64)
    m = model("RoiAlign", {"x": x, "r": rois, "b": batch}, opset=16, mode=mode,
              coordinate_transformation_mode=coords, output_height=3,
              output_width=2, sampling_ratio=2, spatial_scale=0.5)  # fmt: skip
    check(m, {"x": x, "r": rois, "b": batch})


def test_roi_align_adaptive_sampling_is_refused():
    x, rois, batch = rand(1, 1, 4, 4), rand(1, 4), np.zeros(1, np.int64)
    m = model("RoiAlign", {"x": x, "r": rois, "b": batch}, opset=16)
    with pytest.raises(smelt.SmeltError, match="sampling_ratio 0"):
        smelt.compile(m, "cpu")


def test_deform_conv_groups_and_mask():
    x, w, b = rand(2, 4, 6, 7), rand(6, 2, 3, 2), rand(6)
    offset, mask = rand(2, 2 * 6 * 2, 3, 7, scale=2.0), rand(2, 2 * 6, 3, 7)
    inputs = {"x": x, "w": w, "o": offset, "b": b, "m": mask}
    m = model("DeformConv", inputs, group=2, offset_group=2, pads=[1, 0, 1, 2],
              strides=[2, 1], dilations=[1, 2], kernel_shape=[3, 2])  # fmt: skip
    check(m, inputs, tol=1e-4)


@pytest.mark.parametrize(
    "image, block, dilations, pads, strides",
    [((7, 6), (3, 2), [2, 1], [1, 0, 2, 1], [2, 3]),
     ((4, 5, 3), (2, 2, 2), [1, 2, 1], [1, 0, 0, 0, 1, 1], [2, 1, 2])],
)  # fmt: skip
def test_col2im(image, block, dilations, pads, strides):
    k = len(image)
    counts = [
        (image[d] + pads[d] + pads[d + k] - dilations[d] * (block[d] - 1) - 1)
        // strides[d] + 1
        for d in range(k)
    ]
    x = rand(2, 3 * int(np.prod(block)), int(np.prod(counts)))
    shapes = {"i": np.array(image, np.int64), "s": np.array(block, np.int64)}
    m = model("Col2Im", {"x": x}, shapes, opset=18, dilations=dilations,
              pads=pads, strides=strides)  # fmt: skip
    check(m, {"x": x}, ort=False)


@pytest.mark.parametrize(
    "parts, length, axis, inverse, onesided",
    [(1, 7, 1, 0, 1), (2, 9, 2, 0, 0), (2, 6, 1, 1, 1), (2, 5, 1, 1, 0),
     (2, None, 2, 0, 1)],
)  # fmt: skip
def test_dft(parts, length, axis, inverse, onesided):
    x = rand(2, 6, 5, parts)
    constants = {"n": np.array(length, np.int64)} if length else {"": None}
    constants["a"] = np.array(axis, np.int64)
    m = model("DFT", {"x": x}, constants, opset=20, inverse=inverse,
              onesided=onesided)  # fmt: skip
    check(m, {"x": x}, tol=1e-4, ort=False)


def test_stft_with_window_and_frame_length():
    signal, window = rand(2, 40, 1), np.hanning(12).astype(np.float32)
    constants = {"step": np.array(5, np.int64)}
    m = model("STFT", {"s": signal}, constants, opset=17)
    node = m.graph.node[0]
    node.input[:] = ["s", "step", "w", "len"]
    m.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [12]))
    m.graph.initializer.append(numpy_helper.from_array(np.array(12, np.int64), "len"))
    check(m, {"s": signal, "w": window}, tol=1e-4)


def test_det_pivots_and_singular_matrices():
    x = rand(4, 5, 5)
    x[1, 0] = 0.0  # a zero first pivot candidate
    x[2, 3] = 2 * x[2, 1]  # singular
    x[3] = np.eye(5)[[2, 0, 1, 4, 3]]  # a permutation: det = -1
    m = model("Det", {"x": x})
    check(m, {"x": x}, tol=1e-5)


@pytest.mark.parametrize("mode, axis, where", [("circular", 2, [-3, 7, 2]),
                                               ("linear", 1, [0, 3, 1])])  # fmt: skip
def test_tensor_scatter(mode, axis, where):
    cache = rand(3, 6, 5, 4)
    shape = list(cache.shape)
    shape[axis] = 3
    feeds = {"p": cache, "u": rand(*shape), "w": np.array(where, np.int64)}
    check(model("TensorScatter", feeds, opset=24, mode=mode, axis=axis), feeds,
          ort=False)  # fmt: skip


def test_max_unpool_after_max_pool():
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("MaxUnpool", ["p", "i"], ["y0"], kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    x = rand(2, 3, 7, 7)
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [onnx.ValueInfoProto(name="y0")],
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    check(m, {"x": x})


def test_bitcast_round_trip_through_integer_ops():
    """|x| by clearing the sign bit of x's bits, and f16 bits seen as bf16."""
    nodes = [
        helper.make_node("BitCast", ["x"], ["i"], to=TensorProto.INT32),
        helper.make_node("BitwiseAnd", ["i", "m"], ["j"]),
        helper.make_node("BitCast", ["j"], ["y0"], to=TensorProto.FLOAT),
        helper.make_node("BitCast", ["h"], ["y1"], to=TensorProto.BFLOAT16),
    ]
    x = np.array([-1.5, 2.0, -0.0, np.inf, -3e-38], np.float32)
    h = np.array([1.0, -2.0, 0.5, 65504.0], np.float16)
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
         helper.make_tensor_value_info("h", TensorProto.FLOAT16, h.shape)],
        [onnx.ValueInfoProto(name="y0"), onnx.ValueInfoProto(name="y1")],
        [numpy_helper.from_array(np.array(0x7FFFFFFF, np.int32), "m")],
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    got = smelt.compile(m, "cpu").run({"x": x, "h": h})
    np.testing.assert_array_equal(got["y0"], np.abs(x))
    assert got["y1"].tobytes() == h.tobytes()
