"""An ONNX model's Triton kernels, ahead of time: the model imported and lowered
with the gpu preset, then each loop kernel emitted (`smelt aot`, tests). The
kernel-level compile lives below, in smelt/lowering/triton/aot.py."""

from __future__ import annotations

from smelt.compiler import pipelines
from smelt.compiler.runner import import_graph, lower
from smelt.lowering.triton.source import module_kernels


def model_kernels(model, level: str = "O2", input_shapes: dict | None = None):
    """Loop kernel name -> Triton functions of an ONNX model (gpu preset)."""
    module = import_graph(model, input_shapes or {})
    lower(module, pipelines.preset("gpu", level))
    return module_kernels(module)
