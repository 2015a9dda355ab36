"""Int8 oracles that are exact on every x86-64 host the suite runs on.

onnxruntime's int8 GEMMs (MLAS) are exact only with VNNI (`vpdpbusd`, AVX-512 or
AVX-VNNI). Without it, its u8·s8 kernels use `vpmaddubsw`, whose i16 sums of two
products saturate: a small MatMulInteger came out off by up to 19,358 on an AVX2
Zen 1 while numpy's int32 matmul agreed with smelt. So a test compares against:
- onnx's own reference evaluator (integer numpy) for the QOperator ops
  (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv): exact everywhere;
- onnxruntime's unoptimized run (`ORT_DISABLE_ALL`: the QDQ graph as written,
  dequantize → float op → quantize, no int8 kernel) for a QDQ graph with 8-bit
  weights;
- onnxruntime's default run (its int8 kernels) only on files whose weights are
  7-bit (`reduce_range`), where two u8·s8 products sum to at most
  2 · 255 · 64 = 32,640 < 2^15, or on hosts with VNNI (`ORT_INT8_EXACT`).
"""

from __future__ import annotations

import numpy as np
import onnx

from smelt.targets.cpu_spec import host

VNNI = ("avx512vnni", "avxvnni")
ORT_INT8_EXACT = any(f in host().features for f in VNNI)
"""Whether onnxruntime's int8 kernels are exact for 8-bit weights on this host
(under `SMELT_TEST_HOST`, on the host named there: see test/conftest.py)."""


def ort_weight_bits() -> int:
    """The weight width of the files compared with onnxruntime's int8 kernels
    here: 8 where they are exact for it, else 7 (`reduce_range`)."""
    return 8 if ORT_INT8_EXACT else 7


def ort_outputs(model: onnx.ModelProto, feeds: dict, optimized: bool) -> list:
    """onnxruntime's outputs of `model`: its default run (`optimized`: QDQ fused
    into int8 kernels) or the graph as written."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def reference_outputs(model: onnx.ModelProto, feeds: dict) -> list:
    """onnx's reference evaluator: integer ops in numpy's exact int32 / int64."""
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
