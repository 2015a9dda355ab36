"""loop-vectorize's masked tails (`tail=masked`, AVX-512 opmasks): one masked
vector iteration instead of the scalar remainder keeps meaning on awkward sizes,
reductions included; the IR round-trips and the llvm target emits
llvm.masked.load / llvm.masked.store."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_llvm_target import parse
from test_loop_vectorize import (
    REDUCE,
    compiled,
    reduce_kernel,
    row_kernel,
    run_both,
    shift_kernel,
    softmax_kernel,
)
from test_loop_vectorize_bodies import random_kernel
from xdsl.dialects import memref, vector

from smelt.dialects import loop

MASKED = "loop-vectorize{width=8 tail=masked}"
SIZES = [2, 3, 7, 9, 13, 17, 31, 37, 101]


def ops_of(module, kind) -> int:
    return sum(1 for op in module.walk() if isinstance(op, kind))


def scalar_loads(module) -> int:
    """memref.loads left in innermost loops (scalar remainders); invariant ones
    are hoisted out of them."""

    def innermost(op) -> bool:
        return isinstance(op, loop.ForOp) and not any(
            isinstance(o, loop.ForOp) for o in op.body.block.ops
        )

    return sum(
        1
        for op in module.walk()
        if isinstance(op, memref.LoadOp) and innermost(op.parent_op())
    )


@pytest.mark.parametrize("n", SIZES)
def test_elementwise_tail_is_one_masked_iteration(n):
    rng = np.random.default_rng(n)
    a = rng.uniform(-3, 3, (3, n)).astype(np.float32)
    s = rng.uniform(-2, 2, 3).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    (scalar,), (vector_,), module = run_both(row_kernel(3, n), [a, s, b], [a], MASKED)
    erf = np.vectorize(math.erf)
    x = a.astype(np.float64)
    expected = np.tanh(x * s[:, None] + b) * erf(x) + np.exp(-np.abs(x))
    np.testing.assert_allclose(vector_, expected, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(vector_, scalar, rtol=2e-6, atol=2e-6)
    assert ops_of(module, vector.MaskedStoreOp) == (1 if n % 8 >= 2 else 0)
    assert scalar_loads(module) == (0 if n % 8 != 1 else 3)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("n", [3, 13, 37])
def test_masked_reductions(op, n):
    init, reference, t = REDUCE[op]
    rng = np.random.default_rng(n)
    if t == "f32":
        a = rng.uniform(0.5, 1.5, (3, n)).astype(np.float32)
        if "max" in op or "min" in op:
            a = rng.standard_normal((3, n)).astype(np.float32)
    else:
        a = rng.integers(-50, 50, (3, n)).astype(np.int32)
        if op == "arith.muli":
            a = rng.integers(-3, 4, (3, n)).astype(np.int32)
    src = reduce_kernel(op, init, t, 3, n)
    (scalar,), (vector_,), module = run_both(src, [a], [a[:, 0].copy()], MASKED)
    if t == "f32":
        np.testing.assert_allclose(vector_, reference(a), rtol=1e-5)
    else:
        np.testing.assert_array_equal(vector_, reference(a))
    assert ops_of(module, loop.SelectOp) == 1
    assert ops_of(module, vector.MaskedLoadOp) == 1


def test_nan_in_the_masked_tail_propagates_and_inactive_lanes_do_not_count():
    src = reduce_kernel("arith.maximumf", "0xFF800000", "f32", 1, 13)
    a = np.full((1, 13), -5.0, np.float32)
    (_,), (vector_,), _ = run_both(src, [a], [a[:, 0].copy()], MASKED)
    assert vector_[0] == -5.0  # not the 0.0 that inactive lanes load
    a[0, 11] = np.nan
    (_,), (vector_,), _ = run_both(src, [a], [a[:, 0].copy()], MASKED)
    assert np.isnan(vector_[0])


@pytest.mark.parametrize("n", [5, 13, 37])
def test_softmax_rows_masked(n):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((5, n)) * 4).astype(np.float32)
    _, (vector_,), module = run_both(softmax_kernel(5, n), [a], [a], MASKED)
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(vector_, e / e.sum(axis=1, keepdims=True), rtol=3e-6)
    assert ops_of(module, vector.MaskedStoreOp) == 1


@pytest.mark.parametrize("n", [3, 13])
def test_masked_tail_stays_inside_the_buffer(n):
    """o[i] = a[i + 1] - a[i]: the last masked lane reads a's last element; a
    buffer that ends right there must not be read past (the masks guard it)."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n + 1).astype(np.float32)
    expected = np.append(a[1:] - a[:-1], 0).astype(np.float32)
    _, (vector_,), module = run_both(shift_kernel(n, False), [a], [a], MASKED)
    np.testing.assert_array_equal(vector_, expected)
    assert ops_of(module, vector.MaskedLoadOp) == 2


def test_one_iteration_left_stays_scalar_and_scalar_tail_option():
    _, module = compiled(row_kernel(2, 17), MASKED)
    assert ops_of(module, vector.MaskedStoreOp) == 0  # 17 = 2·8 + 1: scalar
    _, module = compiled(row_kernel(2, 13), "loop-vectorize{width=8 tail=scalar}")
    assert ops_of(module, vector.MaskedStoreOp) == 0
    _, module = compiled(row_kernel(2, 13), "loop-vectorize{width=8 mask_min=6}")
    assert ops_of(module, vector.MaskedStoreOp) == 0  # no target: no masks


@pytest.mark.parametrize("seed", range(8))
def test_random_bodies_masked_match_scalar(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.choice(SIZES))
    src = random_kernel(rng, n)
    inputs = [rng.uniform(-2, 2, n + 3).astype(np.float32) for _ in range(3)]
    outputs = [np.zeros(n, np.float32), np.zeros(1, np.float32)]
    (o1, s1), (o2, s2), _ = run_both(src, inputs, outputs, MASKED)
    np.testing.assert_allclose(o2, o1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s2, s1, rtol=1e-5)


def test_masked_ir_round_trips_and_emits_masked_intrinsics():
    from xdsl.parser import Parser

    from smelt.lowering.llvm.emit import emit_llvm_ir
    from smelt.universe import make_context

    _, module = compiled(softmax_kernel(2, 13), MASKED)
    text = str(module)
    again = Parser(make_context(), text).parse_module()
    again.verify()
    assert str(again) == text
    llvm_ir = emit_llvm_ir(parse(text))
    assert "llvm.masked.load.v8f32" in llvm_ir
    assert "llvm.masked.store.v8f32" in llvm_ir
