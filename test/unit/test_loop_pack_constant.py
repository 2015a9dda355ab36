"""loop-pack-constant's two ways to lay out a weight: a strided view where the
indices are affine in the loops, a gather of per-element positions elsewhere;
both must give the same bytes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.dialects import loop
from smelt.passes import loop_pack_constant


def conv_gemm_model():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 40, 3, 3)).astype(np.float32)
    g = rng.standard_normal((48 * 6 * 6, 70)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["c"], ["f"]),
        helper.make_node("MatMul", ["f", "g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [9, 40, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [9, 70])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(g, "g")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def packed_constants(cpu: str) -> list[bytes]:
    module = import_graph(conv_gemm_model())
    lower(module, pipelines.preset("cpu", "O2", 1, cpu))
    return [
        op.value.data.data for op in module.walk() if isinstance(op, loop.ConstantOp)
    ]


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
def test_strided_packing_equals_the_gather(cpu, monkeypatch):
    strided = packed_constants(cpu)
    monkeypatch.setattr(loop_pack_constant, "_is_affine", lambda value: False)
    monkeypatch.setattr(loop_pack_constant, "CHUNK_BYTES", 1000)  # many pieces
    gathered = packed_constants(cpu)
    assert len(strided) == len(gathered) >= 2
    assert strided == gathered
