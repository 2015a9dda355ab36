"""LSTM, GRU and RNN on the compiled CPU path against onnxruntime, where the node
conformance cases miss something: bidirectional layers with biases, initial
states and peepholes, layout 1, constant and run-time sequence_lens, clip,
input_forget, both linear_before_reset modes, non-default activation lists, two
threads, and a model exported by torch."""

from __future__ import annotations

import io

import numpy as np
import pytest
from models import run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

import smelt

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent_model(
    op: str,
    *,
    steps: int = 5,
    batch: int = 3,
    width: int = 4,
    hidden: int = 6,
    direction: str = "forward",
    layout: int = 0,
    seq_lens: list[int] | None = None,
    lens_input: bool = False,
    states: bool = False,
    peepholes: bool = False,
    weights_const: bool = True,
    seed: int = 0,
    **attrs,
):
    """(model, feeds) of one recurrent node with random weights and inputs."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    gh = GATES[op] * hidden

    def rand(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    # drawn in layout 0, so that a layout-1 model gets the same numbers as its
    # layout-0 twin (onnxruntime runs layout 0 only)
    batch_first = [1, 0, 2] if layout else [0, 1, 2]

    def state():
        return rand(d, batch, hidden).transpose(batch_first).copy()

    values = {
        "X": rand(steps, batch, width).transpose(batch_first).copy(),
        "W": rand(d, gh, width),
        "R": rand(d, gh, hidden),
        "B": rand(d, 2 * gh),
    }
    names = ["X", "W", "R", "B", "", "", "", ""]
    if seq_lens is not None:
        values["sequence_lens"] = np.array(seq_lens, np.int32)
        names[4] = "sequence_lens"
    if states:
        values["initial_h"] = state()
        names[5] = "initial_h"
        if op == "LSTM":
            values["initial_c"] = state()
            names[6] = "initial_c"
    if peepholes:
        values["P"] = rand(d, 3 * hidden)
        names[7] = "P"
    names = names[: max(i for i, n in enumerate(names) if n) + 1]
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(
        op, names, outputs, hidden_size=hidden, direction=direction, **attrs
    )
    if layout:
        node.attribute.append(helper.make_attribute("layout", 1))
    runtime = {"X"} | ({"sequence_lens"} if lens_input else set())
    if not weights_const:
        runtime |= {n for n in values if n != "sequence_lens"}
    kind = {
        np.dtype(np.float32): TensorProto.FLOAT,
        np.dtype(np.int32): TensorProto.INT32,
    }
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, kind[values[n].dtype], values[n].shape)
            for n in values
            if n in runtime
        ],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in values.items() if n not in runtime],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, {n: v for n, v in values.items() if n in runtime}


def check(model, feeds, threads: int = 1, rtol: float = 1e-4, atol: float = 1e-5):
    got = smelt.compile(model, "cpu", threads=threads).run(feeds)
    compare(got, run_onnxruntime(model, feeds), rtol, atol)


def compare(got: dict, want: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)


def check_recurrent(op: str, threads: int = 1, **options) -> None:
    """The compiled model against onnxruntime; a layout-1 one against its layout-0
    twin with the outputs moved batch first."""
    model, feeds = recurrent_model(op, **options)
    got = smelt.compile(model, "cpu", threads=threads).run(feeds)
    if not options.get("layout"):
        compare(got, run_onnxruntime(model, feeds))
        return
    twin, twin_feeds = recurrent_model(op, **{**options, "layout": 0})
    want = run_onnxruntime(twin, twin_feeds)
    perms = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
    compare(got, {n: v.transpose(perms[n]) for n, v in want.items()})


@pytest.mark.parametrize("threads", [1, 2])
def test_lstm_bidirectional_states_peepholes_lens(threads):
    check_recurrent(
        "LSTM", threads, direction="bidirectional", states=True, peepholes=True,
        seq_lens=[5, 2, 4],
    )  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
def test_gru_bidirectional_layout1(threads):
    check_recurrent(
        "GRU", threads, direction="bidirectional", layout=1, states=True,
        seq_lens=[3, 5, 1], linear_before_reset=1, weights_const=False,
    )  # fmt: skip


@pytest.mark.parametrize("before", [0, 1])
def test_gru_reset_modes(before):
    check_recurrent(
        "GRU", direction="reverse", states=True, linear_before_reset=before
    )


def test_lstm_layout1_reverse_clip_input_forget():
    check_recurrent(
        "LSTM", direction="reverse", layout=1, states=True, peepholes=True,
        clip=0.7, input_forget=1,
    )  # fmt: skip


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_runtime_sequence_lens(direction):
    check_recurrent(
        "LSTM", direction=direction, seq_lens=[2, 5, 3], lens_input=True,
        states=True, peepholes=True,
    )  # fmt: skip


def test_lstm_activation_list():
    """Every direction its own functions, parameters consumed in order by the
    functions that take them."""
    check_recurrent(
        "LSTM", direction="bidirectional",
        activations=["HardSigmoid", "ScaledTanh", "Softsign",
                     "Sigmoid", "Elu", "LeakyRelu"],
        activation_alpha=[0.3, 0.8, 1.2, 0.2],
        activation_beta=[0.4, 1.5],
    )  # fmt: skip


@pytest.mark.parametrize(
    "function", ["Relu", "Affine", "ThresholdedRelu", "Softplus", "Tanh", "Sigmoid"]
)
def test_rnn_activations(function):
    """Parameters given for each function: onnxruntime defaults those of Affine,
    ThresholdedRelu and ScaledTanh to 0, smelt to the ONNX operators' defaults."""
    attrs = {
        "Affine": {"activation_alpha": [0.7, 0.5], "activation_beta": [0.2, -0.1]},
        "ThresholdedRelu": {"activation_alpha": [0.1, 0.3]},
    }.get(function, {})
    check_recurrent(
        "RNN", direction="bidirectional", activations=[function] * 2, states=True,
        **attrs,
    )  # fmt: skip


