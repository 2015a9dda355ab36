"""Erf, Tanh and Sigmoid nodes compiled for the CPU: within 2 ulp of the exact
(float64) values over a sweep of every 2048th positive f32 bit pattern and its
negation (2M inputs: subnormals, the branch boundaries, the tails, the values that
round to ±1 or to 0), and the special values ±0, ±inf and NaN exactly.
SMELT_ULP_STRIDE=256 sweeps 16.7M inputs instead (5 s here). A row of 56
leaves 8 elements to loop-vectorize's scalar tail: both the vector and the scalar
forms of the polynomials are checked."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import smelt

STRIDE = int(os.environ.get("SMELT_ULP_STRIDE", "2048"))
ROW = 56
MAX_ULP = 2.0


def _model(op: str, rows: int):
    shape = [rows, ROW]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], op, [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _inputs() -> np.ndarray:
    positive = np.arange(0, 0x7F800000, STRIDE, dtype=np.uint32).view(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32)
    x = np.concatenate([positive, -positive, specials])
    return np.concatenate([x, np.zeros(-x.size % ROW, np.float32)])


def _erf(d: np.ndarray) -> np.ndarray:
    out = np.sign(d)  # |x| > 6: ±1 in float64 already; NaN stays NaN
    inside = np.abs(d) <= 6
    out[inside] = np.vectorize(math.erf, otypes=[np.float64])(d[inside])
    return out


def _sigmoid(d: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-d))


EXACT = {"Erf": _erf, "Tanh": np.tanh, "Sigmoid": _sigmoid}


def ulp_error(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the f32 spacing at the exact value (the smallest
    subnormal at least)."""
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    spacing = np.maximum(spacing, np.finfo(np.float32).smallest_subnormal)
    return np.abs(got.astype(np.float64) - exact) / spacing


@pytest.mark.parametrize("op", ["Erf", "Tanh", "Sigmoid"])
def test_within_two_ulp_and_specials(op):
    x = _inputs()
    compiled = smelt.compile(_model(op, x.size // ROW), "cpu", level="O2", threads=1)
    got = compiled.run({"x": x.reshape(-1, ROW)})["y"].reshape(-1)
    exact = EXACT[op](x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    finite = ~np.isnan(exact)
    err = ulp_error(got[finite], exact[finite])
    worst = int(err.argmax())
    assert err[worst] <= MAX_ULP, (op, float(err[worst]), x[finite][worst])
    # exact at the special values, the sign of zero kept
    special = np.array([0.0, -0.0, np.inf, -np.inf], np.float32)
    want = EXACT[op](special.astype(np.float64)).astype(np.float32)
    at = [int(np.flatnonzero((x == s) & (np.signbit(x) == np.signbit(s)))[0])
          for s in special]  # fmt: skip
    np.testing.assert_array_equal(got[at], want)
    assert np.array_equal(np.signbit(got[at]), np.signbit(want))
