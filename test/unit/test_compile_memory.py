"""A compile's memory: a pass that replaces a weight lets the old bytes go at once
(an erased op lives on in reference cycles, and a compile makes garbage
collections rare), so that the peak holds each weight about once."""

from __future__ import annotations

import gc
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.ir import Block

from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.instrument import DumpOptions, Instrumentation
from smelt.dialects import graph, loop
from smelt.lowering.scalar_ops import memref_type


def _model():
    """Two convs with equal weights (graph-simplify merges them), both turned
    NHWC (graph-convert-layout) and packed, then a MatMul (loop-pack-constant)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    g = rng.standard_normal((16 * 6 * 6, 40)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["c2"], ["f"]),
        helper.make_node("MatMul", ["f", "g"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w1"), numpy_helper.from_array(w, "w2"),
             numpy_helper.from_array(g, "g")]  # fmt: skip
    graph_ = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 40])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph_, opset_imports=[helper.make_opsetid("", 17)])


def _dead_weights(module: ModuleOp) -> list[tuple]:
    """Dense attributes of more than 1 KiB that are alive but in no op of
    `module` (only garbage can hold them), by shape."""
    live = {
        id(v.data.data)
        for op in module.walk()
        for d in (op.properties, op.attributes)
        for v in d.values()
        if isinstance(v, DenseIntOrFPElementsAttr)
    }
    return [
        tuple(o.get_shape())
        for o in gc.get_objects()
        if type(o) is DenseIntOrFPElementsAttr
        and len(o.data.data) > 1024
        and id(o.data.data) not in live
    ]


def test_no_pass_leaves_a_replaced_weight_alive():
    module = import_graph(_model())
    dead: dict[str, list] = {}

    def check(previous, op, following) -> None:
        if previous is not None:
            found = _dead_weights(op)
            if found:
                dead.setdefault(previous.name, found)

    gc.collect()
    gc.disable()  # garbage stays: only what the passes dropped themselves goes
    try:
        # (no reproducer: its copy of the input holds every imported weight)
        quiet = Instrumentation(DumpOptions(reproducer=False))
        lower(module, pipelines.preset("cpu", "O2", 1, "x86-64-v3"), check, quiet)
    finally:
        gc.enable()
    assert not dead, f"passes left replaced weights alive: {dead}"


def test_an_erased_constant_drops_its_bytes():
    array = np.arange(4096, dtype=np.float32)
    for op in (
        graph.ConstantOp.from_array(array),
        loop.ConstantOp(
            graph.array_to_dense(array), memref_type(graph.array_to_dense(array).type)
        ),
    ):
        raw = op.value.data.data
        block = Block([op])
        held = sys.getrefcount(raw)
        block.erase_op(op)
        assert sys.getrefcount(raw) == held - 1
