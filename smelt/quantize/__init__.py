"""`smelt.quantize`: post-training static quantization of an ONNX model to a
standard QDQ model (int8 per-channel weights, u8 / s8 per-tensor activations)
calibrated on sample inputs, with an accuracy report and automatic mixed precision.
Calibration runs the fp32 model in onnxruntime.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from smelt.errors import SmeltError, internal_errors
from smelt.quantize import qdq
from smelt.quantize.calibration import METHODS, Calibration, collect, tensor_range
from smelt.quantize.evaluate import Accuracy, Budget, measure, session
from smelt.quantize.qdq import DEFAULT_OP_TYPES, Options, upgrade_for_quantization
from smelt.runtime.files import regular_file


def size_change(before: int, after: int) -> str:
    """'2.40× smaller' / '1.15× larger' / 'same size': `after` against `before`."""
    if after < before:
        return f"{before / max(after, 1):.2f}× smaller"
    if after > before:
        return f"{after / max(before, 1):.2f}× larger"
    return "same size"


@dataclass
class QuantizeResult:
    """The QDQ model and what was measured while making it."""

    model: onnx.ModelProto
    ranges: dict[str, tuple[float, float]]
    quantized: list[str]  # node names
    kept: list[str] = field(default_factory=list)  # kept f32 by the budget
    fp32_bytes: int = 0
    bytes: int = 0
    fp32_weight_bytes: int = 0
    weight_bytes: int = 0
    accuracy: Accuracy | None = None
    budget: Budget | None = None

    @property
    def weight_ratio(self) -> float:
        return self.fp32_weight_bytes / max(self.weight_bytes, 1)

    def format(self, tensors: int = 1000) -> str:
        lines = [
            f"quantized {len(self.quantized)} nodes"
            + (f", kept {len(self.kept)} in f32: {', '.join(self.kept)}" if self.kept
               else ""),
            f"model bytes: fp32 {self.fp32_bytes:,} → quantized {self.bytes:,} "
            f"({size_change(self.fp32_bytes, self.bytes)}); weights "
            f"{self.fp32_weight_bytes:,} → {self.weight_bytes:,} "
            f"({size_change(self.fp32_weight_bytes, self.weight_bytes)})",
        ]  # fmt: skip
        acc = self.accuracy
        if acc is None:
            return "\n".join(lines)
        if self.budget is not None:
            verdict = "met" if self.budget.met(acc) else "NOT met"
            lines.append(f"accuracy budget {self.budget}: {verdict}")
        for o in acc.outputs:
            lines.append(f"output {o.name}: cosine {o.cosine:.6f}, max abs error "
                         f"{o.max_abs:.4g}, SQNR {o.sqnr:.2f} dB")
        if acc.tensors:
            lines.append(f"per-tensor SQNR (quantized activation vs fp32), "
                         f"{len(acc.tensors)} tensors:")
            for t, v in list(acc.tensors.items())[:tensors]:
                lines.append(f"  {v:8.2f} dB  {t}")
        return "\n".join(lines)


def quantize(
    model,
    calibration,
    output: str | None = None,
    *,
    method: str = "minmax",
    percentile: float = 99.99,
    activations: str = "u8",
    op_types=DEFAULT_OP_TYPES,
    exclude=(),
    report: bool = False,
    accuracy_budget: str | None = None,
    reduce_range: bool = False,
) -> QuantizeResult:
    """Quantize `model` (path, bytes or ModelProto) calibrated on `calibration`
    (an .npz of (N, *input_shape) arrays per input, a folder of per-sample .npz
    files, or such a dict); write the QDQ model to `output` if given.

    method: minmax | percentile | entropy; activations: u8 (asymmetric) | s8
    (symmetric); op_types: which ops get quantized; exclude: node names kept f32;
    report: measure accuracy on the calibration set; accuracy_budget: "30" / "sqnr=30"
    (output SQNR, dB) or "cos=0.999" — the most sensitive layers stay f32 until met;
    reduce_range: 7-bit weights (in [-64, 64], as onnxruntime's reduce_range), which
    CPUs without VNNI (AVX2) multiply with vpmaddubsw, faster than the vpmaddwd
    that full 8-bit weights need there, for a little accuracy.
    """
    with internal_errors("smelt.quantize"):  # only SmeltErrors leave
        return _quantize(
            model, calibration, output, method, percentile, activations, op_types,
            exclude, report, accuracy_budget, reduce_range,
        )  # fmt: skip


def _quantize(
    model, calibration, output, method, percentile, activations, op_types, exclude,
    report, accuracy_budget, reduce_range,
) -> QuantizeResult:  # fmt: skip
    if method not in METHODS:
        raise SmeltError(f"unknown calibration method '{method}'; use one of {METHODS}")
    if activations not in ("u8", "s8"):
        raise SmeltError(f"activations must be u8 or s8, not '{activations}'")
    if not 50.0 < percentile <= 100.0:
        raise SmeltError(f"percentile must be in (50, 100], not {percentile}")
    budget = Budget.parse(accuracy_budget) if accuracy_budget is not None else None
    options = Options(activations, tuple(op_types), frozenset(exclude), reduce_range)
    fp32 = qdq.prepare(_load(model))
    nodes = qdq.quantized_nodes(fp32, options)
    calib = Calibration(calibration, _input_shapes(fp32), _input_dtypes(fp32))
    tensors = qdq.activation_tensors(fp32, nodes)
    inner = [t for t in tensors if t not in calib.inputs]
    stats = collect(session(fp32, inner), calib, tensors, method != "minmax")
    ranges = {
        t: tensor_range(stats[t], method, percentile, options.symmetric)
        for t in tensors
    }  # fmt: skip
    kept: list[str] = []
    while True:
        chosen = [n for n in nodes if n.name not in kept]
        used = set(qdq.activation_tensors(fp32, chosen))
        model_q, dq_of = qdq.write_qdq(
            fp32, chosen, {t: r for t, r in ranges.items() if t in used},
            options.symmetric, frozenset(kept) | options.exclude,
            options.weight_qmax,
        )
        accuracy = None
        if report or budget is not None:
            layers = _layers(fp32, chosen)
            accuracy = measure(fp32, model_q, calib, dq_of, layers)
        if budget is None or budget.met(accuracy) or not chosen:
            break
        kept.append(max(accuracy.layers, key=accuracy.sensitivity))
    if output:
        try:
            onnx.save(model_q, output)
        except OSError as e:
            raise SmeltError(f"cannot write '{output}': {e}") from None
    return QuantizeResult(
        model_q, ranges, [n.name for n in chosen], kept,
        qdq.model_bytes(fp32), qdq.model_bytes(model_q),
        qdq.weight_bytes(fp32), qdq.weight_bytes(model_q), accuracy, budget,
    )  # fmt: skip


def _load(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, bytes):
            return onnx.load_from_string(model)
        if isinstance(model, (str, os.PathLike)):
            regular_file(os.fspath(model), "model")  # a FIFO would block
            return onnx.load(model)
    except SmeltError:
        raise
    except Exception as e:  # protobuf / file errors
        raise SmeltError(f"cannot load the ONNX model '{model}': {e}") from None
    raise SmeltError(f"expected an ONNX model path, bytes or ModelProto, not {model!r}")


def _input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    inits = {t.name for t in model.graph.initializer}
    return {
        i.name: tuple(
            d.dim_value if d.HasField("dim_value") else -1
            for d in i.type.tensor_type.shape.dim
        )
        for i in model.graph.input
        if i.name not in inits
    }  # fmt: skip


def _input_dtypes(model: onnx.ModelProto) -> dict[str, np.dtype]:
    inits = {t.name for t in model.graph.initializer}
    dtypes = {}
    for i in model.graph.input:
        elem = i.type.tensor_type.elem_type
        if i.name not in inits and elem:
            dtypes[i.name] = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    return dtypes


def _layers(model: onnx.ModelProto, nodes) -> dict[str, tuple[list[str], str]]:
    consts = qdq.initializers(model)
    return {
        n.name: ([t for t in n.input if t and t not in consts], n.output[0])
        for n in nodes
    }  # fmt: skip


class _CallableModule(types.ModuleType):
    """`smelt.quantize(...)` calls `smelt.quantize.quantize(...)`."""

    def __call__(self, *args, **kwargs) -> QuantizeResult:
        return quantize(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["QuantizeResult", "quantize", "upgrade_for_quantization"]
