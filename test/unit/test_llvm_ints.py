"""The llvm target on integer ops: division and remainder (C and floor semantics,
the i32 edge cases), shifts, bitwise ops, comparisons, casts and constants, each
vectorized and with a remainder (helpers from test_llvm_target.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_llvm_target import _NP, RNG, N, floats, run_elementwise

# --- integers ----------------------------------------------------------------------


def ints(dtype=np.int32, n: int = N, lo: int = -50, hi: int = 50) -> np.ndarray:
    return RNG.integers(lo, hi, n).astype(dtype)


def _i32_edge_cases() -> tuple[np.ndarray, np.ndarray]:
    a, b = ints(), ints(lo=-7, hi=8)
    a[:6] = [-(2**31), -(2**31), 7, -7, 7, 2**31 - 1]
    b[:6] = [-1, 0, 0, 2, -2, -1]
    return a, b


def _div_ref(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MLIR semantics, made total: x/0 = x%0 = 0, MIN/-1 wraps."""
    unsigned = name.endswith("ui")
    a64 = a.view(np.uint32).astype(np.int64) if unsigned else a.astype(np.int64)
    b64 = b.view(np.uint32).astype(np.int64) if unsigned else b.astype(np.int64)
    safe = np.where(b64 == 0, 1, b64)
    floor = a64 // safe
    trunc = np.where((a64 % safe != 0) & ((a64 < 0) != (safe < 0)), floor + 1, floor)
    result = {
        "divsi": trunc,
        "divui": trunc,
        "remsi": a64 - safe * trunc,
        "remui": a64 - safe * trunc,
        "floordivsi": floor,
        "ceildivsi": -((-a64) // safe),
        "ceildivui": -((-a64) // safe),
    }[name]
    return (
        np.where(b64 == 0, 0, result).astype(np.int64).astype(np.uint32).view(np.int32)
    )


@pytest.mark.parametrize(
    "name", ["divsi", "divui", "remsi", "remui", "floordivsi", "ceildivsi", "ceildivui"]
)
def test_int_division(name):
    a, b = _i32_edge_cases()
    got = run_elementwise(
        f"%r = arith.{name} %x0, %x1 : i32", [a, b], ["i32"] * 2, "i32"
    )
    np.testing.assert_array_equal(got, _div_ref(name, a, b))


def _shift_ref(name, a, b):
    out = np.zeros_like(a)
    for i, (x, s) in enumerate(zip(a.tolist(), b.tolist())):
        if name == "shli":
            out[i] = np.uint32((x << s) & 0xFFFFFFFF).view(np.int32) if s < 32 else 0
        elif name == "shrui":
            out[i] = np.uint32((x & 0xFFFFFFFF) >> s).view(np.int32) if s < 32 else 0
        else:
            out[i] = x >> min(s, 31)
    return out


INT_BINARY = [
    ("addi", np.add),
    ("subi", np.subtract),
    ("muli", np.multiply),
    ("andi", np.bitwise_and),
    ("ori", np.bitwise_or),
    ("xori", np.bitwise_xor),
    ("maxsi", np.maximum),
    ("minsi", np.minimum),
    (
        "maxui",
        lambda a, b: np.maximum(a.view(np.uint32), b.view(np.uint32)).view(np.int32),
    ),
    (
        "minui",
        lambda a, b: np.minimum(a.view(np.uint32), b.view(np.uint32)).view(np.int32),
    ),
    ("shli", None),
    ("shrsi", None),
    ("shrui", None),
]


@pytest.mark.parametrize("name,ref", INT_BINARY, ids=[n for n, _ in INT_BINARY])
def test_int_binary(name, ref):
    a, b = _i32_edge_cases()
    if ref is None:  # shifts: amounts past the width are defined (see emit_ops.py)
        b = ints(lo=0, hi=40)
        expected = _shift_ref(name, a, b)
    else:
        with np.errstate(over="ignore"):
            expected = ref(a, b)
    got = run_elementwise(
        f"%r = arith.{name} %x0, %x1 : i32", [a, b], ["i32"] * 2, "i32"
    )
    np.testing.assert_array_equal(got, expected)


CMPI = [
    ("eq", np.equal),
    ("ne", np.not_equal),
    ("slt", np.less),
    ("sle", np.less_equal),
    ("sgt", np.greater),
    ("sge", np.greater_equal),
]


@pytest.mark.parametrize(
    "pred,ref",
    CMPI + [(f"u{p[1:]}", r) for p, r in CMPI[2:]],
    ids=[p for p, _ in CMPI] + [f"u{p[1:]}" for p, _ in CMPI[2:]],
)
def test_cmpi(pred, ref):
    a, b = ints(lo=-3, hi=3), ints(lo=-3, hi=3)
    got = run_elementwise(
        f"%r = arith.cmpi {pred}, %x0, %x1 : i32", [a, b], ["i32"] * 2, "i1"
    )
    if pred.startswith("u"):
        a, b = a.view(np.uint32), b.view(np.uint32)
    np.testing.assert_array_equal(got, ref(a, b))


CASTS = [
    ("arith.extf %x0 : f16 to f32", "f16", "f32", lambda x: x.astype(np.float32)),
    ("arith.truncf %x0 : f64 to f32", "f64", "f32", lambda x: x.astype(np.float32)),
    ("arith.truncf %x0 : f32 to f16", "f32", "f16", lambda x: x.astype(np.float16)),
    ("arith.sitofp %x0 : i32 to f32", "i32", "f32", lambda x: x.astype(np.float32)),
    (
        "arith.uitofp %x0 : i32 to f32",
        "i32",
        "f32",
        lambda x: x.view(np.uint32).astype(np.float32),
    ),
    ("arith.fptosi %x0 : f32 to i32", "f32", "i32", lambda x: x.astype(np.int32)),
    (
        "arith.fptoui %x0 : f32 to i8",
        "f32",
        "i8",
        lambda x: np.abs(x).astype(np.uint8).view(np.int8),
    ),
    ("arith.extsi %x0 : i8 to i32", "i8", "i32", lambda x: x.astype(np.int32)),
    (
        "arith.extui %x0 : i8 to i32",
        "i8",
        "i32",
        lambda x: x.view(np.uint8).astype(np.int32),
    ),
    ("arith.trunci %x0 : i32 to i8", "i32", "i8", lambda x: x.astype(np.int8)),
    ("arith.bitcast %x0 : f32 to i32", "f32", "i32", lambda x: x.view(np.int32)),
    ("arith.extui %x0 : i1 to i32", "i1", "i32", lambda x: x.astype(np.int32)),
    ("arith.uitofp %x0 : i1 to f32", "i1", "f32", lambda x: x.astype(np.float32)),
]


@pytest.mark.parametrize(
    "body,src,dst,ref", CASTS, ids=[c[0].split()[0] + "-" + c[1] + c[2] for c in CASTS]
)
def test_casts(body, src, dst, ref):
    if src.startswith("f"):
        x = floats(_NP[src], lo=-100, hi=100)
        if "fptoui" in body:
            x = np.abs(x)
    elif src == "i1":
        x = RNG.random(N) > 0.5
    else:
        x = ints(
            _NP[src],
            lo=-128 if src == "i8" else -(2**31),
            hi=127 if src == "i8" else 2**31 - 1,
        )
    got = run_elementwise(f"%r = {body}", [x], [src], dst)
    np.testing.assert_array_equal(got, ref(x))


def test_index_cast():
    x = ints(lo=-1000, hi=1000)
    body = """%n = arith.index_cast %x0 : i32 to index
      %m = arith.addi %n, %i : index
      %r = arith.index_cast %m : index to i64"""
    got = run_elementwise(body, [x], ["i32"], "i64")
    np.testing.assert_array_equal(got, x.astype(np.int64) + np.arange(N))


def test_constants():
    body = """%c0 = arith.constant 0x7FC00000 : f32
      %c1 = arith.constant 0x7F800000 : f32
      %c2 = arith.constant -2.5 : f32
      %c3 = arith.constant 3 : i32
      %c4 = arith.constant true
      %c5 = arith.constant 2 : index
      %f = arith.sitofp %c3 : i32 to f32
      %ix = arith.index_cast %c5 : index to i32
      %fi = arith.sitofp %ix : i32 to f32
      %s = arith.select %c4, %c2, %c0 : f32
      %p = arith.addf %s, %f : f32
      %q = arith.addf %p, %fi : f32
      %big = arith.cmpf olt, %x0, %c1 : f32
      %nn = arith.cmpf uno, %c0, %c0 : f32
      %both = arith.andi %big, %nn : i1
      %r = arith.select %both, %q, %c0 : f32"""
    x = floats()
    x[0] = np.inf
    got = run_elementwise(body, [x], ["f32"], "f32")
    expected = np.where(x < np.inf, np.float32(2.5), np.nan)
    np.testing.assert_array_equal(got, expected)
