"""NCHW convs (no graph-convert-layout) as a GEMM per image and group
(lowering/lower_conv_nchw.py), unscheduled (O1) and through the CPU schedule
(O2's loop passes, 1 and 2 threads), against onnxruntime: wide rows for stride 1
(pads, dilations, asymmetric pads, 1x1 in place), im2col for other strides,
groups, depthwise (the window loops), channels > kc, fused epilogues (relu,
a residual add)."""

from __future__ import annotations

import numpy as np
import pytest
from models import rel_error, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.instrument import module_text

# (N, C, H, W, O, kernel, strides, pads, dilations, group)
CONVS = [
    (1, 3, 9, 11, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),  # im2col
    (2, 5, 7, 6, 17, (3, 2), (1, 1), (0, 1, 2, 0), (1, 1), 1),  # wide, asym pads
    (1, 16, 6, 6, 40, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1 in place
    (1, 12, 5, 5, 12, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12),  # depthwise
    (1, 8, 7, 7, 24, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 4),  # grouped 1x1
    (1, 6, 9, 9, 9, (3, 3), (2, 1), (2, 2, 2, 2), (2, 2), 3),  # grouped, dilated
    (1, 300, 4, 4, 20, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),  # channels > kc
    (1, 2, 8, 8, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # 3 outputs per group
    (1, 7, 12, 19, 70, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 1),  # wide, dilated
    (2, 10, 15, 15, 33, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),  # 1x1 strided
    (1, 3, 23, 23, 16, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), 1),  # resnet stem
    (1, 64, 14, 14, 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
]
NCHW_O2 = pipelines.preset("cpu", "O2").replace(pipelines.NHWC[0] + ",", "")


def _conv_model(case, epilogue: str, seed: int):
    n, c, h, w, o, kernel, strides, pads, dilations, group = case
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((o, c // group, *kernel)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["c" if epilogue else "y"], kernel_shape=kernel,
        strides=strides, pads=pads, dilations=dilations, group=group,
    )  # fmt: skip
    nodes, inputs = [conv], [x]
    if epilogue == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif epilogue == "add":  # a residual input of the conv's output shape
        nodes.append(helper.make_node("Add", ["c", "r"], ["y"]))
        inputs.append(
            helper.make_tensor_value_info("r", TensorProto.FLOAT, _out_shape(case))
        )
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph(nodes, "conv", inputs, [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _out_shape(case) -> list[int]:
    n, _, h, w, o, kernel, strides, pads, dilations, _ = case
    sizes = [
        (size + pads[d] + pads[d + 2] - dilations[d] * (kernel[d] - 1) - 1)
        // strides[d] + 1
        for d, size in enumerate((h, w))
    ]
    return [n, o, *sizes]


def _feeds(case, model=None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((*case[:2], *case[2:4])).astype(np.float32)}
    if model is not None and len(model.graph.input) > 1:
        feeds["r"] = rng.standard_normal(_out_shape(case)).astype(np.float32)
    return feeds


def _epilogue(case: int) -> str:
    return ("relu", "", "add")[case % 3]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("level", ["O1", "nchw-O2"])
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_nchw_conv(case: int, level: str, threads: int) -> None:
    if level == "O1" and threads == 2:
        pytest.skip("O1 runs no loop in parallel: the 1-thread case covers it")
    model = _conv_model(CONVS[case], _epilogue(case), seed=case)
    feeds = _feeds(CONVS[case], model)
    if level == "O1":
        compiled = smelt.compile(model, "cpu", level="O1")
    else:
        spec = pipelines.preset("cpu", "O2", threads).replace(
            pipelines.NHWC[0] + ",", ""
        )
        compiled = smelt.compile(model, "cpu", pipeline=spec)
    ours = compiled.run(feeds)["y"]
    theirs = run_onnxruntime(model, feeds)["y"]
    assert ours.shape == theirs.shape
    assert rel_error(ours, theirs) <= 1e-5


@pytest.mark.parametrize("case", [0, 1, 2, 6, 11])
def test_nchw_conv_is_scheduled(case: int) -> None:
    """The GEMM form's band is a conv2d pattern that loop-schedule tiles and
    vectorizes, with the weights packed at compile time (before it, NCHW convs
    got no schedule: light_resnet50 12.7x slower without graph-convert-layout);
    depthwise convs keep the window loops."""
    model = _conv_model(CONVS[case], "relu", seed=case)
    text = module_text(lower(import_graph(model), NCHW_O2))
    conv = text[text.index("func.func @fused_conv2d") :]
    conv = conv[: conv.index("func.return")]
    assert 'loop.pattern = "conv2d"' in conv, conv
    assert '"m.2"' in conv or '"n.1"' in conv, conv  # tiled by the schedule
    assert "vector.fma" in conv or "vector.load" in conv, conv
    strided = CONVS[case][6] != (1, 1)
    assert ("conv2d_im2col" in text) == strided
    # the weights (A) packed at compile time into a 1-D constant, not read as
    # [O, Cg·KH·KW] rows
    _, c, _, _, o, (kh, kw), *_, group = CONVS[case]
    header = conv[: conv.index("{")]
    assert f"memref<{o}x{c // group * kh * kw}xf32>" not in header, header


def test_depthwise_keeps_window_loops() -> None:
    model = _conv_model(CONVS[3], "relu", seed=3)
    text = module_text(lower(import_graph(model), NCHW_O2))
    assert "conv2d_im2col" not in text
    conv = text[text.index("func.func @fused_conv2d") :]
    assert 'loop.pattern = "conv2d"' not in conv[: conv.index("func.return")]
