"""ConvTranspose by sub-pixel decomposition (frontend/onnx_conv_transpose_phases.py,
issue #30) against onnxruntime: strides 1-3, kernels 2-4, pads, output_padding,
dilations, groups, output_shape, 1-D, 2-D and 3-D, through the NCHW conv (O1) and the
NHWC implicit GEMM (O2); a weight computed from the inputs; and the structure:
convs over the input itself (no zero-inserted copy) that do the op's own
multiply-adds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.ir import BlockArgument

import smelt
from smelt.dialects import graph
from smelt.frontend.onnx import import_model

RNG = np.random.default_rng(30)
C_IN = 4


def _cases(rank: int) -> list[dict]:
    """Attributes per node: every stride x kernel with pads, and around them
    output_padding, dilations, groups, asymmetric pads and output_shape."""
    cases = []
    for s, k in itertools.product((1, 2, 3), (2, 3, 4)):
        pad = (k - 1) // 2
        cases.append(dict(strides=[s] * rank, kernel=k))
        cases.append(dict(strides=[s] * rank, kernel=k, pads=[pad, k - 1 - pad] * 1
                          if rank == 1 else [pad, 0, k - 1 - pad, 1]))
        cases.append(dict(strides=[s] * rank, kernel=k, group=2,
                          output_padding=[s - 1] * rank, pads=[pad] * 2 * rank))
        cases.append(dict(strides=[s] * rank, kernel=k, dilations=[2] * rank,
                          output_padding=[s - 1] * rank, pads=[k - 1] * 2 * rank))
    mixed = [3, 2][:rank] if rank == 2 else [2]
    cases.append(dict(strides=mixed, kernel=3, dilations=[3, 1][:rank], group=4))
    cases.append(dict(strides=[2] * rank, kernel=3, output_shape=[12, 14][:rank]))
    cases.append(dict(strides=[2] * rank, kernel=4, auto_pad="SAME_UPPER"))
    cases.append(dict(strides=[3] * rank, kernel=2, pads=[5] * 2 * rank))
    cases.append(dict(strides=[2] * rank, kernel=4, group=4, pads=[1] * 2 * rank))
    return cases  # fmt: skip


# 3-D: the depth as phases of 2-D ConvTransposes (fewer cases: one compile each
# is slower)
CASES_3D = [
    dict(strides=[2, 2, 2], kernel=2),
    dict(strides=[2, 1, 2], kernel=3, pads=[1, 0, 1, 0, 1, 1],
         output_padding=[1, 0, 1]),
    dict(strides=[3, 2, 1], kernel=4, dilations=[2, 1, 2], pads=[2, 1, 0, 3, 1, 0]),
    dict(strides=[1, 2, 2], kernel=3, group=2, dilations=[2, 1, 1]),
    dict(strides=[3, 3, 3], kernel=2, group=4, pads=[4, 0, 0, 0, 0, 4]),
    dict(strides=[2, 2, 2], kernel=3, auto_pad="SAME_LOWER"),
]  # fmt: skip


def _model(rank: int, cases: list[dict], weights_as_inputs: bool = False):
    spatial = [5, 6, 4][:rank] if rank < 3 else [3, 4, 5]
    nodes, inits, inputs, feeds = [], [], [], {}
    x = RNG.standard_normal((2, C_IN, *spatial)).astype(np.float32)
    inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape))
    feeds["x"] = x
    for i, case in enumerate(cases):
        attrs = dict(case)
        k = attrs.pop("kernel")
        group = attrs.get("group", 1)
        og = 6 // group if group < 4 else 1
        w = RNG.standard_normal((C_IN, og, *[k] * rank)).astype(np.float32)
        b = RNG.standard_normal(og * group).astype(np.float32)
        if weights_as_inputs:
            inputs.append(helper.make_tensor_value_info(f"w{i}", TensorProto.FLOAT,
                                                        w.shape))  # fmt: skip
            feeds[f"w{i}"] = w
        else:
            inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(b, f"b{i}"))
        nodes.append(helper.make_node("ConvTranspose", ["x", f"w{i}", f"b{i}"],
                                      [f"y{i}"], name=f"ct{i}", **attrs))  # fmt: skip
    outputs = [helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None)
               for n in nodes]  # fmt: skip
    g = helper.make_graph(nodes, "ct", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), feeds


def _check(model: onnx.ModelProto, feeds: dict, level: str) -> None:
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    want = session.run(None, feeds)
    got = smelt.compile(model, level=level).run(feeds)
    for out, w in zip(model.graph.output, want, strict=True):
        y = got[out.name]
        assert y.shape == w.shape, out.name
        np.testing.assert_allclose(y, w, rtol=1e-4, atol=1e-4, err_msg=out.name)


@pytest.mark.parametrize("level", ["O1", "O2"])
@pytest.mark.parametrize("rank", [1, 2])
def test_conv_transpose_grid_matches_onnxruntime(rank, level):
    _check(*_model(rank, _cases(rank)), level)


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_conv_transpose_3d_matches_onnxruntime(level):
    _check(*_model(3, CASES_3D), level)


def test_conv_transpose_with_computed_weights():
    cases = [c for c in _cases(2) if c["strides"][0] > 1][::3]
    _check(*_model(2, cases, weights_as_inputs=True), "O2")


def _convs(model: onnx.ModelProto) -> list[graph.Conv2dOp]:
    module = import_model(model)
    ops = list(module.walk())
    assert not any(isinstance(op, graph.PadOp) for op in ops)
    return [op for op in ops if isinstance(op, graph.Conv2dOp)]


def _multiply_adds(conv: graph.Conv2dOp) -> int:
    out = graph.shape_of(conv.result)
    _, cg, kh, kw = graph.shape_of(conv.weight)
    return math.prod(out) * cg * kh * kw


@pytest.mark.parametrize("k, pads, border", [(2, 0, 0), (4, 1, 1), (3, 1, 0)])
def test_convs_over_the_input_itself(k, pads, border):
    """A stride-2 ConvTranspose is convs whose operand is the model input (no
    pad op, no zero insertion) that do the op's own multiply-adds,
    c_in·c_out·k²·H·W, plus `border` phase rows and columns that the pads cut in
    part: one conv with the phases as channels when 2 divides the kernel, else
    one per phase with its own taps (k = 3: 2x2, 2x1, 1x2 and 1x1)."""
    h, w = 5, 6
    model, _ = _model(2, [dict(strides=[2, 2], kernel=k, pads=[pads] * 4)])
    convs = _convs(model)
    assert len(convs) == (1 if k % 2 == 0 else 4)
    assert all(isinstance(c.input, BlockArgument) for c in convs)  # x itself
    real = 2 * C_IN * 6 * k * k * h * w
    zero_inserted = 2 * 6 * C_IN * k * k * math.prod(
        (n - 1) * 2 + k - 2 * pads for n in (h, w)
    )
    done = sum(_multiply_adds(c) for c in convs)
    assert done == real * (h + border) * (w + border) // (h * w)
    assert done < zero_inserted / 2.5
