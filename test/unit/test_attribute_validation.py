"""Attributes and input shapes that break an op's rules are refused at import with
one InvalidModel that names the node, the attribute and what is expected (issue
#33): smelt ran LRN size 0, Transpose perm [1, 0, -1], a LayerNormalization scale
of the wrong length, over-cropping Pad pads and a Conv kernel larger than its input
and returned numbers. onnxruntime is the oracle: each refusal is checked against
its refusal, each accepted edge case against its output."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import InvalidModel

ort.set_default_logger_severity(4)
RNG = np.random.default_rng(33)
X4 = ("x", [2, 3, 4, 4])
X3 = ("x", [2, 3, 4])


def model(nodes, inputs, inits=(), opset=19, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op: str, inputs: list[str], outputs=("y",), **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, list(outputs), name="probe", **attrs)


def ones(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


def ints(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def feeds(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    known = {t.name for t in m.graph.initializer}
    return {
        i.name: RNG.standard_normal(
            [d.dim_value for d in i.type.tensor_type.shape.dim]
        ).astype(np.float32)
        for i in m.graph.input
        if i.name not in known
    }


def ort_run(m: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(
        m.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, inputs)


# (id, model, words the message must hold besides the node's name)
REFUSED = [
    ("lrn-size-0", model([node("LRN", ["x"], size=0)], [X4]), ["'size'", "positive"]),
    (
        "lrn-size-neg",
        model([node("LRN", ["x"], size=-1)], [X4]),
        ["'size'", "positive"],
    ),
    (
        "transpose-negative-perm",
        model([node("Transpose", ["x"], perm=[1, 0, -1])], [X3]),
        ["'perm'", "[1, 0, -1]", "permutation"],
    ),
    (
        "transpose-repeated-perm",
        model([node("Transpose", ["x"], perm=[0, 0, 1])], [X3]),
        ["'perm'", "permutation"],
    ),
    (
        "transpose-perm-out-of-range",
        model([node("Transpose", ["x"], perm=[0, 1, 3])], [X3]),
        ["'perm'", "permutation"],
    ),
    (
        "transpose-perm-too-short",
        model([node("Transpose", ["x"], perm=[0, 1])], [X3]),
        ["perm [0, 1]", "rank is 3"],
    ),
    (
        "layer-norm-scale-length",
        model(
            [node("LayerNormalization", ["x", "s", "b"])],
            [X3],
            [("s", ones(3)), ("b", ones(4))],
        ),
        ["Scale", "[3]", "X.shape[axis:] = [4]"],
    ),
    (
        "layer-norm-bias-length",
        model(
            [node("LayerNormalization", ["x", "s", "b"])],
            [X3],
            [("s", ones(4)), ("b", ones(3))],
        ),
        ["B has shape [3]", "X.shape[axis:] = [4]"],
    ),
    (
        "batch-norm-scale-length",
        model(
            [node("BatchNormalization", ["x", "s", "b", "m", "v"])],
            [X4],
            [("s", ones(2)), ("b", ones(3)), ("m", ones(3)), ("v", ones(3))],
        ),
        ["scale has shape [2]", "[3]"],
    ),
    (
        "instance-norm-scale-length",
        model(
            [node("InstanceNormalization", ["x", "s", "b"])],
            [X4],
            [("s", ones(2)), ("b", ones(3))],
        ),
        ["scale has shape [2]", "[3]"],
    ),
    (
        "pad-negative-extent",
        model([node("Pad", ["x", "p"])], [X4], [("p", ints(0, 0, 0, -3, 0, 0, 0, -2))]),
        ["pads", "axis 3", "extent of -1"],
    ),
    (
        "pad-edge-nothing-to-copy",
        model(
            [node("Pad", ["x", "p"], mode="edge")],
            [X3],
            [("p", ints(0, 0, -5, 0, 0, 2))],
        ),
        ["pads", "mode 'edge'", "axis 2"],
    ),
    (
        "pad-wrap-cropped-to-nothing",
        model(
            [node("Pad", ["x", "p"], mode="wrap")],
            [X3],
            [("p", ints(0, 0, -2, 0, 0, -2))],
        ),
        ["pads", "mode 'wrap'"],
    ),
    (
        "pad-wrong-count",
        model([node("Pad", ["x", "p"])], [X4], [("p", ints(0, 0, 1, 1))]),
        ["pads has 4 values", "needs 8"],
    ),
    (
        "conv-dilated-kernel-larger-than-input",
        model(
            [node("Conv", ["x", "w"], dilations=[3, 3])],
            [X4],
            [("w", ones(1, 3, 3, 3))],
        ),
        ["kernel_shape [3, 3]", "dilations [3, 3]", "spans 7", "padded input"],
    ),
    (
        "conv-kernel-larger-than-input",
        model(
            [node("Conv", ["x", "w"], strides=[2, 2])], [X4], [("w", ones(1, 3, 5, 5))]
        ),
        ["kernel_shape [5, 5]", "spans 5", "more than the 4"],
    ),
    (
        "conv-1d-kernel-larger-than-padded-input",
        model(
            [node("Conv", ["x", "w"], pads=[1, 1], dilations=[2])],
            [X3],
            [("w", ones(1, 3, 4))],
        ),
        ["kernel_shape [4]", "spans 7", "more than the 6"],
    ),
    (
        "conv-integer-kernel-larger-than-input",
        model(
            [node("Conv", ["x", "w"])],
            [("x", [1, 1, 3, 3])],
            [("w", ones(1, 1, 4, 4))],
        ),
        ["kernel_shape [4, 4]", "padded input"],
    ),
    (
        "conv-group-0",
        model([node("Conv", ["x", "w"], group=0)], [X4], [("w", ones(1, 3, 3, 3))]),
        ["'group'", "positive"],
    ),
    (
        "conv-transpose-group-0",
        model(
            [node("ConvTranspose", ["x", "w"], group=0)],
            [X4],
            [("w", ones(3, 1, 2, 2))],
        ),
        ["'group'", "positive"],
    ),
    (
        "conv-transpose-pads-crop-everything",
        model(
            [node("ConvTranspose", ["x", "w"], pads=[3, 3, 3, 3])],
            [X4],
            [("w", ones(3, 1, 2, 2))],
        ),
        ["pads", "crop its output", "to nothing"],
    ),
    (
        "max-pool-kernel-past-input",
        model([node("MaxPool", ["x"], kernel_shape=[6, 6])], [X4]),
        ["kernel_shape [6, 6]", "output size would be -1"],
    ),
    (
        "lp-pool-kernel-past-input",
        model([node("LpPool", ["x"], kernel_shape=[7, 7])], [X4]),
        ["kernel_shape [7, 7]", "output size would be -2"],
    ),
    (
        "depth-to-space-blocksize-0",
        model([node("DepthToSpace", ["x"], blocksize=0)], [X4]),
        ["'blocksize'", "positive"],
    ),
    (
        "space-to-depth-blocksize-neg",
        model([node("SpaceToDepth", ["x"], blocksize=-2)], [X4]),
        ["'blocksize'", "positive"],
    ),
    (
        "group-norm-groups-0",
        model(
            [node("GroupNormalization", ["x", "s", "b"], num_groups=0)],
            [X4],
            [("s", ones(3)), ("b", ones(3))],
            opset=21,
        ),
        ["'num_groups'", "positive"],
    ),
    (
        "split-num-outputs-0",
        model([node("Split", ["x"], axis=1, num_outputs=0)], [X4], opset=18),
        ["'num_outputs'", "positive"],
    ),
    (
        "split-num-outputs-not-outputs",
        model(
            [node("Split", ["x"], ("y", "z"), axis=1, num_outputs=3)],
            [X4],
            opset=18,
            outputs=("y", "z"),
        ),
        ["num_outputs 3", "2 outputs"],
    ),
    (
        "split-negative-last-chunk",
        model(
            [node("Split", ["x"], ("y", "z", "u", "v"), axis=2, num_outputs=4)],
            [("x", [1, 1, 5])],
            opset=18,
            outputs=("y", "z", "u", "v"),
        ),
        ["num_outputs 4", "not negative"],
    ),
    (
        "split-sizes-sum",
        model(
            [node("Split", ["x", "s"], ("y", "z"), axis=1)],
            [X4],
            [("s", ints(1, 1))],
            outputs=("y", "z"),
        ),
        ["split [1, 1]", "extent 3"],
    ),
    (
        "split-negative-size",
        model(
            [node("Split", ["x", "s"], ("y", "z"), axis=1)],
            [X4],
            [("s", ints(4, -1))],
            outputs=("y", "z"),
        ),
        ["split [4, -1]", "none negative"],
    ),
    (
        "unsqueeze-repeated-axis",
        model([node("Unsqueeze", ["x", "a"])], [X4], [("a", ints(0, 0))]),
        ["axes [0, 0]", "more than once"],
    ),
    (
        "tile-negative-repeats",
        model([node("Tile", ["x", "r"])], [X4], [("r", ints(1, 1, -1, 1))]),
        ["repeats [1, 1, -1, 1]", "none negative"],
    ),
    (
        "top-k-negative",
        model(
            [node("TopK", ["x", "k"], ("y", "i"))],
            [X4],
            [("k", ints(-1))],
            outputs=("y",),
        ),
        ["K = -1", "[0, 4]"],
    ),
    (
        "flatten-axis",
        model([node("Flatten", ["x"], axis=5)], [X4]),
        ["axis 5", "expected -4 to 4"],
    ),
    (
        "resize-negative-sizes",
        model(
            [node("Resize", ["x", "", "", "z"], mode="nearest")],
            [X4],
            [("z", ints(2, 3, -4, 4))],
        ),
        ["sizes [2, 3, -4, 4]", "positive"],
    ),
    (
        "resize-zero-scale",
        model(
            [node("Resize", ["x", "", "s"], mode="nearest")],
            [X4],
            [("s", np.array([1, 1, 0, 1], np.float32))],
        ),
        ["scales", "positive"],
    ),
    (
        "range-zero-delta",
        model(
            [node("Range", ["a", "b", "c"])],
            [],
            [(n, np.array(v, np.float32)) for n, v in (("a", 0), ("b", 5), ("c", 0))],
        ),
        ["delta is 0"],
    ),
    (
        "constant-of-shape-negative",
        model([node("ConstantOfShape", ["s"])], [], [("s", ints(2, -1))]),
        ["[2, -1]", ">= 0"],
    ),
    (
        "expand-negative",
        model([node("Expand", ["x", "s"])], [X4], [("s", ints(2, 3, -1, 4))]),
        ["cannot expand", "broadcast"],
    ),
    (
        "reshape-two-minus-ones",
        model([node("Reshape", ["x", "s"])], [X4], [("s", ints(-1, -1))]),
        ["target shape [-1, -1]", "one -1"],
    ),
    (
        "reshape-count",
        model([node("Reshape", ["x", "s"])], [X4], [("s", ints(5, 19))]),
        ["cannot reshape", "element counts differ"],
    ),
    (
        "squeeze-non-1",
        model([node("Squeeze", ["x", "a"])], [X4], [("a", ints(1))]),
        ["axes [1]", "extent 1"],
    ),
    (
        "slice-zero-step",
        model(
            [node("Slice", ["x", "s", "e", "a", "t"])],
            [X4],
            [("s", ints(0)), ("e", ints(2)), ("a", ints(1)), ("t", ints(0))],
        ),
        ["step 0", "non-zero"],
    ),
    (
        "slice-repeated-axis",
        model(
            [node("Slice", ["x", "s", "e", "a"])],
            [X4],
            [("s", ints(0, 0)), ("e", ints(2, 2)), ("a", ints(1, 1))],
        ),
        ["named twice", "distinct"],
    ),
    (
        "depth-to-space-channels",
        model([node("DepthToSpace", ["x"], blocksize=2)], [X4]),
        ["3 channels", "multiple of blocksize"],
    ),
    (
        "space-to-depth-extent",
        model([node("SpaceToDepth", ["x"], blocksize=3)], [X4]),
        ["4x4", "blocksize 3x3"],
    ),
    (
        "max-pool-strides-length",
        model([node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[1])], [X4]),
        ["strides [1]", "2 spatial dims"],
    ),
    (
        "deform-conv-kernel-larger-than-input",
        model(
            [node("DeformConv", ["x", "w", "o"])],
            [("x", [1, 1, 3, 3])],
            [("w", ones(1, 1, 4, 4)), ("o", ones(1, 32, 1, 1))],
        ),
        ["kernel_shape [4, 4]", "spans 4", "more than the 3"],
    ),
    (
        "deform-conv-offset-dims",
        model(
            [node("DeformConv", ["x", "w", "o"])],
            [("x", [1, 1, 3, 3])],
            [("w", ones(1, 1, 2, 2)), ("o", ones(1, 8, 3, 3))],
        ),
        ["offset's output dims [3, 3]", "[2, 2]"],
    ),
    (
        "pool-unknown-auto-pad",
        model([node("MaxPool", ["x"], kernel_shape=[2, 2], auto_pad="SAME")], [X4]),
        ["auto_pad 'SAME'", "SAME_UPPER"],
    ),
    (
        "softmax-axis",
        model([node("Softmax", ["x"], axis=4)], [X4]),
        ["axis 4", "expected -4 to 3"],
    ),
]


def _conv_integer(m: onnx.ModelProto) -> onnx.ModelProto:
    """The ConvInteger twin of a one-Conv model (uint8 x and w, int32 y)."""
    n, x, w = m.graph.node[0], m.graph.input[0], m.graph.initializer[0]
    dims = [d.dim_value for d in x.type.tensor_type.shape.dim]
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", list(n.input), list(n.output), name=n.name)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, dims)],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(numpy_helper.to_array(w).astype(np.uint8), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


REFUSED = [
    (i, _conv_integer(m) if i.startswith("conv-integer") else m, words)
    for i, m, words in REFUSED
]


@pytest.mark.parametrize(
    "m, words", [(m, w) for _, m, w in REFUSED], ids=[i for i, _, _ in REFUSED]
)
def test_refused_as_onnxruntime_refuses(m, words):
    inputs = {
        i.name: np.ones(
            [d.dim_value for d in i.type.tensor_type.shape.dim],
            helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type),
        )
        for i in m.graph.input
    }
    with pytest.raises(Exception):  # noqa: B017 (onnxruntime raises many kinds)
        ort_run(m, inputs)
    with pytest.raises(InvalidModel) as error:
        smelt.compile(m)
    message = str(error.value)
    assert f"{m.graph.node[0].op_type} 'probe'" in message
    for word in words:
        assert word in message


# a negative epsilon: onnxruntime runs it (NaN where the variance is smaller);
# smelt refuses it as meaningless, as the issue asks
EPSILON = [
    ("layer-norm", "LayerNormalization", [X3], [("s", ones(4)), ("b", ones(4))], 19),
    (
        "batch-norm",
        "BatchNormalization",
        [X4],
        [("s", ones(3)), ("b", ones(3)), ("m", ones(3)), ("v", ones(3))],
        19,
    ),
    (
        "instance-norm",
        "InstanceNormalization",
        [X4],
        [("s", ones(3)), ("b", ones(3))],
        19,
    ),
    ("group-norm", "GroupNormalization", [X4], [("s", ones(3)), ("b", ones(3))], 21),
]


@pytest.mark.parametrize("epsilon", [-1e-5, float("nan"), float("inf")])
@pytest.mark.parametrize(
    "op, inputs, inits, opset",
    [e[1:] for e in EPSILON],
    ids=[e[0] for e in EPSILON],
)
def test_epsilon_must_be_finite_and_not_negative(op, inputs, inits, opset, epsilon):
    extra = {"num_groups": 3} if op == "GroupNormalization" else {}
    names = ["x", *(n for n, _ in inits)]
    m = model([node(op, names, epsilon=epsilon, **extra)], inputs, inits, opset)
    with pytest.raises(InvalidModel, match=f"{op} 'probe': attribute 'epsilon'"):
        smelt.compile(m)
    zero = model([node(op, names, epsilon=0.0, **extra)], inputs, inits, opset)
    x = feeds(zero)
    np.testing.assert_allclose(
        smelt.compile(zero).run(x)["y"], ort_run(zero, x)[0], rtol=1e-5, atol=1e-5
    )


# edge cases onnxruntime runs: smelt must give its output (shape and values)
ACCEPTED = [
    (
        "pad-crop-to-empty",
        model([node("Pad", ["x", "p"])], [X4], [("p", ints(0, 0, 0, -4, 0, 0, 0, 0))]),
    ),
    (
        # cropping past the far end eats into that end's padding: one pad cell
        "pad-crop-past-the-end",
        model([node("Pad", ["x", "p"])], [X3], [("p", ints(0, 0, -5, 0, 0, 2))]),
    ),
    (
        "pad-crop-past-the-end-value",
        model(
            [node("Pad", ["x", "p", "v"])],
            [X3],
            [("p", ints(0, 0, -6, 0, 0, 3)), ("v", np.array(7, np.float32))],
        ),
    ),
    (
        "pad-crop-and-pad",
        model([node("Pad", ["x", "p"])], [X3], [("p", ints(0, 0, -3, 0, 0, 1))]),
    ),
    (
        "pad-edge-crop-and-pad",
        model(
            [node("Pad", ["x", "p"], mode="edge")],
            [X3],
            [("p", ints(0, -1, -3, 0, 2, 1))],
        ),
    ),
    (
        "pad-wrap-crop-and-pad",
        model(
            [node("Pad", ["x", "p"], mode="wrap")],
            [X3],
            [("p", ints(0, 0, -3, 0, 0, 1))],
        ),
    ),
    (
        "layer-norm-broadcast-params",
        model(
            [node("LayerNormalization", ["x", "s", "b"], axis=-2)],
            [X3],
            [("s", ones(3, 1) * 2), ("b", np.arange(4, dtype=np.float32))],
        ),
    ),
    (
        "layer-norm-params-of-x-shape",
        model(
            [node("LayerNormalization", ["x", "s", "b"])],
            [X3],
            [("s", ones(2, 3, 4)), ("b", ones(1, 1, 4))],
        ),
    ),
    (
        "conv-kernel-equal-to-padded-input",
        model(
            [node("Conv", ["x", "w"], pads=[1, 1, 0, 0])],
            [X4],
            [("w", ones(1, 3, 5, 4))],
        ),
    ),
    (
        "split-more-outputs-than-cells",
        model(
            [node("Split", ["x"], ("y", "z", "u", "v"), axis=1, num_outputs=4)],
            [X4],
            opset=18,
            outputs=("y", "z", "u", "v"),
        ),
    ),
    (
        "squeeze-repeated-axis",
        model([node("Squeeze", ["x", "a"])], [("x", [1, 3])], [("a", ints(0, 0))]),
    ),
    (
        "transpose-default-perm",
        model([node("Transpose", ["x"])], [X3]),
    ),
]


@pytest.mark.parametrize("m", [m for _, m in ACCEPTED], ids=[i for i, _ in ACCEPTED])
def test_accepted_edge_cases_match_onnxruntime(m):
    x = feeds(m)
    want = ort_run(m, x)
    got = smelt.compile(m).run(x)
    names = [o.name for o in m.graph.output]
    for name, w in zip(names, want, strict=True):
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-5)


def test_every_problem_listed_and_the_model_invalid():
    """An invalid node among other problems: one InvalidModel lists them all."""
    nodes = [
        node("Transpose", ["x"], ("t",), perm=[0, 1]),
        helper.make_node("Frobnicate", ["x"], ["y"], name="unknown"),
    ]
    m = model(nodes, [X3])
    with pytest.raises(InvalidModel) as error:
        smelt.compile(m)
    message = str(error.value)
    assert "Transpose 'probe': perm [0, 1]" in message
    assert "Frobnicate" in message
