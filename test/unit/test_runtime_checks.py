"""Gather indices out of range fail the run with a clear error (as onnxruntime
does), at 1 and 2 threads and with the copy loop vectorized; never a clamped
answer. Negative indices in range count from the end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import SmeltError

DATA = np.arange(10 * 64, dtype=np.float32).reshape(10, 64)


def gather_model(axis: int, indices_shape, constant=None) -> onnx.ModelProto:
    data = DATA if axis == 0 else DATA.T.copy()
    out_shape = list(indices_shape) + [64] if axis == 0 else [64, *indices_shape]
    inits = [numpy_helper.from_array(data, "d")]
    inputs = []
    if constant is None:
        inputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, indices_shape))
    else:
        inits.append(numpy_helper.from_array(np.array(constant, np.int64), "i"))
    nodes = [helper.make_node("Gather", ["d", "i"], ["g"], axis=axis)]
    if constant is not None:  # something to compute after the folded gather
        inputs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, out_shape))
        nodes.append(helper.make_node("Add", ["g", "x"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["g"], ["y"]))
    graph = helper.make_graph(
        nodes, "gather", inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("axis", [0, 1])
def test_out_of_range_indices_fail_the_run(threads, axis):
    compiled = smelt.compile(gather_model(axis, [3]), "cpu", threads=threads)
    data = DATA if axis == 0 else DATA.T
    good = np.array([0, -1, 9])
    np.testing.assert_array_equal(
        compiled.run({"i": good})["y"], np.take(data, good, axis=axis)
    )
    for bad in ([0, 10, 1], [-11, 0, 0], [10**6, 0, 0], [0, 0, -(10**6)]):
        with pytest.raises(SmeltError, match=r"index is out of range \[-10, 10\)"):
            compiled.run({"i": np.array(bad)})
    # the failure does not stick to the next run
    np.testing.assert_array_equal(
        compiled.run({"i": good})["y"], np.take(data, good, axis=axis)
    )


def test_the_vectorized_copy_keeps_the_check():
    """loop-vectorize hoists the (loop-invariant) check before the vector loop."""
    from smelt.compiler import pipelines
    from smelt.compiler.driver import import_graph, lower
    from smelt.dialects import loop

    module = import_graph(gather_model(0, [4]))
    lower(module, pipelines.preset("cpu", "O2", 1).removesuffix(",buffer-plan"))
    names = [op.name for op in module.walk()]
    assert "vector.load" in names and "vector.store" in names
    checks = [op for op in module.walk() if isinstance(op, loop.CheckOp)]
    assert checks and all(
        not any(o.name == "vector.load" for o in op.parent_block().ops)
        for op in checks
    )
    compiled = smelt.compile(gather_model(0, [4]), "cpu")
    with pytest.raises(SmeltError, match="out of range"):
        compiled.run({"i": np.array([1, 2, 3, 12])})


def test_a_gather_folded_at_import_names_the_node():
    model = gather_model(0, [2], constant=[0, 12])
    with pytest.raises(SmeltError, match=r"Gather#0: .*out of range \[-10, 10\)"):
        smelt.compile(model, "cpu")
