"""loop-vectorize keeps meaning, continued: random elementwise bodies over shifted
loads, and quantize chains (casts, compares, saturation) into narrow integer
stores, against the scalar loop (helpers from test_loop_vectorize.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_loop_vectorize import SIZES, run_both, vector_loops


def random_kernel(rng: np.random.Generator, n: int) -> str:
    """A random elementwise body over shifted loads of three buffers, invariant
    loads and constants, with float math: one store and one sum reduction."""
    t_in, t_out = f"memref<{n + 3}xf32>", f"memref<{n}xf32>"
    lines = ["%c1 = arith.constant 1 : index", "%z = arith.constant 0.0 : f32"]
    body, values = [], []
    for k in range(3):
        shift = int(rng.integers(0, 4))
        body.append(f"%s{k} = arith.constant {shift} : index")
        body.append(f"%j{k} = arith.addi %i, %s{k} : index")
        body.append(f"%x{k} = memref.load %a{k}[%j{k}] : {t_in}")
        values.append(f"%x{k}")
    body.append(f"%u = memref.load %a0[%c1] : {t_in}")  # invariant
    values += ["%u", "%half"]
    lines.append("%half = arith.constant 0.5 : f32")
    binary = ["addf", "subf", "mulf", "maximumf", "minimumf"]
    unary = ["math.tanh", "math.erf", "math.absf", "arith.negf"]
    for k in range(int(rng.integers(3, 9))):
        if rng.random() < 0.35:
            op, a = rng.choice(unary), rng.choice(values)
            body.append(f"%v{k} = {op} {a} : f32")
        else:
            op, a, b = rng.choice(binary), rng.choice(values), rng.choice(values)
            body.append(f"%v{k} = arith.{op} {a}, {b} : f32")
        values.append(f"%v{k}")
    last = values[-1]
    body += [
        f"memref.store {last}, %o[%i] : {t_out}",
        "%e = math.exp %x0 : f32",
        "%acc2 = arith.addf %acc, %e : f32",
        "loop.yield %acc2 : f32",
    ]
    body_text = "\n        ".join(body)
    args = f"%a0: {t_in}, %a1: {t_in}, %a2: {t_in}, %o: {t_out}, %s: memref<1xf32>"
    types = f"{t_in}, {t_in}, {t_in}, {t_out}, memref<1xf32>"
    return f"""
    func.func @k({args}) attributes {{loop.kernel}} {{
      {chr(10).join(lines)}
      %c0 = arith.constant 0 : index
      %r = loop.for %i = 0 to {n} step 1 reduction iter_args(%acc = %z) -> (f32) {{
        {body_text}
      }}
      memref.store %r, %s[%c0] : memref<1xf32>
      func.return
    }}
    func.func @main({args}) {{
      func.call @k(%a0, %a1, %a2, %o, %s) : ({types}) -> ()
      func.return
    }}"""


@pytest.mark.parametrize("seed", range(12))
def test_random_bodies_match_scalar(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice(SIZES))
    src = random_kernel(rng, n)
    inputs = [rng.uniform(-2, 2, n + 3).astype(np.float32) for _ in range(3)]
    outputs = [np.zeros(n, np.float32), np.zeros(1, np.float32)]
    (o1, s1), (o2, s2), module = run_both(src, inputs, outputs)
    np.testing.assert_allclose(o2, o1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s2, s1, rtol=1e-5)
    assert vector_loops(module) == (1 if n >= 8 else 0)


def quantize_kernel(n: int, store: str, signed: bool) -> str:
    """o[i] = saturate(roundeven(a[i] / s) + z) in `store` (NaN → the minimum),
    then f[i] = float(o[i]) − z and an i1 flag (o[i] > z) widened to i32: the
    compare, select and int / float casts of a QDQ chain."""
    lo, hi = (-128.0, 127.0) if signed else (0.0, 255.0)
    if store == "i16":
        lo, hi = (-32768.0, 32767.0) if signed else (0.0, 65535.0)
    to_f = "sitofp" if signed else "uitofp"
    ta, to = f"memref<{n}xf32>", f"memref<{n}x{store}>"
    tf, tb = f"memref<{n}xf32>", f"memref<{n}xi32>"
    return f"""
    func.func @k(%a: {ta}, %o: {to}, %f: {tf}, %b: {tb}) attributes {{loop.kernel}} {{
      %s = arith.constant 0.37 : f32
      %z = arith.constant 3.0 : f32
      %zi = arith.constant 3 : {store}
      %lo = arith.constant {lo} : f32
      %hi = arith.constant {hi} : f32
      loop.for %i = 0 to {n} step 1 parallel {{
        %x = memref.load %a[%i] : {ta}
        %d = arith.divf %x, %s : f32
        %r = math.roundeven %d : f32
        %y = arith.addf %r, %z : f32
        %c1 = arith.maximumf %y, %lo : f32
        %c2 = arith.minimumf %c1, %hi : f32
        %nan = arith.cmpf uno, %y, %y : f32
        %c3 = arith.select %nan, %lo, %c2 : f32
        %w = arith.fptosi %c3 : f32 to i32
        %q = arith.trunci %w : i32 to {store}
        memref.store %q, %o[%i] : {to}
        %back = arith.{to_f} %q : {store} to f32
        %dq = arith.subf %back, %z : f32
        memref.store %dq, %f[%i] : {tf}
        %gt = arith.cmpi {"sgt" if signed else "ugt"}, %q, %zi : {store}
        %g = arith.extui %gt : i1 to i32
        %e = arith.{"extsi" if signed else "extui"} %q : {store} to i32
        %sum = arith.addi %g, %e : i32
        memref.store %sum, %b[%i] : {tb}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {ta}, %o: {to}, %f: {tf}, %b: {tb}) {{
      func.call @k(%a, %o, %f, %b) : ({ta}, {to}, {tf}, {tb}) -> ()
      func.return
    }}"""


@pytest.mark.parametrize("n", [7, 16, 37, 101])
@pytest.mark.parametrize(
    "store,signed,dtype",
    [("i8", False, np.uint8), ("i8", True, np.int8), ("i16", True, np.int16)],
)
def test_quantize_chain_casts_and_compares(n, store, signed, dtype):
    """A QDQ chain's compares, selects and int / float casts vectorize (smelt's
    vector forms of them) and give the scalar loop's results bit for bit: ties,
    saturation, NaN, the remainder."""
    rng = np.random.default_rng(n)
    a = rng.uniform(-200, 200, n).astype(np.float32)
    a[::5] = np.float32(0.37) * (np.arange(len(a[::5])) + 0.5)  # exact ties
    a[1::11] = np.nan
    a[2::13] = 1e9
    outs = [np.zeros(n, dtype), np.zeros(n, np.float32), np.zeros(n, np.int32)]
    scalar, vector, module = run_both(quantize_kernel(n, store, signed), [a], outs)
    for s, v in zip(scalar, vector):
        np.testing.assert_array_equal(v, s)
    info = np.iinfo(dtype)
    want = np.clip(np.rint(a / np.float32(0.37)) + 3, info.min, info.max)
    want = np.where(np.isnan(a), info.min, want).astype(dtype)
    np.testing.assert_array_equal(vector[0], want)
    assert vector_loops(module) == (1 if n >= 8 else 0)
