"""The llvm target on whole loop-level programs: loops with iter_args, matmuls,
@main's weights, views and allocs, vector ops, the generated code and its errors
(hand-written modules, JIT-compiled, against numpy; helpers from
test_llvm_target.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_llvm_target import RNG, elementwise, floats, parse, run, run_elementwise

from smelt.errors import SmeltError
from smelt.lowering.llvm.emit import emit_llvm_ir
from smelt.lowering.llvm.jit import compile_to_native

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


def test_unscheduled_loop_nest_matmul():
    """A plain i, k, j loop-nest matmul (no schedule) of sizes that are no multiple
    of a vector width, against numpy."""
    n = 67
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
    program.run([a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


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
