"""Reference kernels of the graph dialect's recurrent layers (LSTM, GRU, RNN time
loops), step by step as the ONNX equations write them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from smelt.dialects import graph as g
from smelt.reference.executor import widened
from smelt.registry import Table

KERNELS = Table()  # listed in reference/kernels.py
kernel = KERNELS.register

Fn = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def activation(name: str, alpha: float, beta: float) -> Fn:
    """The ONNX recurrent activation `name` with its parameters."""
    table: dict[str, Fn] = {
        "Relu": lambda x: np.maximum(x, 0),
        "Tanh": np.tanh,
        "Sigmoid": _sigmoid,
        "Affine": lambda x: alpha * x + beta,
        "LeakyRelu": lambda x: np.where(x >= 0, x, alpha * x),
        "ThresholdedRelu": lambda x: np.where(x >= alpha, x, 0),
        "ScaledTanh": lambda x: alpha * np.tanh(beta * x),
        "HardSigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "Elu": lambda x: np.where(x >= 0, x, alpha * (np.exp(x) - 1)),
        "Softsign": lambda x: x / (1 + np.abs(x)),
        "Softplus": lambda x: np.log1p(np.exp(x)),
    }
    return table[name]


@kernel(g.LstmScanOp, g.GruScanOp, g.RnnScanOp)
def _recurrence(op: g.RecurrenceOp, args: list[np.ndarray]) -> list[np.ndarray]:
    dtype = args[0].dtype
    xw, r, h0 = (widened(a) for a in args[:3])
    extra = [widened(a) for a in args[3 : 3 + len(op.extra_shapes(0, 0, 0))]]
    lens = args[-1] if op.seq_lens is not None else None
    d_count, steps, batch, _ = xw.shape
    hidden = r.shape[1]
    clip = op.attr("clip")
    limit = (lambda x: np.clip(x, -clip, clip)) if clip is not None else (lambda x: x)
    y = np.zeros((steps, d_count, batch, hidden), xw.dtype)
    y_h = np.zeros((d_count, batch, hidden), xw.dtype)
    y_c = np.zeros((d_count, batch, hidden), xw.dtype)
    for d, reverse in enumerate(g.directions(op.attr("direction"))):
        fs = [activation(*spec) for spec in op.functions(d)]
        for b in range(batch):
            n = steps if lens is None else int(np.clip(lens[b], 0, steps))
            h = h0[d, b]
            c = extra[0][d, b] if isinstance(op, g.LstmScanOp) else None
            for s in range(n):
                t = n - 1 - s if reverse else s
                x, rh = xw[d, t, b], h @ r[d]
                if isinstance(op, g.LstmScanOp):
                    h, c = _lstm(op, fs, limit, x, rh, c, extra[1][d], hidden)
                elif isinstance(op, g.GruScanOp):
                    h = _gru(op, fs, limit, x, h, r[d], extra[0][d], hidden)
                else:
                    h = fs[0](limit(x + rh))
                y[t, d, b] = h
            y_h[d, b] = h
            if c is not None:
                y_c[d, b] = c
    outs = [y, y_h] + ([y_c] if isinstance(op, g.LstmScanOp) else [])
    return [o.astype(dtype) for o in outs]


def _lstm(op, fs, limit, x, rh, c, p, hidden):  # noqa: ANN001, ANN202
    f, g_, h_ = fs
    gate = [x[k * hidden : (k + 1) * hidden] + rh[k * hidden : (k + 1) * hidden]
            for k in range(4)]  # fmt: skip
    pi, po, pf = p[:hidden], p[hidden : 2 * hidden], p[2 * hidden :]
    i = f(limit(gate[0] + pi * c))
    forget = 1 - i if op.attr("input_forget") else f(limit(gate[2] + pf * c))
    c = forget * c + i * g_(limit(gate[3]))
    o = f(limit(gate[1] + po * c))
    return o * h_(c), c


def _gru(op, fs, limit, x, h, r, rbh, hidden):  # noqa: ANN001, ANN202
    f, g_ = fs
    rz = h @ r[:, : 2 * hidden]
    z = f(limit(x[:hidden] + rz[:hidden]))
    reset = f(limit(x[hidden : 2 * hidden] + rz[hidden:]))
    rh = r[:, 2 * hidden :]
    if op.attr("linear_before_reset"):
        candidate = x[2 * hidden :] + reset * (h @ rh + rbh)
    else:
        candidate = x[2 * hidden :] + (reset * h) @ rh + rbh
    return (1 - z) * g_(limit(candidate)) + z * h
