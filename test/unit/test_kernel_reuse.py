"""Kernel reuse inside one compile (loop-dedup-kernels in the CPU presets): equal
kernels are scheduled, vectorized and compiled once, their callers call the
first, and nothing else in the LLVM IR changes."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import onnx
from llvmlite import ir
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.options import CompileOptions
from smelt.lowering.llvm.emit import lower_module
from smelt.lowering.llvm.emit_kernel import kernel_function_name

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
import models  # noqa: E402

DEDUP = "loop-dedup-kernels"


def _blocks_model() -> onnx.ModelProto:
    """x[1, 8, 10, 10] → two equal blocks (3x3 Conv 8→8 with bias, Relu), each
    with its own weights → a third block that differs (1x1 Conv 8→4) → y."""
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i, (cout, k) in enumerate([(8, 3), (8, 3), (4, 1)]):
        w = rng.standard_normal((cout, 8, k, k)).astype(np.float32) / 8
        b = rng.standard_normal(cout).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}")]
        inits += [numpy_helper.from_array(b, f"b{i}")]
        pads = [k // 2] * 4
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=pads,
                             name=f"conv{i}"),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
        ]  # fmt: skip
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes, "blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4, 10, 10])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _metadata(module: ir.Module) -> dict[str, str]:
    """!N → its node's text, the module's numbering replaced by the nodes it
    names (removing a function renumbers the loop metadata of those after it)."""
    nodes = dict(
        line.split(" = ", 1) for line in str(module).splitlines() if _NODE.match(line)
    )
    return {
        ref: _REF.sub(lambda m: "!self" if m[0] == ref else nodes.get(m[0], m[0]), text)
        for ref, text in nodes.items()
    }


_NODE = re.compile(r"^![0-9]+ = ")
_REF = re.compile(r"![0-9]+\b")


def _defined_kernels(module: ir.Module) -> dict[str, str]:
    """Kernel symbol → its LLVM function's text with that symbol normalised and
    metadata references replaced by what they name."""
    prefix, nodes = kernel_function_name(""), _metadata(module)
    return {
        name: _REF.sub(lambda m: nodes[m[0]], str(fn).replace(f'"{name}"', '"KERNEL"'))
        for name, fn in module.globals.items()
        if isinstance(fn, ir.Function) and fn.blocks and name.startswith(prefix)
    }


def test_equal_blocks_compile_once_and_match_onnxruntime():
    model = _blocks_model()
    compiled = smelt.compile(model)
    stats = compiled.info["stats"]
    # calls in @main (7 on Emerald Rapids, x86-64-v3 and -v2: NCHW → NHWC, per
    # 3x3 block its padding and its conv with bias and Relu, the 1x1 conv, NHWC
    # → NCHW): the second 3x3 block calls the first one's padding and conv
    distinct = stats["distinct_kernels"]
    assert stats["kernels"] - distinct == 2
    assert len(_defined_kernels_in(compiled.program.llvm_ir)) == distinct
    x = np.random.default_rng(1).standard_normal((1, 8, 10, 10)).astype(np.float32)
    got = compiled.run({"x": x})["r2"]
    want = models.run_onnxruntime(model, {"x": x})["r2"]
    assert models.rel_error(got, want) < 1e-5


def _defined_kernels_in(llvm_ir: str) -> list[str]:
    """The kernels the optimized LLVM IR defines (tasks outlined from a kernel
    aside)."""
    prefix = kernel_function_name("")
    return [
        line for line in llvm_ir.splitlines()
        if line.startswith("define") and ".task" not in line
        and (f"@{prefix}" in line or f'@"{prefix}' in line)
    ]  # fmt: skip


def test_llvm_ir_differs_only_by_the_removed_duplicates():
    """The same model through the preset with and without loop-dedup-kernels:
    every kernel the reused build keeps is the same LLVM function; the build
    without reuse has two more (the second block's padding and conv), each equal
    to another but for its name; the entry point differs only in the names it
    calls."""
    spec = CompileOptions().resolved_pipeline()
    assert f",{DEDUP}," in spec
    reused = lower_module(lower(import_graph(_blocks_model()), spec)).ir_module
    plain_spec = spec.replace(f",{DEDUP},", ",")
    plain = lower_module(lower(import_graph(_blocks_model()), plain_spec)).ir_module
    kept, every = _defined_kernels(reused), _defined_kernels(plain)
    assert len(every) - len(kept) == 2
    first_of: dict[str, str] = {}  # every kernel → the first equal one
    for name, text in every.items():
        first_of[name] = next(n for n, t in every.items() if t == text)
    assert sorted(set(first_of.values())) == sorted(kept)
    for name, text in kept.items():  # the same function
        assert text == every[name]
    entry = str(plain.get_global("smelt_main"))
    for name, first in first_of.items():
        entry = entry.replace(f'"{name}"', f'"{first}"')
    assert entry == str(reused.get_global("smelt_main"))
    others = {n for n in plain.globals if not n.startswith(kernel_function_name(""))}
    assert others == {n for n in reused.globals if n not in kept}
