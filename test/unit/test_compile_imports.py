"""A CPU compile imports none of the heavy packages that only other paths need
(the GPU backend's torch / triton, the explore plots' matplotlib, the checks'
onnxruntime): each costs seconds in every fresh process that compiles."""

from __future__ import annotations

import subprocess
import sys

import onnx
from onnx import TensorProto, helper

HEAVY = ("torch", "triton", "matplotlib", "onnxruntime")

_CHILD = """
import sys
import smelt
compiled = smelt.compile(sys.argv[1])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print("heavy:", " ".join(heavy))
"""


def test_a_cpu_compile_imports_no_gpu_plot_or_oracle_package(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
    )  # fmt: skip
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              path)  # fmt: skip
    code = _CHILD.format(heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    assert out.strip().splitlines()[-1] == "heavy:"
