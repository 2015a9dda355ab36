"""Graph dialect: recurrent layers (ONNX LSTM, GRU, RNN) over precomputed input
projections: the sequential part of the layer, one time step after another."""

from __future__ import annotations

from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
)
from xdsl.irdl import (
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_attr_def,
    opt_operand_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from smelt.dialects.graph_base import GraphOp, same_element_type, shape_of, tensor

DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}

# The ONNX activations of the `activations` attribute and their (alpha, beta)
# defaults; None where the function takes no such parameter.
ACTIVATIONS: dict[str, tuple[float | None, float | None]] = {
    "Relu": (None, None),
    "Tanh": (None, None),
    "Sigmoid": (None, None),
    "Affine": (1.0, 0.0),
    "LeakyRelu": (0.01, None),
    "ThresholdedRelu": (1.0, None),
    "ScaledTanh": (1.0, 1.0),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0, None),
    "Softsign": (None, None),
    "Softplus": (None, None),
}


def directions(direction: str) -> tuple[bool, ...]:
    """Per direction of a layer, whether it runs backwards in time."""
    if direction == "bidirectional":
        return (False, True)
    return (direction == "reverse",)


def _expect(what: str, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    if got != want:
        raise VerifyException(f"{what} has shape {list(got)}, expected {list(want)}")


class RecurrenceOp(GraphOp):
    """Base of `graph.lstm_scan`, `graph.gru_scan`, `graph.rnn_scan`.

    Operand `xw` [D, S, B, G*H] holds the input projections X_t*W^T plus the biases
    that add to them, per direction D, time step S, batch B and gate (G gates of
    H units, in ONNX order); `r` [D, H, G*H] is R^T; `h0` [D, B, H] the initial
    hidden state. Results: Y [S, D, B, H] (every step's hidden state, at its time
    position) and Y_h [D, B, H] (the last one). `activations` names, per direction,
    the cell's functions (space separated), `alphas` / `betas` their parameters,
    one per function; `clip` (absent: none) bounds the activation inputs. An
    optional last operand `seq_lens` [B] (i32) stops each batch entry after its
    own length: its Y positions past it are 0 and its Y_h is its last step.
    """

    GATES: ClassVar[int] = 1
    FUNCTIONS: ClassVar[int] = 1
    RESULTS: ClassVar[int] = 2

    direction = attr_def(StringAttr)
    activations = attr_def(StringAttr)
    alphas = attr_def(DenseArrayBase)
    betas = attr_def(DenseArrayBase)
    clip = opt_attr_def(FloatAttr)

    @classmethod
    def extra_shapes(cls, d: int, b: int, h: int) -> list[tuple[int, ...]]:
        """The shapes of the operands between h0 and seq_lens."""
        return []

    @classmethod
    def infer(cls, types: list[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        direction = attrs["direction"]
        if direction not in DIRECTIONS:
            raise VerifyException(f"unknown direction '{direction}'")
        xw = shape_of(types[0])
        if len(xw) != 4:
            raise VerifyException("xw must be [directions, steps, batch, gates]")
        d, s, b, gh = xw
        if d != DIRECTIONS[direction] or gh % cls.GATES:
            raise VerifyException(f"xw shape {list(xw)} does not fit the layer")
        h = gh // cls.GATES
        same_element_type(types[:3], "xw, r and h0")
        _expect("r", shape_of(types[1]), (d, h, gh))
        _expect("h0", shape_of(types[2]), (d, b, h))
        extra = cls.extra_shapes(d, b, h)
        for i, want in enumerate(extra):
            _expect(f"operand {3 + i}", shape_of(types[3 + i]), want)
        rest = types[3 + len(extra) :]
        if len(rest) > 1:
            raise VerifyException("too many operands")
        if rest:
            _expect("seq_lens", shape_of(rest[0]), (b,))
            if rest[0].element_type != i32:
                raise VerifyException("seq_lens must be i32")
        names = attrs["activations"].split()
        if len(names) != cls.FUNCTIONS * d or any(n not in ACTIVATIONS for n in names):
            raise VerifyException(f"bad activations '{attrs['activations']}'")
        if len(attrs["alphas"]) != len(names) or len(attrs["betas"]) != len(names):
            raise VerifyException("alphas and betas need one value per activation")
        et = types[0].element_type
        outs = [tensor(et, (s, d, b, h)), tensor(et, (d, b, h))]
        return outs + [tensor(et, (d, b, h))] * (cls.RESULTS - 2)

    def functions(self, direction: int) -> list[tuple[str, float, float]]:
        """(name, alpha, beta) of each function of the cell in this direction."""
        n = self.FUNCTIONS
        names = self.attr("activations").split()[direction * n : (direction + 1) * n]
        alphas = self.attr("alphas")[direction * n : (direction + 1) * n]
        betas = self.attr("betas")[direction * n : (direction + 1) * n]
        return list(zip(names, alphas, betas))

    @property
    def seq_lens(self):  # noqa: ANN201
        """The seq_lens operand, or None."""
        extra = 3 + len(self.extra_shapes(0, 0, 0))
        return self.operands[extra] if len(self.operands) > extra else None


@irdl_op_definition
class LstmScanOp(RecurrenceOp):
    """ONNX LSTM's time loop: gates i, o, f, c; functions f, g, h; operands c0
    [D, B, H] (initial cell) and p [D, 3H] (peepholes i, o, f); result Y_c.
    `input_forget` = 1 couples the forget gate to 1 - i."""

    name = "graph.lstm_scan"
    GATES: ClassVar[int] = 4
    FUNCTIONS: ClassVar[int] = 3
    RESULTS: ClassVar[int] = 3
    xw = operand_def(TensorType)
    r = operand_def(TensorType)
    h0 = operand_def(TensorType)
    c0 = operand_def(TensorType)
    p = operand_def(TensorType)
    lens = opt_operand_def(TensorType)
    y = result_def(TensorType)
    y_h = result_def(TensorType)
    y_c = result_def(TensorType)
    input_forget = attr_def(IntegerAttr)

    @classmethod
    def extra_shapes(cls, d: int, b: int, h: int) -> list[tuple[int, ...]]:
        return [(d, b, h), (d, 3 * h)]


@irdl_op_definition
class GruScanOp(RecurrenceOp):
    """ONNX GRU's time loop: gates z, r, h; functions f, g; operand rbh [D, H] (the
    recurrent bias of gate h, which `linear_before_reset` = 1 keeps inside r * (.),
    xw holding every other bias)."""

    name = "graph.gru_scan"
    GATES: ClassVar[int] = 3
    FUNCTIONS: ClassVar[int] = 2
    xw = operand_def(TensorType)
    r = operand_def(TensorType)
    h0 = operand_def(TensorType)
    rbh = operand_def(TensorType)
    lens = opt_operand_def(TensorType)
    y = result_def(TensorType)
    y_h = result_def(TensorType)
    linear_before_reset = attr_def(IntegerAttr)

    @classmethod
    def extra_shapes(cls, d: int, b: int, h: int) -> list[tuple[int, ...]]:
        return [(d, h)]


@irdl_op_definition
class RnnScanOp(RecurrenceOp):
    """ONNX RNN's time loop: H_t = f(xw_t + H_{t-1} * R^T)."""

    name = "graph.rnn_scan"
    xw = operand_def(TensorType)
    r = operand_def(TensorType)
    h0 = operand_def(TensorType)
    lens = opt_operand_def(TensorType)
    y = result_def(TensorType)
    y_h = result_def(TensorType)
