"""loop-vectorize keeps meaning: kernels on awkward sizes, compiled with and without
the pass, against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_llvm_target import parse

from smelt.compiler.driver import lower
from smelt.dialects.loop import ForOp
from smelt.lowering.llvm.jit import compile_to_native

SIZES = [1, 2, 3, 7, 8, 9, 13, 31, 37, 64, 101]  # 1, primes, below/above the width


def compiled(src: str, pipeline: str = ""):
    module = parse(src)
    if pipeline:
        lower(module, pipeline)
        module.verify()
    return compile_to_native(module), module


def vector_loops(module) -> int:
    return sum(1 for op in module.walk() if isinstance(op, ForOp) and op.step.data > 1)


def run_both(src, inputs, outputs, pipeline="loop-vectorize"):
    """Runs `src` unchanged and after `pipeline`; returns both outputs and the
    vectorized module."""
    results = []
    module = None
    for pipe in ("", pipeline):
        program, module = compiled(src, pipe)
        outs = [np.zeros_like(o) for o in outputs]
        program.run([*inputs, *outs])
        results.append(outs)
    return results[0], results[1], module


def row_kernel(rows: int, n: int) -> str:
    """o[r, i] = tanh(a[r, i] * s[r] + b[i]) · erf(a[r, i]) + exp(-|a|)."""
    t2, t1 = f"memref<{rows}x{n}xf32>", f"memref<{n}xf32>"
    ts = f"memref<{rows}xf32>"
    return f"""
    func.func @k(%a: {t2}, %s: {ts}, %b: {t1}, %o: {t2}) attributes {{loop.kernel}} {{
      loop.for %r = 0 to {rows} step 1 parallel {{
        loop.for %i = 0 to {n} step 1 parallel {{
          %x = memref.load %a[%r, %i] : {t2}
          %sc = memref.load %s[%r] : {ts}
          %bi = memref.load %b[%i] : {t1}
          %m = arith.mulf %x, %sc : f32
          %y = arith.addf %m, %bi : f32
          %t = math.tanh %y : f32
          %e = math.erf %x : f32
          %ab = math.absf %x : f32
          %ng = arith.negf %ab : f32
          %ex = math.exp %ng : f32
          %p = arith.mulf %t, %e : f32
          %q = arith.addf %p, %ex : f32
          memref.store %q, %o[%r, %i] : {t2}
          loop.yield
        }}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t2}, %s: {ts}, %b: {t1}, %o: {t2}) {{
      func.call @k(%a, %s, %b, %o) : ({t2}, {ts}, {t1}, {t2}) -> ()
      func.return
    }}"""


@pytest.mark.parametrize("n", SIZES)
def test_elementwise_with_math(n):
    rng = np.random.default_rng(n)
    rows = 3
    a = rng.uniform(-3, 3, (rows, n)).astype(np.float32)
    s = rng.uniform(-2, 2, rows).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    (scalar,), (vector,), module = run_both(row_kernel(rows, n), [a, s, b], [a])
    erf = np.vectorize(math.erf)
    x = a.astype(np.float64)
    expected = np.tanh(x * s[:, None] + b) * erf(x) + np.exp(-np.abs(x))
    np.testing.assert_allclose(vector, expected, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(vector, scalar, rtol=2e-6, atol=2e-6)
    assert vector_loops(module) == (1 if n >= 8 else 0)


@pytest.mark.parametrize("offset", [0, 1, 5])
def test_streaming_stores_at_any_alignment(offset):
    """Stores to a buffer the kernel never reads stream (nontemporal) past
    `stream_bytes`; the rows of a 5 x 37 output start at every alignment, and the
    output itself is moved by `offset` floats, so aligned and unaligned vectors
    both occur (streamed and plainly stored)."""
    rng = np.random.default_rng(offset)
    rows, n = 5, 37
    a = rng.uniform(-3, 3, (rows, n)).astype(np.float32)
    s = rng.uniform(-2, 2, rows).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    src = row_kernel(rows, n)
    plain, _ = compiled(src, "loop-vectorize{width=8 stream_bytes=-1}")
    streamed, module = compiled(src, "loop-vectorize{width=8 stream_bytes=64}")
    stores = [op for op in module.walk() if op.name == "vector.store"]
    assert stores and all(op.properties["nontemporal"].value.data for op in stores)
    assert "!nontemporal" in streamed.llvm_ir and "sfence" in streamed.llvm_ir
    assert "!nontemporal" not in plain.llvm_ir
    want = np.zeros_like(a)
    plain.run([a, s, b, want])
    storage = np.full(rows * n + 16, np.nan, np.float32)
    got = storage[offset : offset + rows * n].reshape(rows, n)
    streamed.run([a, s, b, got])
    np.testing.assert_array_equal(got, want)


REDUCE = {
    "arith.addf": ("0.0", lambda a: a.sum(axis=1, dtype=np.float64), "f32"),
    "arith.mulf": ("1.0", lambda a: a.prod(axis=1, dtype=np.float64), "f32"),
    "arith.maximumf": ("0xFF800000", lambda a: a.max(axis=1), "f32"),
    "arith.minimumf": ("0x7F800000", lambda a: a.min(axis=1), "f32"),
    "arith.maxnumf": ("0x7FC00000", lambda a: np.fmax.reduce(a, axis=1), "f32"),
    "arith.addi": ("0", lambda a: a.sum(axis=1, dtype=np.int32), "i32"),
    "arith.muli": ("1", lambda a: a.prod(axis=1, dtype=np.int32), "i32"),
    "arith.maxsi": ("-5", lambda a: np.maximum(a.max(axis=1), -5), "i32"),
    "arith.minui": (
        "-1",
        lambda a: a.view(np.uint32).min(axis=1).view(np.int32),
        "i32",
    ),
    "arith.xori": ("0", lambda a: np.bitwise_xor.reduce(a, axis=1), "i32"),
    "arith.andi": ("-1", lambda a: np.bitwise_and.reduce(a, axis=1), "i32"),
}


def reduce_kernel(op: str, init: str, t: str, rows: int, n: int) -> str:
    t2, t1 = f"memref<{rows}x{n}x{t}>", f"memref<{rows}x{t}>"
    return f"""
    func.func @k(%a: {t2}, %o: {t1}) attributes {{loop.kernel}} {{
      %init = arith.constant {init} : {t}
      loop.for %r = 0 to {rows} step 1 parallel {{
        %s = loop.for %i = 0 to {n} step 1 reduction iter_args(%acc = %init) -> ({t}) {{
          %x = memref.load %a[%r, %i] : {t2}
          %y = {op} %acc, %x : {t}
          loop.yield %y : {t}
        }}
        memref.store %s, %o[%r] : {t1}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t2}, %o: {t1}) {{
      func.call @k(%a, %o) : ({t2}, {t1}) -> ()
      func.return
    }}"""


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("n", [1, 7, 8, 9, 37, 100])
def test_reductions(op, n):
    init, reference, t = REDUCE[op]
    rows = 3
    rng = np.random.default_rng(n)
    if t == "f32":
        a = rng.uniform(0.5, 1.5, (rows, n)).astype(np.float32)
        if "max" in op or "min" in op:
            a = rng.standard_normal((rows, n)).astype(np.float32)
    else:
        a = rng.integers(-50, 50, (rows, n)).astype(np.int32)
        if op == "arith.muli":
            a = rng.integers(-3, 4, (rows, n)).astype(np.int32)
    (scalar,), (vector,), module = run_both(
        reduce_kernel(op, init, t, rows, n), [a], [a[:, 0].copy()]
    )
    if t == "f32":
        np.testing.assert_allclose(vector, reference(a), rtol=1e-5)
    else:
        np.testing.assert_array_equal(vector, reference(a))
        np.testing.assert_array_equal(vector, scalar)
    assert vector_loops(module) == (1 if n >= 8 else 0)


def test_nan_propagates_through_max_reduction():
    a = np.ones((1, 37), np.float32)
    a[0, 3] = np.nan  # in the vector part
    b = np.ones((1, 37), np.float32)
    b[0, 35] = np.nan  # in the remainder
    src = reduce_kernel("arith.maximumf", "0xFF800000", "f32", 1, 37)
    for x in (a, b):
        (scalar,), (vector,), _ = run_both(src, [x], [x[:, 0].copy()])
        assert np.isnan(vector[0]) and np.isnan(scalar[0])


def test_float_sum_stays_in_order_without_reassoc():
    src = reduce_kernel("arith.addf", "0.0", "f32", 2, 64)
    _, module = compiled(src, "loop-vectorize{reassoc=false}")
    assert vector_loops(module) == 0


def softmax_kernel(rows: int, n: int) -> str:
    t = f"memref<{rows}x{n}xf32>"
    return f"""
    func.func @k(%a: {t}, %o: {t}) attributes {{loop.kernel}} {{
      %ninf = arith.constant 0xFF800000 : f32
      %z = arith.constant 0.0 : f32
      loop.for %r = 0 to {rows} step 1 parallel {{
        %m = loop.for %i = 0 to {n} step 1 reduction iter_args(%acc = %ninf) -> (f32) {{
          %x = memref.load %a[%r, %i] : {t}
          %y = arith.maximumf %acc, %x : f32
          loop.yield %y : f32
        }}
        %s = loop.for %i = 0 to {n} step 1 reduction iter_args(%acc = %z) -> (f32) {{
          %x = memref.load %a[%r, %i] : {t}
          %d = arith.subf %x, %m : f32
          %e = math.exp %d : f32
          %y = arith.addf %acc, %e : f32
          loop.yield %y : f32
        }}
        loop.for %i = 0 to {n} step 1 parallel {{
          %x = memref.load %a[%r, %i] : {t}
          %d = arith.subf %x, %m : f32
          %e = math.exp %d : f32
          %y = arith.divf %e, %s : f32
          memref.store %y, %o[%r, %i] : {t}
          loop.yield
        }}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t}, %o: {t}) {{
      func.call @k(%a, %o) : ({t}, {t}) -> ()
      func.return
    }}"""


@pytest.mark.parametrize("n", SIZES)
def test_softmax_rows(n):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((5, n)) * 4).astype(np.float32)
    _, (vector,), module = run_both(softmax_kernel(5, n), [a], [a])
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(vector, e / e.sum(axis=1, keepdims=True), rtol=3e-6)
    assert vector_loops(module) == (3 if n >= 8 else 0)


def shift_kernel(n: int, elementwise: bool) -> str:
    """o[i] = a[i + 1] - a[i] over one buffer (in place when elementwise)."""
    attrs = "loop.kernel" + (", loop.elementwise = 1 : i64" if elementwise else "")
    t = f"memref<{n + 1}xf32>"
    return f"""
    func.func @k(%a: {t}, %o: {t}) attributes {{{attrs}}} {{
      %c1 = arith.constant 1 : index
      loop.for %i = 0 to {n} step 1 parallel {{
        %j = arith.addi %i, %c1 : index
        %x = memref.load %a[%j] : {t}
        %y = memref.load %a[%i] : {t}
        %d = arith.subf %x, %y : f32
        memref.store %d, %o[%i] : {t}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t}, %o: {t}) {{
      func.call @k(%a, %o) : ({t}, {t}) -> ()
      func.return
    }}"""


@pytest.mark.parametrize("n", [1, 9, 37])
def test_shifted_loads_and_possible_overlap(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n + 1).astype(np.float32)
    expected = np.append(a[1:] - a[:-1], 0).astype(np.float32)
    _, (vector,), module = run_both(shift_kernel(n, False), [a], [a])
    np.testing.assert_array_equal(vector, expected)
    assert vector_loops(module) == (1 if n >= 8 else 0)
    # elementwise kernels may write over their input: the pass must not vectorize
    _, module = compiled(shift_kernel(n, True), "loop-vectorize")
    assert vector_loops(module) == 0
    # and the in-place program (output over input) still matches the scalar one
    program, _ = compiled(shift_kernel(n, True), "loop-vectorize")
    buf = a.copy()
    program.run([buf, buf])
    np.testing.assert_array_equal(buf[:n], expected[:n])


def test_mixed_types_and_casts_between_floats():
    n = 37
    t16, t32 = f"memref<{n}xf16>", f"memref<{n}xf32>"
    src = f"""
    func.func @k(%a: {t16}, %b: {t32}, %o: {t16}) attributes {{loop.kernel}} {{
      loop.for %i = 0 to {n} step 1 parallel {{
        %x = memref.load %a[%i] : {t16}
        %w = arith.extf %x : f16 to f32
        %y = memref.load %b[%i] : {t32}
        %s = arith.mulf %w, %y : f32
        %r = arith.truncf %s : f32 to f16
        memref.store %r, %o[%i] : {t16}
        loop.yield
      }}
      func.return
    }}
    func.func @main(%a: {t16}, %b: {t32}, %o: {t16}) {{
      func.call @k(%a, %b, %o) : ({t16}, {t32}, {t16}) -> ()
      func.return
    }}"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float32)
    (scalar,), (vector,), module = run_both(src, [a, b], [a])
    np.testing.assert_array_equal(vector, (a.astype(np.float32) * b).astype(np.float16))
    np.testing.assert_array_equal(vector, scalar)
    assert vector_loops(module) == 1


@pytest.mark.parametrize("width", [2, 4, 16])
def test_other_widths(width):
    n = 37
    rng = np.random.default_rng(width)
    a = rng.uniform(-3, 3, (2, n)).astype(np.float32)
    s = rng.uniform(-2, 2, 2).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    (scalar,), (vector,), _ = run_both(
        row_kernel(2, n), [a, s, b], [a], f"loop-vectorize{{width={width}}}"
    )
    np.testing.assert_allclose(vector, scalar, rtol=2e-6, atol=2e-6)


def test_vectorized_ir_round_trips():
    from xdsl.parser import Parser

    from smelt.universe import make_context

    _, module = compiled(softmax_kernel(2, 37), "loop-vectorize")
    text = str(module)
    again = Parser(make_context(), text).parse_module()
    again.verify()
    assert str(again) == text
