"""exp, tanh, erf on f32 vectors (`vector_math.py`): accuracy in ulp and specials;
f32 scalars use the same polynomials (no libm call in the loop)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_llvm_target import parse

from smelt.lowering.llvm.jit import compile_to_native

WIDTH = 8


def vector_kernel(name: str, n: int, t: str = "f32") -> str:
    mt, vt = f"memref<{n}x{t}>", f"vector<{WIDTH}x{t}>"
    return f"""
    func.func @k(%x: {mt}, %y: {mt}) attributes {{loop.kernel}} {{
      loop.for %i = 0 to {n} step {WIDTH} parallel {{
        %v = vector.load %x[%i] : {mt}, {vt}
        %r = math.{name} %v : {vt}
        vector.store %r, %y[%i] : {mt}, {vt}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%x: {mt}, %y: {mt}) {{
      func.call @k(%x, %y) : ({mt}, {mt}) -> ()
      func.return
    }}"""


def scalar_kernel(name: str, n: int, t: str = "f32") -> str:
    mt = f"memref<{n}x{t}>"
    return f"""
    func.func @k(%x: {mt}, %y: {mt}) attributes {{loop.kernel}} {{
      loop.for %i = 0 to {n} step 1 parallel {{
        %v = memref.load %x[%i] : {mt}
        %r = math.{name} %v : {t}
        memref.store %r, %y[%i] : {mt}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%x: {mt}, %y: {mt}) {{
      func.call @k(%x, %y) : ({mt}, {mt}) -> ()
      func.return
    }}"""


def run_vector(name: str, x: np.ndarray, scalar: bool = False, **options) -> np.ndarray:
    n = -(-x.size // WIDTH) * WIDTH
    padded = np.zeros(n, x.dtype)
    padded[: x.size] = x
    out = np.zeros_like(padded)
    t = {np.float32: "f32", np.float16: "f16"}[x.dtype.type]
    text = (scalar_kernel if scalar else vector_kernel)(name, n, t)
    compile_to_native(parse(text), **options).run([padded, out])
    return out[: x.size]


REFERENCE = {
    "exp": np.exp,
    "tanh": np.tanh,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
}


def ulp_error(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the f32 spacing at the exact value."""
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    spacing = np.maximum(spacing, np.float64(np.finfo(np.float32).smallest_subnormal))
    return np.abs(got.astype(np.float64) - exact) / spacing


# max ulp error over the inputs below: about 1 ulp where the function is flat or
# tiny, up to 1.5 where the tanh/erf branches meet
MAX_ULP = {"exp": 2.0, "tanh": 2.0, "erf": 2.0}
RANGES = {"exp": (-104.0, 88.7), "tanh": (-12.0, 12.0), "erf": (-5.0, 5.0)}


FORMS = [(name, scalar) for scalar in (False, True) for name in ("exp", "tanh", "erf")]
IDS = ["exp", "tanh", "erf", "scalar_exp", "scalar_tanh", "scalar_erf"]


@pytest.mark.parametrize(("name", "scalar"), FORMS, ids=IDS)
def test_accuracy_in_ulp(name, scalar):
    rng = np.random.default_rng(0)
    lo, hi = RANGES[name]
    x = np.concatenate(
        [
            rng.uniform(lo, hi, 200_000),
            rng.uniform(-1.5, 1.5, 200_000),
            np.geomspace(1e-30, 2.0, 20_000) * rng.choice([-1, 1], 20_000),
        ]
    ).astype(np.float32)
    got = run_vector(name, x, scalar)
    exact = REFERENCE[name](x.astype(np.float64))
    finite = np.isfinite(exact) & (np.abs(exact) <= np.finfo(np.float32).max)
    err = ulp_error(got[finite], exact[finite])
    worst = float(err.max())
    assert worst <= MAX_ULP[name], (name, worst, x[finite][err.argmax()])


@pytest.mark.parametrize(("name", "scalar"), FORMS, ids=IDS)
def test_specials(name, scalar):
    x = np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 100.0, -100.0, 88.72,
         88.73, -103.0, -105.0, 0.625, -0.625, 1.0, -1.0, 4.0, 9.0, 1e30, 0.55,
         -0.55, 0.9, -0.9, 3.925, 9.1, -9.1, 3e-39, -3e-39],
        np.float32,
    )  # fmt: skip
    got = run_vector(name, x, scalar)
    with np.errstate(over="ignore"):
        exact = REFERENCE[name](x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exact))
    ok = ~np.isnan(exact)
    np.testing.assert_allclose(got[ok], exact[ok], rtol=3e-7, atol=1.5e-45)
    assert np.array_equal(np.signbit(got[ok]), np.signbit(exact[ok])) or name == "exp"


def test_f16_vectors_compute_in_f32():
    x = np.linspace(-4, 4, 101).astype(np.float16)
    for name in ("exp", "tanh", "erf"):
        got = run_vector(name, x)
        exact = REFERENCE[name](x.astype(np.float64)).astype(np.float16)
        np.testing.assert_allclose(got, exact, rtol=1e-3, atol=1e-3)


def test_libm_lanes_when_turned_off():
    from smelt.lowering.llvm.emit import emit_llvm_ir
    from smelt.lowering.llvm.emit_kernel import EmitOptions

    module = parse(vector_kernel("tanh", 16))
    assert "tanhf" not in emit_llvm_ir(module)
    assert "tanhf" in emit_llvm_ir(module, EmitOptions(vector_math=False))


def test_scalar_exp_tanh_erf_call_no_libm():
    """A loop over a scalar erf (one loop-vectorize left alone) stays free of calls,
    so LLVM's loop vectorizer can vectorize it (a quantized GELU's kernel)."""
    from smelt.lowering.llvm.emit import emit_llvm_ir

    for name in ("exp", "tanh", "erf"):
        text = emit_llvm_ir(parse(scalar_kernel(name, 16)))
        assert f"{name}f" not in text and f"llvm.{name}" not in text
    for name in ("tanh", "erf"):  # f64: libm, as before
        f64 = emit_llvm_ir(parse(scalar_kernel(name, 16, "f64")))
        assert f'call double @"{name}"' in f64