def test_gru_activation_list_with_clip():
    check_recurrent(
        "GRU", activations=["HardSigmoid", "Softsign"], clip=1.5, states=True
    )


@pytest.mark.parametrize(
    "op, options",
    [
        ("LSTM", {"direction": "bidirectional", "peepholes": True,
                  "seq_lens": [4, 1, 5], "clip": 0.9}),
        ("GRU", {"direction": "reverse", "seq_lens": [2, 5, 3], "lens_input": True}),
        ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}),
        ("RNN", {"direction": "bidirectional",
                 "activations": ["Softsign", "Relu"]}),
    ],
)  # fmt: skip
def test_reference_kernel(op, options):
    """The reference executor (the constant folder and every pass's oracle)."""
    from smelt.frontend.onnx import import_model
    from smelt.reference.executor import run_graph

    model, feeds = recurrent_model(op, states=True, **options)
    compare(run_graph(import_model(model), feeds), run_onnxruntime(model, feeds))


def test_torch_lstm_gru_batch_first():
    """A model exported by torch: a 2-layer bidirectional LSTM (batch_first) and a
    GRU (linear_before_reset = 1) over its output."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(8, 12, num_layers=2, batch_first=True,
                                      bidirectional=True)  # fmt: skip
            self.gru = torch.nn.GRU(24, 10, batch_first=True)

        def forward(self, x):
            y, _ = self.lstm(x)
            z, h = self.gru(y)
            return z, h

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 7, 8)
    buffer = io.BytesIO()
    torch.onnx.export(
        net, (x,), buffer, dynamo=False, opset_version=17,
        input_names=["x"], output_names=["z", "h"],
    )  # fmt: skip
    import onnx

    model = onnx.load_from_string(buffer.getvalue())
    feeds = {"x": x.numpy()}
    check(model, feeds)
    with torch.no_grad():
        z, _ = net(x)
    got = smelt.compile(model, "cpu").run(feeds)
    np.testing.assert_allclose(got["z"], z.numpy(), rtol=1e-4, atol=1e-5)
