"""Every ONNX op handler of the importer, module by module (each module keeps its
own `HANDLERS` table; an op handled twice is an error at import). Ops without a
handler are expanded from onnx's function bodies (`onnx_functions`)."""

from __future__ import annotations

from smelt.frontend import (
    onnx_contrib,
    onnx_contrib_attention,
    onnx_contrib_fused,
    onnx_contrib_quant,
    onnx_control,
    onnx_conv_transpose,
    onnx_deform_conv,
    onnx_domains,
    onnx_einsum,
    onnx_index,
    onnx_linalg,
    onnx_ml_trees,
    onnx_nn,
    onnx_norms,
    onnx_ops,
    onnx_quant,
    onnx_resize,
    onnx_rnn,
    onnx_sample,
    onnx_scan,
    onnx_shapes,
    onnx_spectral,
)
from smelt.registry import merge

HANDLERS = merge(
    onnx_ops.HANDLERS,  # elementwise, reductions, constants, casts
    onnx_shapes.HANDLERS,  # reshape, transpose, concat, split, slice, gather, pad
    onnx_nn.HANDLERS,  # conv, pools, normalizations, softmax, matmul, gemm
    onnx_norms.HANDLERS,  # instance / Lp normalization, Lp / global max pools
    onnx_conv_transpose.HANDLERS,  # ConvTranspose, Col2Im
    onnx_deform_conv.HANDLERS,
    onnx_resize.HANDLERS,  # Resize, Upsample
    onnx_sample.HANDLERS,  # GridSample, RoiAlign
    onnx_spectral.HANDLERS,  # DFT, STFT, MelWeightMatrix
    onnx_einsum.HANDLERS,
    onnx_scan.HANDLERS,  # arg-reductions, cumulative sums, top-k, log-softmax
    onnx_index.HANDLERS,  # gathers and scatters by index, one-hot, trilu, range
    onnx_linalg.HANDLERS,  # Det
    onnx_rnn.HANDLERS,  # LSTM, GRU, RNN
    onnx_quant.HANDLERS,  # QDQ and QOperator ops
    onnx_control.HANDLERS,  # If, Loop, Scan (folded or unrolled at import)
    onnx_contrib.HANDLERS,  # com.microsoft: FusedMatMul, Gelus, SkipLayerNorm
    onnx_contrib_attention.HANDLERS,  # com.microsoft Attention
    onnx_contrib_quant.HANDLERS,  # com.microsoft MatMulNBits, QGemm
    onnx_contrib_fused.HANDLERS,  # com.microsoft FusedConv, FusedGemm, QuickGelu
    onnx_domains.HANDLERS,  # ai.onnx.ml Binarizer, ...; training ops refused
    onnx_ml_trees.HANDLERS,  # ai.onnx.ml TreeEnsemble
)
