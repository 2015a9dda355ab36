"""Generated kernels compile ahead of time for Hopper (sm_90) without a GPU, and
contractions use wgmma. The default run compiles a representative set (every
mode, every dot operand type); the slow test sweeps the light models, the MLP and
the encoder layer within a time budget (SMELT_AOT_BUDGET_S, default 120 s)."""

from __future__ import annotations

import ast
import itertools
import os
import sys

import onnx
import pytest

pytest.importorskip("triton")

from smelt.compiler.cli import main as smelt_main
from smelt.compiler.triton_kernels import model_kernels
from smelt.lowering.triton import aot
from smelt.lowering.triton.source import module_kernels

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
from models import (
    LIGHT_MODELS,
    encoder_layer_model,
    light_model_path,
    mlp_model,
)
from test_triton_emit import parse

H100_SHARED_BYTES = 232448  # the most dynamic shared memory one block can have


def matmul(t: str, acc: str, ext: str, mul: str, add: str, zero: str) -> str:
    """A dot-form 256x512 @ 512x384 matmul kernel over `t` accumulating in `acc`."""
    return f"""
func.func @mm_{t}(%a: memref<256x512x{t}>, %b: memref<512x384x{t}>,
                  %c: memref<256x384x{acc}>) attributes {{loop.kernel}} {{
  %zero = arith.constant {zero} : {acc}
  loop.for %i = 0 to 256 step 1 parallel {{
    loop.for %j = 0 to 384 step 1 parallel {{
      %s = loop.for %k = 0 to 512 step 1 reduction iter_args(%acc = %zero) -> ({acc}) {{
        %x = memref.load %a[%i, %k] : memref<256x512x{t}>
        %w = memref.load %b[%k, %j] : memref<512x384x{t}>
        %xf = {ext} %x : {t} to {acc}
        %wf = {ext} %w : {t} to {acc}
        %p = {mul} %xf, %wf : {acc}
        %n = {add} %acc, %p : {acc}
        loop.yield %n : {acc}
      }}
      memref.store %s, %c[%i, %j] : memref<256x384x{acc}>
      loop.yield
    }}
    loop.yield
  }}
  func.return
}}
"""


def _kernels(src: str) -> list:
    return [k for fns in module_kernels(parse(src)).values() for k in fns]


def _model_kernels(model) -> list:
    return [k for fns in model_kernels(model).values() for k in fns]


def _check(results: list[aot.CompiledKernel]) -> None:
    for r in results:
        assert r.shared_bytes <= H100_SHARED_BYTES, r
        if r.mode == "dot":
            assert r.uses_wgmma, f"{r.name} does not use wgmma"


def test_dot_operand_types_use_wgmma():
    src = matmul("f16", "f32", "arith.extf", "arith.mulf", "arith.addf", "0.0")
    src += matmul("bf16", "f32", "arith.extf", "arith.mulf", "arith.addf", "0.0")
    src += matmul("i8", "i32", "arith.extsi", "arith.muli", "arith.addi", "0")
    kernels = _kernels(src)
    assert [k.mode for k in kernels] == ["dot"] * 3
    results = [aot.compile_kernel(k) for k in kernels]
    _check(results)
    assert all(r.uses_wgmma for r in results)
    for r, bits in zip(results, (16, 16, 8)):
        b = r.blocks
        one_stage = (b["BLOCK_M"] + b["BLOCK_N"]) * b["BLOCK_K"] * bits // 8
        assert r.shared_bytes >= 2 * one_stage, f"{r.name}: operand loads not pipelined"


def test_representative_model_kernels_compile_for_sm90():
    """resnet50's first conv (tf32 dot, im2col from a padded input), its pads, a
    max pool and the global average pool; the encoder's rows and batched dots."""
    resnet = _model_kernels(light_model_path("light_resnet50"))
    encoder = _model_kernels(
        encoder_layer_model(seq=128, hidden=768, heads=12, ffn=3072)
    )
    chosen = []
    for kernels in (resnet, encoder):
        by_mode: dict[str, list] = {}
        for k in kernels:
            by_mode.setdefault(k.mode, []).append(k)
        chosen += by_mode.get("dot", [])[:2] + by_mode.get("rows", [])[:2]
        chosen += by_mode.get("elementwise", [])[:2]
    pairs, errors, distinct = aot.compile_distinct(chosen, jobs=2)
    results = [r for _, r in pairs]
    assert not errors, errors[0]
    assert len(results) == distinct >= 10
    _check(results)
    assert {r.mode for r in results} == {"dot", "rows", "elementwise"}


def test_smelt_aot_writes_source_and_prints_the_table(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(batch=8, d_in=64, hidden=128, d_out=10), path)
    out_dir = tmp_path / "src"
    assert smelt_main(["aot", str(path), "--arch", "sm_90", "-o", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    assert "3 triton kernels for sm_90" in printed
    assert "2 use wgmma (2 of 2 dot kernels)" in printed
    (written,) = list(out_dir.iterdir())
    text = written.read_text()
    ast.parse(text)
    assert "LAUNCHES = [" in text and "def fused_matmul_0(" in text


def test_bad_arch_is_a_user_error(capsys):
    assert smelt_main(["aot", "light_zfnet512", "--arch", "hopper"]) == 1
    assert "sm_90" in capsys.readouterr().err


@pytest.mark.slow
def test_every_model_kernel_compiles_within_budget():
    """Round-robin over the 9 light models, the MLP and the encoder layer, distinct
    kernels only, two processes; fails on any compile error or dot without wgmma."""
    budget = float(os.environ.get("SMELT_AOT_BUDGET_S", "120"))
    models = [light_model_path(n) for n in LIGHT_MODELS]
    models += [mlp_model(), encoder_layer_model()]
    per_model = [_model_kernels(m) for m in models]
    order = [k for ks in itertools.zip_longest(*per_model) for k in ks if k is not None]
    pairs, errors, distinct = aot.compile_distinct(order, jobs=2, budget_s=budget)
    results = [r for _, r in pairs]
    assert not errors, errors[0]
    _check(results)
    dots = [r for r in results if r.mode == "dot"]
    print(
        f"\naot sweep: {len(results)} of {distinct} distinct kernels compiled for "
        f"sm_90 in {budget:.0f} s budget; {len(dots)} dot kernels, all with wgmma"
    )
    assert len(results) >= min(distinct, budget / 10)  # dots take ~5 s each
