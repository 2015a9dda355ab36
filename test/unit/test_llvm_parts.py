"""The llvm target's module in several parts (split.PartStream): LLVM compiles
the first parts while Python still emits the rest; every split runs the same."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from smelt.compiler.driver import import_graph, lower
from smelt.compiler.pipelines import preset
from smelt.lowering.llvm.jit import compile_to_native


def _chain(widths: list[int]) -> onnx.ModelProto:
    """Gemm → Relu layers of different widths: one kernel each (none the same
    as another, so that nothing is deduplicated)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        inits += [
            numpy_helper.from_array(rng.standard_normal((a, b), np.float32), f"w{i}"),
            numpy_helper.from_array(rng.standard_normal(b).astype(np.float32), f"b{i}"),
        ]
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}"]))
        nodes.append(helper.make_node("Relu", [f"g{i}"], [f"r{i}"]))
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, widths[0]])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, widths[-1]])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


WIDTHS = [16, 24, 40, 8, 32, 12, 20]


def _reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for i in range(len(WIDTHS) - 1):
        x = np.maximum(x @ weights[f"w{i}"] + weights[f"b{i}"], 0)
    return x


def _run(parts: int, threads: int) -> tuple[np.ndarray, int]:
    model = _chain(WIDTHS)
    module = lower(import_graph(model), preset("cpu", threads=threads))
    program = compile_to_native(module, opt_level=2, parts=parts)
    x = np.random.default_rng(1).standard_normal((4, 16), np.float32)
    out = np.zeros((4, 20), np.float32)
    program.run([x, out])
    np.testing.assert_allclose(out, _reference(model, x), rtol=1e-5, atol=1e-5)
    return out, len(program.object_code)


@pytest.mark.parametrize("threads", [1, 2])
def test_parts_compile_and_run_the_same(threads):
    whole, objects = _run(1, threads)
    assert objects == 1
    for parts in (2, 3, 6, 50):
        out, objects = _run(parts, threads)
        assert 1 < objects <= min(parts, 6)  # at most one part per kernel
        np.testing.assert_array_equal(out, whole)


def test_each_kernel_task_and_body_is_defined_in_one_part(monkeypatch):
    """A kernel's outlined tasks and their bodies go with it into one part (a body
    copied into every later part tripled densenet121's IR at 2 threads)."""
    import re

    import smelt.lowering.llvm.jit as jit

    texts: list[str] = []
    original = jit._object

    def record(text, *args):
        texts.append(text)
        return original(text, *args)

    monkeypatch.setattr(jit, "_object", record)
    model = _chain([64, 256, 192, 320, 128])
    module = lower(import_graph(model), preset("cpu", threads=2))
    compile_to_native(module, opt_level=1, parts=3)
    assert len(texts) > 1
    defined: dict[str, int] = {}
    for text in texts:
        for name in re.findall(r'^define [^@]*@"?(smelt\.kernel\.[\w.]+)"?\(', text, re.M):
            defined[name] = defined.get(name, 0) + 1
    assert any(name.endswith(".body") for name in defined), sorted(defined)
    assert {n: c for n, c in defined.items() if c != 1} == {}
