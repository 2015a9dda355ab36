"""The llvm target: hand-written loop-level modules, JIT-compiled, against numpy.
Here the float ops and the f16 / bf16 / i1 types, and the helpers the other files
use; integer ops in test_llvm_ints.py, whole programs in test_llvm_programs.py."""

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
