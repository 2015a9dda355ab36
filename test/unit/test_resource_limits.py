"""A model bigger than the machine is refused at compile time with the sizes and
its largest buffers named, before anything is allocated."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import smelt
from smelt.errors import SmeltError
from smelt.lowering.llvm.plan import machine_memory


@pytest.mark.parametrize("shape", [[1 << 20, 1 << 15], [1 << 33, 1 << 33]])
def test_a_model_larger_than_the_machine_is_refused(shape):
    if not machine_memory():
        pytest.skip("the OS does not report the machine's memory")
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(
        nodes, "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(SmeltError, match=r"more than this machine's .* GiB; its largest"):
        smelt.compile(model, "cpu")
