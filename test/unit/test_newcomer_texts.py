"""Error and report texts a new user reads (#36): an unknown `constants=` name
lists the model's real inputs only (not the initializers older models also list
as graph inputs, nor their synthetic `…__SHAPE` ones); `smelt quantize --report`
says "larger" for a file that grew."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import SmeltError
from smelt.quantize import QuantizeResult, size_change


def _model_with_initializer_inputs() -> onnx.ModelProto:
    """y = x + w, with w (and a `w__SHAPE` the way the light models carry one)
    listed among the graph inputs as IR 3 models do."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    w_in = helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3])
    s_in = helper.make_tensor_value_info("w__SHAPE", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    inits = [
        numpy_helper.from_array(np.ones((2, 3), np.float32), "w"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "w__SHAPE"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g", [x, w_in, s_in], [y],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    return model


def test_unknown_constant_names_the_real_inputs_only():
    with pytest.raises(SmeltError) as info:
        smelt.compile(_model_with_initializer_inputs(), constants={"nosuch": 1})
    text = str(info.value)
    assert "'nosuch'" in text and "is not a model input" in text
    assert text.endswith("(the model's inputs: x)"), text
    assert "__SHAPE" not in text and "w," not in text


def test_unknown_constants_plural():
    with pytest.raises(SmeltError, match="'a', 'b', which are not model inputs"):
        smelt.compile(_model_with_initializer_inputs(), constants={"a": 1, "b": 2})


@pytest.mark.parametrize(
    ("before", "after", "said"),
    [(100, 42, "2.38× smaller"), (42, 100, "2.38× larger"), (7, 7, "same size")],
)
def test_size_change_says_which_way(before, after, said):
    assert size_change(before, after) == said


def test_quantize_report_says_larger_for_a_file_that_grew():
    result = QuantizeResult(
        model=onnx.ModelProto(), ranges={}, quantized=[],
        fp32_bytes=1000, bytes=2381, fp32_weight_bytes=800, weight_bytes=200,
    )  # fmt: skip
    line = result.format().splitlines()[1]
    assert "(2.38× larger)" in line and "smaller); weights" not in line, line
    assert line.endswith("(4.00× smaller)"), line
