"""Depthwise f32 convs (group = C_in) against onnxruntime at 1e-5 relative: the NHWC
register form (lowering/lower_conv_dw.py: taps unrolled, partial sums, fused
epilogue) at O2 on 1 and 2 threads, 3x3 / 5x5 / 7x7 windows, strides 1 and 2,
symmetric and asymmetric pads, dilation, odd channel counts (a vector tail),
channel blocks (weights over 16 KiB), a
channel multiplier of 2 (C_out = 2·C_in, the grouped path), with BatchNorm folded
and HardSwish / Relu6 (Clip) / HardSigmoid epilogues, and a batch of 2."""

from __future__ import annotations

import numpy as np
import pytest
from models import rel_error, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import smelt

# (batch, channels, h, w, kernel, stride, pads (t, l, b, r), dilation, multiplier, act)
CASES = [
    (1, 32, 20, 20, 3, 1, (1, 1, 1, 1), 1, 1, "HardSwish"),
    (1, 48, 21, 19, 3, 2, (1, 1, 1, 1), 1, 1, "HardSwish"),
    (1, 64, 14, 14, 5, 1, (2, 2, 2, 2), 1, 1, "HardSwish"),
    (1, 40, 15, 15, 5, 2, (2, 2, 2, 2), 1, 1, "Relu6"),
    (1, 24, 16, 16, 7, 1, (3, 3, 3, 3), 1, 1, "HardSigmoid"),
    (1, 17, 13, 11, 3, 1, (1, 1, 1, 1), 1, 1, "HardSwish"),  # odd channels
    (1, 33, 12, 12, 3, 2, (0, 1, 1, 0), 1, 1, "Relu6"),  # asymmetric pads
    (1, 20, 18, 18, 3, 1, (2, 2, 2, 2), 2, 1, "HardSwish"),  # dilation 2
    (1, 3, 9, 9, 3, 1, (0, 0, 0, 0), 1, 1, "none"),  # no pads, 3 channels
    (1, 16, 4, 5, 7, 1, (3, 3, 3, 3), 1, 1, "HardSwish"),  # no interior pixel
    (2, 19, 10, 10, 5, 1, (2, 2, 2, 2), 1, 1, "HardSwish"),  # batch 2
    (1, 192, 14, 14, 5, 1, (2, 2, 2, 2), 1, 1, "HardSwish"),  # 3 blocks of 64
    (1, 96, 9, 9, 7, 2, (3, 3, 3, 3), 1, 1, "Relu6"),  # 3 channel blocks of 32
    (1, 16, 12, 12, 3, 1, (1, 1, 1, 1), 1, 2, "HardSwish"),  # multiplier 2
    (1, 7, 11, 11, 3, 2, (1, 1, 1, 1), 1, 2, "Relu6"),  # multiplier 2, odd
]


def _model(case):
    n, c, h, w, k, s, pads, d, mult, act = case
    rng = np.random.default_rng(c * 31 + k)
    o = c * mult
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = rng.standard_normal((o, 1, k, k)).astype(np.float32)
    inits = [numpy_helper.from_array(weights, "w")]
    stats = {"g": rng.random(o) + 0.5, "b": rng.standard_normal(o),
             "m": rng.standard_normal(o) * 0.1, "v": rng.random(o) + 0.5}  # fmt: skip
    inits += [
        numpy_helper.from_array(v.astype(np.float32), n) for n, v in stats.items()
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["t"], group=c, kernel_shape=[k, k],
                         strides=[s, s], pads=list(pads), dilations=[d, d]),
        helper.make_node("BatchNormalization", ["t", "g", "b", "m", "v"],
                         ["u" if act != "none" else "y"]),
    ]  # fmt: skip
    if act == "Relu6":
        inits += [numpy_helper.from_array(np.float32(0), "lo"),
                  numpy_helper.from_array(np.float32(6), "hi")]  # fmt: skip
        nodes.append(helper.make_node("Clip", ["u", "lo", "hi"], ["y"]))
    elif act != "none":
        nodes.append(helper.make_node(act, ["u"], ["y"]))
    graph = helper.make_graph(nodes, "dw", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}
    return model, feeds


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "x".join(map(str, c[1:6])) + c[-1]
)
def test_depthwise_o2(case, threads):
    model, feeds = _model(case)
    compiled = smelt.compile(model, "cpu", level="O2", threads=threads)
    ours = compiled.run(feeds)["y"]
    theirs = run_onnxruntime(model, feeds)["y"]
    assert rel_error(ours, theirs) <= 1e-5


def test_register_form_has_no_memory_accumulation():
    """The O2 depthwise kernel keeps its sums in registers and guards its border
    itself: no padded copy kernel, no vector load of its output (no load-add-store
    per tap), every nest vectorized (vector stores only) with the epilogue inside."""
    from smelt.compiler import pipelines
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.instrument import module_text

    model, _ = _model(CASES[2])
    module = lower(import_graph(model), pipelines.preset("cpu", "O2"))
    text = module_text(module)
    assert "conv2d_pad" not in text
    kernel = text[text.index("func.func @fused_conv2d") :]
    kernel = kernel[: kernel.index("func.func", 10)]
    out = kernel[: kernel.index(")")].split("%")[-1].split(":")[0]  # last argument
    assert f"vector.load %{out}[" not in kernel, kernel
    assert kernel.count("vector.store") >= 1 and "memref.store" not in kernel
    assert "arith.maximumf" in kernel and "arith.minimumf" in kernel
