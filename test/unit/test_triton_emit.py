"""The triton target's emitter: modes, schedules and source text (no Triton needed)."""

from __future__ import annotations

import ast
import os
import sys

import pytest
from xdsl.dialects.builtin import StringAttr
from xdsl.parser import Parser

from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.options import CompileOptions
from smelt.errors import SmeltError
from smelt.lowering.triton import schedule
from smelt.lowering.triton.emit_dot import FP32_DOT_ATTR
from smelt.lowering.triton.prelude import PRELUDE
from smelt.lowering.triton.source import emit_triton, module_kernels
from smelt.universe import make_context

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
from models import encoder_layer_model, mlp_model


def parse(src: str):
    module = Parser(make_context(), src).parse_module()
    module.verify()
    return module


def kernels_of(src: str):
    return module_kernels(parse(src))


ELEMENTWISE = """
func.func @relu(%x: memref<3x5xf32>, %y: memref<3x5xf32>) attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 3 step 1 parallel {
    loop.for %j = 0 to 5 step 1 parallel {
      %v = memref.load %x[%i, %j] : memref<3x5xf32>
      %r = arith.maximumf %v, %zero : f32
      memref.store %r, %y[%i, %j] : memref<3x5xf32>
      loop.yield
    }
    loop.yield
  }
  func.return
}
"""

ROW_SUM = """
func.func @row_sum(%x: memref<6x300xf32>, %y: memref<6xf32>) attributes {loop.kernel} {
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 6 step 1 parallel {
    %s = loop.for %j = 0 to 300 step 1 reduction iter_args(%acc = %zero) -> (f32) {
      %v = memref.load %x[%i, %j] : memref<6x300xf32>
      %n = arith.addf %acc, %v : f32
      loop.yield %n : f32
    }
    memref.store %s, %y[%i] : memref<6xf32>
    loop.yield
  }
  func.return
}
"""

TWO_NESTS = """
func.func @concat(%a: memref<2xf32>, %b: memref<3xf32>, %y: memref<5xf32>) attributes {loop.kernel} {
  %c2 = arith.constant 2 : index
  loop.for %i = 0 to 2 step 1 parallel {
    %v = memref.load %a[%i] : memref<2xf32>
    memref.store %v, %y[%i] : memref<5xf32>
    loop.yield
  }
  loop.for %j = 0 to 3 step 1 parallel {
    %v = memref.load %b[%j] : memref<3xf32>
    %k = arith.addi %j, %c2 : index
    memref.store %v, %y[%k] : memref<5xf32>
    loop.yield
  }
  func.return
}
"""


def test_elementwise_kernel_is_one_block_of_lanes_with_a_tail_mask():
    (k,) = kernels_of(ELEMENTWISE)["relu"]
    assert k.mode == "elementwise"
    assert k.grid == 1 and k.constexprs == {"BLOCK": 32}
    assert "mask_l = offs < 15" in k.source
    # same-shape operands index with the flat lane offset (contiguous, vectorizable)
    assert "tl.load(x + offs, mask=mask_l)" in k.source
    assert "propagate_nan=tl.PropagateNan.ALL" in k.source
    assert k.signature == ("*fp32", "*fp32")


def test_row_reduction_runs_as_blocks_reduced_after_the_loop():
    (k,) = kernels_of(ROW_SUM)["row_sum"]
    assert k.mode == "rows"
    assert k.constexprs == {"BLOCK_M": 8, "BLOCK_R": 512}
    assert "range(0, 300, BLOCK_R)" in k.source
    assert "tl.sum(acc" in k.source
    assert "tl.where(mask_l & mask_r" in k.source


def test_each_top_level_nest_is_its_own_launch():
    fns = kernels_of(TWO_NESTS)["concat"]
    assert [f.name for f in fns] == ["concat_p0", "concat_p1"]
    assert [f.mode for f in fns] == ["elementwise", "elementwise"]


def test_generated_module_is_valid_python():
    src = emit_triton(parse(ELEMENTWISE + ROW_SUM + TWO_NESTS))
    assert src.startswith(PRELUDE)
    ast.parse(src)


def _lowered(model):
    module = import_graph(model)
    lower(module, pipelines.preset("gpu"))
    return module_kernels(module)


def test_mlp_contractions_become_dot_tiles_with_fused_epilogues():
    kernels = _lowered(mlp_model(batch=4, d_in=16, hidden=32, d_out=10))
    modes = {name: [f.mode for f in fns] for name, fns in kernels.items()}
    assert modes == {
        "fused_matmul_0": ["dot"],
        "fused_gemm_0": ["dot"],
        "fused_softmax_0": ["elementwise"],
    }
    src = kernels["fused_matmul_0"][0].source
    assert 'input_precision="tf32"' in src
    # bias + relu applied to the finished tile, then one store
    assert src.count("tl.store(") == 1 and "tl.maximum(" in src


def test_f32_dots_multiply_in_f32_when_the_module_says_ieee():
    """`smelt.compile(..., tf32=False)` marks the module (emit_dot.FP32_DOT_ATTR):
    every f32 tl.dot then asks for ieee products, none for tf32."""
    module = import_graph(encoder_layer_model(seq=16, hidden=32, heads=2, ffn=64))
    lower(module, pipelines.preset("gpu"))
    module.attributes[FP32_DOT_ATTR] = StringAttr("ieee")
    src = emit_triton(module)
    assert src.count('input_precision="ieee"') == 8
    assert 'input_precision="tf32"' not in src


def test_tf32_is_a_gpu_option():
    with pytest.raises(SmeltError, match="tf32=False"):
        CompileOptions(target="cpu", tf32=False)
    assert CompileOptions(target="gpu", device="cpu", tf32=False).record()["tf32"] is False


def test_encoder_layer_uses_dots_and_row_blocks():
    kernels = _lowered(encoder_layer_model(seq=16, hidden=32, heads=2, ffn=64))
    modes = [f.mode for fns in kernels.values() for f in fns]
    assert modes.count("dot") == 8  # q, k, v, scores, context, out, ffn1, ffn2
    assert modes.count("rows") == 3  # softmax, two layer norms


def test_unsupported_op_names_the_kernel():
    src = """
    func.func @bad(%x: memref<4xf32>, %y: memref<4xf32>) attributes {loop.kernel} {
      loop.for %i = 0 to 4 step 1 parallel {
        %v = memref.load %x[%i] : memref<4xf32>
        %r = math.cbrt %v : f32
        memref.store %r, %y[%i] : memref<4xf32>
        loop.yield
      }
      func.return
    }
    """
    with pytest.raises(SmeltError, match="math.cbrt.*@bad"):
        kernels_of(src)


@pytest.mark.parametrize(
    "m, n, k, bits, expected",
    [
        (8192, 16384, 4096, 16, (128, 128, 64, 8)),
        (4, 10, 32, 32, (64, 16, 32, 4)),
        (4096, 4096, 4096, 8, (128, 128, 128, 8)),
    ],
)
def test_dot_schedule_keeps_wgmma_shapes(m, n, k, bits, expected):
    s = schedule.dot(m, n, k, bits)
    got = (s.block("BLOCK_M"), s.block("BLOCK_N"), s.block("BLOCK_K"), s.num_warps)
    assert got == expected
    assert s.block("BLOCK_M") % 64 == 0  # one or two warpgroups of 64 rows
    assert 2 <= s.num_stages <= 4
