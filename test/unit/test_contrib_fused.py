"""The com.microsoft ops of onnxruntime's session optimizer (FusedConv,
FusedGemm, QuickGelu): a model it saved at ORT_ENABLE_EXTENDED, and each
activation alone, compiled for the CPU against onnxruntime. Fixed seeds."""

from __future__ import annotations

import collections

import onnx
import onnxruntime
import pytest
import torch
from test_contrib_ops import check, contrib_model, rand

import smelt
from smelt.errors import UnsupportedModel


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, stride=2)
        self.c3 = torch.nn.Conv2d(8, 8, 1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)
        self.fc2 = torch.nn.Linear(10, 10)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.nn.functional.leaky_relu(self.c2(y), 0.2)
        y = torch.relu(self.c3(y) + y)  # stays Conv, Add, Relu (onnxruntime 1.32)
        y = torch.relu(self.fc(torch.sigmoid(y).flatten(1)))
        z = self.fc2(y)
        return z * torch.sigmoid(1.702 * z)


def test_a_model_saved_by_onnxruntimes_optimizer(tmp_path):
    torch.manual_seed(0)
    net = _Net().eval()
    with torch.no_grad():
        net.b1.running_mean.uniform_(-0.5, 0.5)
        net.b1.running_var.uniform_(0.5, 2.0)
    torch.onnx.export(net, torch.randn(2, 3, 8, 8), str(tmp_path / "net.onnx"),
                      dynamo=False, opset_version=17)  # fmt: skip
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = (
        onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    )
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onnxruntime.InferenceSession(
        str(tmp_path / "net.onnx"), options, providers=["CPUExecutionProvider"]
    )
    model = onnx.load(tmp_path / "optimized.onnx")
    ops = collections.Counter(n.op_type for n in model.graph.node if n.domain)
    assert ops["FusedConv"] == 2 and ops["FusedGemm"] == 1, ops
    assert ops["QuickGelu"] == 1, ops
    name = model.graph.input[0].name
    check(model, {name: rand(2, 3, 8, 8)})


ACTIVATIONS = [
    ("Relu", []), ("Sigmoid", []), ("Tanh", []), ("LeakyRelu", [0.3]),
    ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4]), ("", []),
]  # fmt: skip


@pytest.mark.parametrize("kind, params", ACTIVATIONS)
def test_fused_conv(kind, params):
    x, z = rand(1, 4, 6, 6), rand(1, 6, 3, 3)
    weights = {"w": rand(6, 4, 3, 3, scale=0.3), "b": rand(6)}
    attrs = dict(activation=kind) if kind else {}
    if params:
        attrs["activation_params"] = params
    m = contrib_model("FusedConv", {"x": x, "z": z}, weights,
                      order=["x", "w", "b", "z"], strides=[2, 2], pads=[1, 1, 1, 1],
                      **attrs)  # fmt: skip
    check(m, {"x": x, "z": z})


@pytest.mark.parametrize(
    "kind, attrs",
    [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}),
     ("LeakyRelu", dict(activation_alpha=0.3)),
     ("HardSigmoid", dict(activation_alpha=0.3, activation_beta=0.4))],
)  # fmt: skip
def test_fused_gemm(kind, attrs):
    a = rand(3, 5)
    m = contrib_model("FusedGemm", {"a": a}, {"b": rand(4, 5), "c": rand(4)},
                      activation=kind, transB=1, alpha=0.5, beta=2.0,
                      **attrs)  # fmt: skip
    check(m, {"a": a})


def test_quick_gelu():
    x = rand(2, 7, scale=3.0)
    check(contrib_model("QuickGelu", {"x": x}, alpha=1.5), {"x": x})
    check(contrib_model("QuickGelu", {"x": x}), {"x": x})


def test_an_activation_smelt_lacks_is_refused_naming_it():
    x = rand(1, 2, 4, 4)
    m = contrib_model("FusedConv", {"x": x}, {"w": rand(2, 2, 1, 1)},
                      activation="Softsign")  # fmt: skip
    with pytest.raises(UnsupportedModel, match="FusedConv#0: attribute 'activation'"):
        smelt.compile(m, "cpu")
