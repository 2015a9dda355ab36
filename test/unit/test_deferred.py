"""The loop pipeline's kernel-local tail, run kernel by kernel during code
generation (smelt.compiler.deferred), makes exactly the IR of the pipeline run
in order, and a plain compile uses it; a crash in it names the pass."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import pipelines
from smelt.compiler.deferred import Deferred, scope, tail_start
from smelt.compiler.driver import import_graph, lower, parse_pipeline, run_passes
from smelt.compiler.instrument import DumpOptions, Instrumentation, module_text
from smelt.dialects.loop import is_kernel
from smelt.errors import InternalError
from smelt.lowering.llvm.emit import lower_module
from smelt.passes.loop_cse import LoopCsePass

RNG = np.random.default_rng(5)


def _conv_net():
    """conv + bias + residual + relu, a depthwise conv, pooling, a GEMM with
    GELU and softmax: the dense, depthwise, elementwise and GEMM schedules."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16, np.float32), "b")
    d = numpy_helper.from_array(rng.standard_normal((16, 1, 3, 3), np.float32), "d")
    m = numpy_helper.from_array(rng.standard_normal((16, 40), np.float32), "m")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Conv", ["r", "d"], ["e"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("GlobalAveragePool", ["e"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["l"]),
        helper.make_node("Gelu", ["l"], ["g"]),
        helper.make_node("Softmax", ["g"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 40])], [w, b, d, m],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cpu", ["host", "x86-64-v3"])
def test_deferred_tail_makes_the_ir_of_the_pipeline_in_order(threads, cpu):
    spec = pipelines.preset("cpu", "O2", threads, cpu)
    in_order = lower(import_graph(_conv_net()), spec)
    llvm_in_order = str(lower_module(in_order).ir_module)

    passes = parse_pipeline(spec).passes
    head = tail_start(passes)
    tail = [p.name for p in passes[head:]]
    assert "loop-vectorize" in tail and "buffer-plan" in tail, tail
    assert all(scope(p) == "module" for p in passes[:head][-1:])
    module = import_graph(_conv_net())
    instrument = Instrumentation()
    instrument.start(module, spec, passes, "input")
    run_passes(module, passes[:head], instrument)
    deferred = Deferred(module, passes[head:], head, instrument)
    assert len([op for op in module.ops if is_kernel(op)]) >= 5
    # the code generator runs them (a kernel with threaded loops takes the
    # thread pool: declared once its passes ran)
    llvm_deferred = str(lower_module(module, deferred=deferred).ir_module)
    assert module_text(module) == module_text(in_order)
    assert llvm_deferred == llvm_in_order


@pytest.mark.parametrize("threads", [1, 2])
def test_a_plain_compile_defers_and_matches_the_shown_one(threads):
    x = RNG.standard_normal((2, 16, 14, 14), np.float32)
    dump = DumpOptions(statistics=True)
    shown = smelt.compile(_conv_net(), "cpu", threads=threads, dump=dump)
    plain = smelt.compile(_conv_net(), "cpu", threads=threads)
    # the deferred passes ran in the target stage, not the loop stage
    assert plain.info["seconds"]["loop"] < shown.info["seconds"]["loop"]
    assert plain.info["stats"] == shown.info["stats"]
    assert plain.run({"x": x})["y"].tobytes() == shown.run({"x": x})["y"].tobytes()


def test_a_crash_in_a_deferred_pass_names_it(monkeypatch):
    def crash(self, ctx, op):
        raise RuntimeError("boom")

    monkeypatch.setattr(LoopCsePass, "apply", crash)
    with pytest.raises(InternalError, match=r"internal error in pass loop-cse.*boom"):
        smelt.compile(_conv_net(), "cpu")
