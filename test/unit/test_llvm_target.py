"""The llvm target: hand-written loop-level modules, JIT-compiled, against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, memref, vector
from xdsl.dialects import math as math_dialect
from xdsl.parser import Parser

from smelt.dialects.graph import Graph
from smelt.dialects.loop import Loop
from smelt.errors import SmeltError
from smelt.lowering.llvm.emit import emit_llvm_ir
from smelt.lowering.llvm.jit import compile_to_native

RNG = np.random.default_rng(0)
N = 37  # not a multiple of any vector width: the vectorized loops need a remainder


def parse(src: str, verify: bool = True) -> builtin.ModuleOp:
    # allow_unregistered: xDSL 0.75 has no arith.remf, so tests write it generically
    ctx = Context(allow_unregistered=True)
    for dialect in (
        builtin.Builtin,
        func.Func,
        arith.Arith,
        math_dialect.Math,
        memref.MemRef,
        vector.Vector,
        Loop,
        Graph,
    ):
        ctx.load_dialect(dialect)
    module = Parser(ctx, src).parse_module()
    if verify:
        module.verify()
    return module


def run(src: str, *arrays: np.ndarray, **options) -> list[np.ndarray]:
    """Compiles `src` and runs @main on `arrays` (inputs then outputs) in place."""
    program = compile_to_native(parse(src), **options)
    program.run(list(arrays))
    return list(arrays)


def _memref(shape: tuple[int, ...], t: str) -> str:
    return f"memref<{'x'.join(map(str, shape))}{'x' if shape else ''}{t}>"


def elementwise(body: str, in_types: list[str], out_type: str, n: int = N) -> str:
    """A 1-d kernel: loads %x0.. from each input, `body` defines %r, stores %r."""
    args = [f"%a{i}: {_memref((n,), t)}" for i, t in enumerate(in_types)]
    args.append(f"%out: {_memref((n,), out_type)}")
    loads = "\n".join(
        f"      %x{i} = memref.load %a{i}[%i] : {_memref((n,), t)}"
        for i, t in enumerate(in_types)
    )
    names = ", ".join(a.split(":")[0] for a in args)
    types = ", ".join(a.split(": ")[1] for a in args)
    return f"""
    func.func @k({", ".join(args)}) attributes {{loop.kernel}} {{
      loop.for %i = 0 to {n} step 1 parallel {{
{loads}
      {body}
      memref.store %r, %out[%i] : {_memref((n,), out_type)}
      loop.yield
      }}
      func.return
    }}
    func.func @main({", ".join(args)}) {{
      func.call @k({names}) : ({types}) -> ()
      func.return
    }}
    """


_NP = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
}


def run_elementwise(
    body: str, inputs: list[np.ndarray], in_types: list[str], out_type: str
) -> np.ndarray:
    out = np.zeros(inputs[0].shape, _NP[out_type])
    run(elementwise(body, in_types, out_type, inputs[0].size), *inputs, out)
    return out


def floats(dtype=np.float32, n: int = N, lo: float = -3, hi: float = 3) -> np.ndarray:
    return RNG.uniform(lo, hi, n).astype(dtype)


def with_specials(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0]
    return x


# --- floats ------------------------------------------------------------------------

FLOAT_BINARY = [
    ("arith.addf %x0, %x1 : f32", np.add),
    ("arith.subf %x0, %x1 : f32", np.subtract),
    ("arith.mulf %x0, %x1 : f32", np.multiply),
    ("arith.divf %x0, %x1 : f32", np.divide),
    ('"arith.remf"(%x0, %x1) : (f32, f32) -> f32', np.fmod),
    ("arith.maximumf %x0, %x1 : f32", np.maximum),
    ("arith.minimumf %x0, %x1 : f32", np.minimum),
    ("arith.maxnumf %x0, %x1 : f32", np.fmax),
    ("arith.minnumf %x0, %x1 : f32", np.fmin),
    ("math.powf %x0, %x1 : f32", np.power),
    ("math.atan2 %x0, %x1 : f32", np.arctan2),
    ("math.copysign %x0, %x1 : f32", np.copysign),
]


@pytest.mark.parametrize(
    "body,ref", FLOAT_BINARY, ids=[b.split()[0] for b, _ in FLOAT_BINARY]
)
def test_float_binary(body, ref):
    a, b = with_specials(floats()), floats()
    b[7] = 0.0
    if "powf" in body:
        a = np.abs(a)
    with np.errstate(all="ignore"):
        expected = ref(a, b)
    got = run_elementwise(f"%r = {body}", [a, b], ["f32", "f32"], "f32")
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7)


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


FLOAT_UNARY = [
    ("arith.negf", np.negative, None),
    ("math.exp", np.exp, None),
    ("math.exp2", np.exp2, None),
    ("math.expm1", np.expm1, None),
    ("math.log", np.log, (0.01, 5)),
    ("math.log2", np.log2, (0.01, 5)),
    ("math.log10", np.log10, (0.01, 5)),
    ("math.log1p", np.log1p, (-0.9, 5)),
    ("math.sqrt", np.sqrt, (0, 5)),
    ("math.rsqrt", lambda x: 1 / np.sqrt(x), (0.01, 5)),
    ("math.tanh", np.tanh, None),
    ("math.erf", np.vectorize(math.erf, otypes=[np.float64]), None),
    ("math.absf", np.abs, None),
    ("math.floor", np.floor, None),
    ("math.ceil", np.ceil, None),
    ("math.trunc", np.trunc, None),
    ("math.round", _round_half_away, None),
    ("math.roundeven", np.rint, None),
    ("math.sin", np.sin, None),
    ("math.cos", np.cos, None),
    ("math.tan", np.tan, (-1.5, 1.5)),
    ("math.sinh", np.sinh, None),
    ("math.cosh", np.cosh, None),
    ("math.asin", np.arcsin, (-1, 1)),
    ("math.acos", np.arccos, (-1, 1)),
    ("math.atan", np.arctan, None),
    ("math.asinh", np.arcsinh, None),
    ("math.acosh", np.arccosh, (1, 5)),
    ("math.atanh", np.arctanh, (-0.99, 0.99)),
    ("math.cbrt", np.cbrt, None),
]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("op,ref,domain", FLOAT_UNARY, ids=[u[0] for u in FLOAT_UNARY])
def test_float_unary(op, ref, domain, dtype):
    x = floats(_NP[dtype], lo=domain[0], hi=domain[1]) if domain else floats(_NP[dtype])
    x[:2] = [domain[0] if domain else 0.5, 2.5]  # round-half cases, domain edges
    got = run_elementwise(f"%r = {op} %x0 : {dtype}", [x], [dtype], dtype)
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64)).astype(_NP[dtype])
    rtol = 3e-6 if dtype == "f32" else 1e-13
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)


def test_nan_propagation_and_specials():
    a = with_specials(floats())
    got = run_elementwise("%r = math.exp %x0 : f32", [a], ["f32"], "f32")
    np.testing.assert_allclose(got[:6], np.exp(a[:6]))
    b = np.full(N, 1.0, np.float32)
    got = run_elementwise(
        "%r = arith.maximumf %x0, %x1 : f32", [b, a], ["f32"] * 2, "f32"
    )
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == 1.0


def test_fma_and_select():
    a, b, c = floats(), floats(), floats()
    got = run_elementwise(
        "%r = math.fma %x0, %x1, %x2 : f32", [a, b, c], ["f32"] * 3, "f32"
    )
    np.testing.assert_allclose(got, a * b + c, rtol=1e-5, atol=1e-6)
    cond = RNG.random(N) > 0.5
    got = run_elementwise(
        "%r = arith.select %x0, %x1, %x2 : f32",
        [cond, a, b],
        ["i1", "f32", "f32"],
        "f32",
    )
    np.testing.assert_array_equal(got, np.where(cond, a, b))


CMPF = [
    "false",
    "oeq",
    "ogt",
    "oge",
    "olt",
    "ole",
    "one",
    "ord",
    "ueq",
    "ugt",
    "uge",
    "ult",
    "ule",
    "une",
    "uno",
    "true",
]


def _cmpf_ref(pred: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if pred in ("false", "true"):
        return np.full(a.shape, pred == "true")
    unordered = np.isnan(a) | np.isnan(b)
    if pred in ("ord", "uno"):
        return ~unordered if pred == "ord" else unordered
    cmp = {
        "eq": np.equal,
        "gt": np.greater,
        "ge": np.greater_equal,
        "lt": np.less,
        "le": np.less_equal,
        "ne": np.not_equal,
    }[pred[1:]]
    with np.errstate(invalid="ignore"):
        ordered = cmp(a, b) & ~unordered
    return ordered if pred[0] == "o" else ordered | unordered


@pytest.mark.parametrize("pred", CMPF)
def test_cmpf(pred):
    a = with_specials(np.round(floats()))
    b = np.round(floats())
    b[:6] = [1.0, np.nan, -np.inf, -0.0, 0.0, 1.0]
    got = run_elementwise(
        f"%r = arith.cmpf {pred}, %x0, %x1 : f32", [a, b], ["f32", "f32"], "i1"
    )
    np.testing.assert_array_equal(got, _cmpf_ref(pred, a, b))


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


# --- types: f16, bf16, i1 -------------------------------------------------------------


def test_f16_arithmetic():
    a, b = floats(np.float16), floats(np.float16)
    got = run_elementwise("%r = arith.mulf %x0, %x1 : f16", [a, b], ["f16"] * 2, "f16")
    np.testing.assert_array_equal(got, a * b)
    got = run_elementwise("%r = math.tanh %x0 : f16", [a], ["f16"], "f16")
    np.testing.assert_allclose(got, np.tanh(a), rtol=1e-3, atol=1e-3)
    got = run_elementwise("%r = math.exp %x0 : f16", [a], ["f16"], "f16")
    np.testing.assert_allclose(got, np.exp(a), rtol=1e-3)


def test_bf16_round_trip():
    """bf16 buffers: truncf rounds to nearest even, extf is exact."""
    x = with_specials(floats())
    x[6] = np.float32(1.00390625)  # exactly halfway between two bf16: rounds to even
    src = """
    func.func @k(%a: memref<37xf32>, %o: memref<37xf32>, %t: memref<37xbf16>)
        attributes {loop.kernel} {
      loop.for %i = 0 to 37 step 1 parallel {
        %x = memref.load %a[%i] : memref<37xf32>
        %h = arith.truncf %x : f32 to bf16
        memref.store %h, %t[%i] : memref<37xbf16>
        %y = memref.load %t[%i] : memref<37xbf16>
        %w = arith.extf %y : bf16 to f32
        memref.store %w, %o[%i] : memref<37xf32>
        loop.yield
      }
      func.return
    }
    func.func @main(%a: memref<37xf32>, %o: memref<37xf32>) {
      %t = loop.alloc : memref<37xbf16>
      func.call @k(%a, %o, %t) : (memref<37xf32>, memref<37xf32>, memref<37xbf16>) -> ()
      func.return
    }"""
    (_, got) = run(src, x, np.zeros_like(x))
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    expected = np.where(np.isnan(x), np.nan, rounded.view(np.float32))
    np.testing.assert_array_equal(got, expected)
    assert got[6] == 1.0


def test_i1_buffers():
    a, b = RNG.random(N) > 0.5, RNG.random(N) > 0.5
    got = run_elementwise("%r = arith.xori %x0, %x1 : i1", [a, b], ["i1"] * 2, "i1")
    np.testing.assert_array_equal(got, a ^ b)
    got = run_elementwise(
        "%t = arith.constant true\n%n = arith.xori %x0, %t : i1\n"
        "%r = arith.andi %n, %x1 : i1",
        [a, b],
        ["i1"] * 2,
        "i1",
    )
    np.testing.assert_array_equal(got, ~a & b)
    assert set(got.view(np.uint8).tolist()) <= {0, 1}  # stored as 0/1 bytes


# --- loops: reductions, matmul, bounds ------------------------------------------------


def test_row_sum_and_max_with_iter_args():
    src = """
    func.func @k(%a: memref<5x33xf32>, %s: memref<5xf32>, %m: memref<5xf32>)
        attributes {loop.kernel} {
      %zero = arith.constant 0.0 : f32
      %ninf = arith.constant 0xFF800000 : f32
      loop.for %i = 0 to 5 step 1 parallel {
        %sum, %max = loop.for %j = 0 to 33 step 1 reduction
            iter_args(%acc = %zero, %mx = %ninf) -> (f32, f32) {
          %v = memref.load %a[%i, %j] : memref<5x33xf32>
          %n = arith.addf %acc, %v : f32
          %x = arith.maximumf %mx, %v : f32
          loop.yield %n, %x : f32, f32
        }
        memref.store %sum, %s[%i] : memref<5xf32>
        memref.store %max, %m[%i] : memref<5xf32>
        loop.yield
      }
      func.return
    }
    func.func @main(%a: memref<5x33xf32>, %s: memref<5xf32>, %m: memref<5xf32>) {
      func.call @k(%a, %s, %m) : (memref<5x33xf32>, memref<5xf32>, memref<5xf32>) -> ()
      func.return
    }"""
    a = RNG.standard_normal((5, 33)).astype(np.float32)
    a[3, 7] = np.nan
    for fast_math in (False, True):
        _, s, m = run(
            src,
            a,
            np.zeros(5, np.float32),
            np.zeros(5, np.float32),
            fast_math=fast_math,
        )
        np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5)
        np.testing.assert_array_equal(m, a.max(axis=1))


MATMUL = """
func.func @mm(%a: memref<{M}x{K}xf32>, %b: memref<{K}x{N}xf32>, %c: memref<{M}x{N}xf32>)
    attributes {{loop.kernel}} {{
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to {M} step 1 parallel {{
    loop.for %j = 0 to {N} step 1 parallel {{
      %dot = loop.for %k = 0 to {K} step 1 reduction iter_args(%acc = %zero) -> (f32) {{
        %x = memref.load %a[%i, %k] : memref<{M}x{K}xf32>
        %y = memref.load %b[%k, %j] : memref<{K}x{N}xf32>
        %p = arith.mulf %x, %y : f32
        %s = arith.addf %acc, %p : f32
        loop.yield %s : f32
      }}
      memref.store %dot, %c[%i, %j] : memref<{M}x{N}xf32>
      loop.yield
    }}
    loop.yield
  }}
  func.return
}}
func.func @main(%a: memref<{M}x{K}xf32>, %c: memref<{M}x{N}xf32>)
    attributes {{smelt.input_names = ["a"], smelt.output_names = ["c"]}} {{
  %b = loop.constant {B} -> memref<{K}x{N}xf32>
  func.call @mm(%a, %b, %c)
      : (memref<{M}x{K}xf32>, memref<{K}x{N}xf32>, memref<{M}x{N}xf32>) -> ()
  func.return
}}
"""


def _dense(x: np.ndarray) -> str:
    t = "x".join(map(str, x.shape)) + "xf32"
    return f'dense<"0x{x.astype("<f4").tobytes().hex().upper()}"> : tensor<{t}>'


def test_matmul_with_weights():
    m, k, n = 17, 13, 9
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    program = compile_to_native(parse(MATMUL.format(M=m, K=k, N=n, B=_dense(b))))
    assert program.weight_bytes == b.nbytes and program.arena_bytes == 0
    c = np.zeros((m, n), np.float32)
    program.run([a, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    program.run([2 * a, c])  # runs again with the same weights
    np.testing.assert_allclose(c, 2 * a @ b, rtol=1e-5, atol=1e-5)


def test_loop_bounds_step_and_trip_counts():
    src = """
    func.func @k(%o: memref<20xi32>) attributes {loop.kernel} {
      %one = arith.constant 1 : i32
      %z = arith.constant 0 : i32
      loop.for %i = 3 to 20 step 4 parallel {
        memref.store %one, %o[%i] : memref<20xi32>
        loop.yield
      }
      loop.for %i = 5 to 5 step 1 parallel {
        memref.store %z, %o[%i] : memref<20xi32>
        loop.yield
      }
      %c = loop.for %i = 0 to 1 step 1 reduction iter_args(%a = %one) -> (i32) {
        %n = arith.addi %a, %one : i32
        loop.yield %n : i32
      }
      %c0 = arith.constant 0 : index
      memref.store %c, %o[%c0] : memref<20xi32>
      func.return
    }
    func.func @main(%o: memref<20xi32>) {
      func.call @k(%o) : (memref<20xi32>) -> ()
      func.return
    }"""
    (o,) = run(src, np.full(20, 7, np.int32))
    expected = np.full(20, 7, np.int32)
    expected[3::4] = 1
    expected[0] = 2
    np.testing.assert_array_equal(o, expected)


# --- @main: weights, views, allocs ----------------------------------------------------

CHAIN = """
func.func @scale(%a: memref<4x6xf32>, %w: memref<4x6xf32>, %o: memref<4x6xf32>)
    attributes {{loop.kernel}} {{
  loop.for %i = 0 to 4 step 1 parallel {{
    loop.for %j = 0 to 6 step 1 parallel {{
      %x = memref.load %a[%i, %j] : memref<4x6xf32>
      %y = memref.load %w[%i, %j] : memref<4x6xf32>
      %z = arith.mulf %x, %y : f32
      memref.store %z, %o[%i, %j] : memref<4x6xf32>
      loop.yield
    }}
    loop.yield
  }}
  func.return
}}
func.func @shift(%a: memref<24xf32>, %w: memref<24xf32>, %o: memref<24xf32>)
    attributes {{loop.kernel}} {{
  loop.for %i = 0 to 24 step 1 parallel {{
    %x = memref.load %a[%i] : memref<24xf32>
    %y = memref.load %w[%i] : memref<24xf32>
    %z = arith.addf %x, %y : f32
    memref.store %z, %o[%i] : memref<24xf32>
    loop.yield
  }}
  func.return
}}
func.func @main(%a: memref<4x6xf32>, %o: memref<2x12xf32>)
    attributes {{smelt.input_names = ["a"], smelt.output_names = ["o"]}} {{
  %w = loop.constant {W} -> memref<4x6xf32>
  %two = loop.constant dense<2.0> : tensor<24xf32> -> memref<24xf32>
  %t1 = loop.alloc {OFF1}: memref<4x6xf32>
  %t2 = loop.alloc {OFF2}: memref<4x6xf32>
  %t3 = loop.alloc : memref<24xf32>
  func.call @scale(%a, %w, %t1) : (memref<4x6xf32>, memref<4x6xf32>, memref<4x6xf32>) -> ()
  func.call @scale(%t1, %w, %t2) : (memref<4x6xf32>, memref<4x6xf32>, memref<4x6xf32>) -> ()
  %v2 = loop.view %t2 : memref<4x6xf32> -> memref<24xf32>
  func.call @shift(%v2, %two, %t3) : (memref<24xf32>, memref<24xf32>, memref<24xf32>) -> ()
  %ov = loop.view %o : memref<2x12xf32> -> memref<24xf32>
  func.call @shift(%t3, %two, %ov) : (memref<24xf32>, memref<24xf32>, memref<24xf32>) -> ()
  func.return
}}
"""


@pytest.mark.parametrize("offsets", [("", ""), ("offset(0) ", "offset(96) ")])
def test_weights_views_and_allocs(offsets):
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 6)).astype(np.float32)
    src = CHAIN.format(W=_dense(w), OFF1=offsets[0], OFF2=offsets[1])
    program = compile_to_native(parse(src))
    o = np.zeros((2, 12), np.float32)
    program.run([a, o])
    np.testing.assert_allclose(o, (a * w * w + 4).reshape(2, 12), rtol=1e-6)
    assert program.weight_bytes == 128 + 96  # two weights, each 64-byte aligned
    # three 96-byte buffers; unplanned ones go 64-aligned after the planned ones
    assert program.arena_bytes == (320 if offsets[0] else 384)
    assert "smelt_main" in program.llvm_ir


def test_scratch_alloca_in_kernel():
    body = """%buf = memref.alloca() : memref<2xf32>
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      memref.store %x0, %buf[%c0] : memref<2xf32>
      memref.store %x1, %buf[%c1] : memref<2xf32>
      %u = memref.load %buf[%c1] : memref<2xf32>
      %v = memref.load %buf[%c0] : memref<2xf32>
      %r = arith.subf %u, %v : f32"""
    a, b = floats(), floats()
    got = run_elementwise(body, [a, b], ["f32", "f32"], "f32")
    np.testing.assert_array_equal(got, b - a)


# --- vector ops --------------------------------------------------------------------


def test_vector_ops():
    src = """
    func.func @k(%a: memref<4x8xf32>, %o: memref<4x8xf32>, %s: memref<4xf32>)
        attributes {loop.kernel} {
      %two = arith.constant 2.0 : f32
      %z = arith.constant 0.0 : f32
      %c0 = arith.constant 0 : index
      loop.for %i = 0 to 4 step 1 parallel {
        %v = vector.load %a[%i, %c0] : memref<4x8xf32>, vector<8xf32>
        %b = vector.broadcast %two : f32 to vector<8xf32>
        %f = vector.fma %v, %b, %v : vector<8xf32>
        %m = arith.maximumf %f, %v : vector<8xf32>
        vector.store %m, %o[%i, %c0] : memref<4x8xf32>, vector<8xf32>
        %r = vector.reduction <add>, %m, %z : vector<8xf32> into f32
        %e = vector.extract %m[7] : f32 from vector<8xf32>
        %t = arith.addf %r, %e : f32
        memref.store %t, %s[%i] : memref<4xf32>
        loop.yield
      }
      func.return
    }
    func.func @main(%a: memref<4x8xf32>, %o: memref<4x8xf32>, %s: memref<4xf32>) {
      func.call @k(%a, %o, %s) : (memref<4x8xf32>, memref<4x8xf32>, memref<4xf32>) -> ()
      func.return
    }"""
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    _, o, s = run(src, a, np.zeros_like(a), np.zeros(4, np.float32))
    m = np.maximum(3 * a, a)
    np.testing.assert_allclose(o, m, rtol=1e-6)
    np.testing.assert_allclose(s, m.sum(axis=1) + m[:, 7], rtol=1e-5)


# --- generated code, errors ------------------------------------------------------------


def test_inner_loops_vectorize():
    src = elementwise("%r = arith.addf %x0, %x1 : f32", ["f32", "f32"], "f32", 1024)
    program = compile_to_native(parse(src))
    assert "x float>" in program.llvm_ir  # LLVM's loop vectorizer ran
    assert "smelt_main" in program.asm


SUM = """
func.func @k(%a: memref<1024xf32>, %o: memref<1xf32>) attributes {loop.kernel} {
  %z = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %s = loop.for %i = 0 to 1024 step 1 reduction iter_args(%acc = %z) -> (f32) {
    %v = memref.load %a[%i] : memref<1024xf32>
    %n = arith.addf %acc, %v : f32
    loop.yield %n : f32
  }
  memref.store %s, %o[%c0] : memref<1xf32>
  func.return
}
func.func @main(%a: memref<1024xf32>, %o: memref<1xf32>) {
  func.call @k(%a, %o) : (memref<1024xf32>, memref<1xf32>) -> ()
  func.return
}
"""


def test_float_reductions_vectorize_only_with_fast_math():
    strict = compile_to_native(parse(SUM))
    fast = compile_to_native(parse(SUM), fast_math=True)
    assert "x float>" not in strict.llvm_ir  # in-order sum: LLVM must not reassociate
    assert "x float>" in fast.llvm_ir
    # the op's own fastmath flags count too
    marked = SUM.replace("%acc, %v : f32", "%acc, %v fastmath<reassoc> : f32")
    assert "x float>" in compile_to_native(parse(marked)).llvm_ir
    a = RNG.standard_normal(1024).astype(np.float32)
    for program in (strict, fast):
        out = np.zeros(1, np.float32)
        program.run([a, out])
        np.testing.assert_allclose(out[0], a.sum(dtype=np.float64), rtol=1e-4)


@pytest.mark.slow
def test_matmul_512_speed_vs_numpy(capsys):
    """Reports (no assertion) a plain i,k,j loop-nest matmul against numpy."""
    import time

    n = 512
    t = f"memref<{n}x{n}xf32>"
    src = f"""
    func.func @mm(%a: {t}, %b: {t}, %c: {t}) attributes {{loop.kernel}} {{
      %z = arith.constant 0.0 : f32
      loop.for %i = 0 to {n} step 1 parallel {{
        loop.for %j = 0 to {n} step 1 parallel {{
          memref.store %z, %c[%i, %j] : {t}
          loop.yield
        }}
        loop.for %k = 0 to {n} step 1 reduction {{
          %x = memref.load %a[%i, %k] : {t}
          loop.for %j = 0 to {n} step 1 parallel {{
            %y = memref.load %b[%k, %j] : {t}
            %acc = memref.load %c[%i, %j] : {t}
            %p = arith.mulf %x, %y : f32
            %s = arith.addf %acc, %p : f32
            memref.store %s, %c[%i, %j] : {t}
            loop.yield
          }}
          loop.yield
        }}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t}, %b: {t}, %c: {t}) {{
      func.call @mm(%a, %b, %c) : ({t}, {t}, {t}) -> ()
      func.return
    }}"""
    program = compile_to_native(parse(src))
    a = RNG.standard_normal((n, n), dtype=np.float32)
    b = RNG.standard_normal((n, n), dtype=np.float32)
    c = np.empty_like(a)

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(10):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    ours = best(lambda: program.run([a, b, c]))
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    theirs = best(lambda: np.matmul(a, b, out=c))
    with capsys.disabled():
        print(
            f"\nmatmul {n}^3 f32: smelt {ours * 1e3:.2f} ms "
            f"({2 * n**3 / ours / 1e9:.1f} GFLOP/s), numpy {theirs * 1e3:.2f} ms "
            f"({2 * n**3 / theirs / 1e9:.1f} GFLOP/s)"
        )


def test_emit_llvm_ir_of_kernels_only():
    src = elementwise("%r = arith.addf %x0, %x1 : f32", ["f32", "f32"], "f32", 8)
    kernels_only = src[: src.index("func.func @main")]
    text = emit_llvm_ir(parse(kernels_only))
    assert 'define void @"smelt.kernel.k"' in text  # a library: exported
    assert "smelt_main" not in text
    with pytest.raises(SmeltError, match="no @main"):
        compile_to_native(parse(kernels_only))


def test_unsupported_op_names_op_and_kernel():
    src = elementwise('%r = "arith.mystery"(%x0) : (f32) -> f32', ["f32"], "f32")
    with pytest.raises(SmeltError, match=r"kernel @k.*arith\.mystery"):
        emit_llvm_ir(parse(src))


def test_bf16_arithmetic_is_refused():
    src = elementwise("%r = arith.addf %x0, %x0 : bf16", ["bf16"], "bf16")
    with pytest.raises(SmeltError, match=r"kernel @k.*bf16"):
        emit_llvm_ir(parse(src))


def test_run_checks_its_arguments():
    src = elementwise("%r = arith.addf %x0, %x0 : f32", ["f32"], "f32", 8)
    program = compile_to_native(parse(src))
    x, out = np.ones(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(SmeltError, match="takes 2 buffers"):
        program.run([x])
    with pytest.raises(SmeltError, match="float32"):
        program.run([x.astype(np.float64), out])
    with pytest.raises(SmeltError, match="contiguous"):
        program.run([np.ones(16, np.float32)[::2], out])
    program.run([x, out])
    np.testing.assert_array_equal(out, 2 * x)


def test_main_errors_name_the_problem():
    src = elementwise("%r = arith.addf %x0, %x0 : f32", ["f32"], "f32", 8)
    extra = src.replace(
        "      func.call @k", '      "test.op"() : () -> ()\n      func.call @k'
    )
    with pytest.raises(SmeltError, match=r"@main: .*`test\.op`"):
        emit_llvm_ir(parse(extra))
    # a kernel called with buffers of other types (the caller forgot a loop.view)
    wrong = src.replace("%out: memref<8xf32>) {", "%out: memref<2x4xf32>) {")
    wrong = wrong.replace(
        "(memref<8xf32>, memref<8xf32>) -> ()", "(memref<8xf32>, memref<2x4xf32>) -> ()"
    )
    with pytest.raises(SmeltError, match=r"@main calls @k with buffers of types"):
        emit_llvm_ir(parse(wrong, verify=False))
