"""The triton runtime's launch plan: one arena laid out by buffer-plan, views per
buffer, identical kernels sharing one function (built on the CPU, not launched)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from test_triton_emit import parse

from smelt.compiler.driver import lower
from smelt.errors import SmeltError
from smelt.lowering.triton.runtime import TritonProgram, load_source


def _relu(name: str) -> str:
    return f"""
func.func @{name}(%x: memref<32xf32>, %y: memref<32xf32>) attributes {{loop.kernel}} {{
  %zero = arith.constant 0.0 : f32
  loop.for %i = 0 to 32 step 1 parallel {{
    %v = memref.load %x[%i] : memref<32xf32>
    %r = arith.maximumf %v, %zero : f32
    memref.store %r, %y[%i] : memref<32xf32>
    loop.yield
  }}
  func.return
}}
"""


MODEL = (
    _relu("relu_0")
    + _relu("relu_1")
    + """
func.func @main(%x: memref<32xf32>, %y: memref<32xf32>)
    attributes {smelt.input_names = ["x"], smelt.output_names = ["y"]} {
  %t = loop.alloc : memref<32xf32>
  func.call @relu_0(%x, %t) : (memref<32xf32>, memref<32xf32>) -> ()
  %v = loop.view %t : memref<32xf32> -> memref<4x8xf32>
  %w = loop.view %v : memref<4x8xf32> -> memref<32xf32>
  func.call @relu_1(%w, %y) : (memref<32xf32>, memref<32xf32>) -> ()
  func.return
}
"""
)


def test_launch_plan_views_the_arena_and_shares_identical_kernels():
    module = lower(parse(MODEL), "buffer-plan")
    program = TritonProgram(module, device="cpu")
    assert not program.use_graph  # CUDA graphs only on a CUDA device
    assert [launch.kernel.name for launch in program.launches] == ["relu_0", "relu_1"]
    first, second = program.launches
    assert first.fn is second.fn  # same body, signature and schedule
    # relu_1 reads the intermediate through two views: the same arena bytes
    assert first.args[1].data_ptr() == second.args[0].data_ptr()
    assert first.args[1].data_ptr() == program.arena.data_ptr()
    assert program.n_inputs == 1


def test_generated_source_is_importable_from_its_file():
    module = load_source("import triton\nVALUE = 41 + 1\n")
    assert module.VALUE == 42 and module.__file__.endswith(".py")


def test_a_call_to_a_non_kernel_is_an_error():
    src = (
        _relu("relu_0").replace("attributes {loop.kernel} ", "")
        + """
func.func @main(%x: memref<32xf32>, %y: memref<32xf32>) {
  func.call @relu_0(%x, %y) : (memref<32xf32>, memref<32xf32>) -> ()
  func.return
}
"""
    )
    with pytest.raises(SmeltError, match="not a loop.kernel"):
        TritonProgram(parse(src), device="cpu")



def test_a_bitcast_view_has_the_new_element_type():
    copy = """
func.func @copy(%x: memref<32xi32>, %y: memref<32xi32>) attributes {loop.kernel} {
  loop.for %i = 0 to 32 step 1 parallel {
    %v = memref.load %x[%i] : memref<32xi32>
    memref.store %v, %y[%i] : memref<32xi32>
    loop.yield
  }
  func.return
}
func.func @main(%x: memref<32xf32>, %y: memref<32xi32>)
    attributes {smelt.input_names = ["x"], smelt.output_names = ["y"]} {
  %t = loop.alloc : memref<32xf32>
  func.call @relu_0(%x, %t) : (memref<32xf32>, memref<32xf32>) -> ()
  %b = loop.view %t : memref<32xf32> -> memref<32xi32>
  func.call @copy(%b, %y) : (memref<32xi32>, memref<32xi32>) -> ()
  func.return
}
"""
    module = lower(parse(_relu("relu_0") + copy), "buffer-plan")
    first, second = TritonProgram(module, device="cpu").launches
    assert first.args[1].data_ptr() == second.args[0].data_ptr()  # same bytes
    assert str(first.args[1].dtype) == "torch.float32"
    assert str(second.args[0].dtype) == "torch.int32"
