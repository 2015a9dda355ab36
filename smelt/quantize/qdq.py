"""The QDQ writer: a float ONNX model plus activation ranges becomes a standard
QDQ model (QuantizeLinear → DequantizeLinear around activations, DequantizeLinear of
int8 / int32 initializers for weights and biases), as onnxruntime's `quantize_static`
writes it in QDQ format.

    x ─ Conv(W, B) ─ y    becomes
    x ─ Q ─ DQ ─ Conv(DQ(W_i8), DQ(B_i32)) ─ Q ─ DQ ─ y
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from smelt.errors import SmeltError

DEFAULT_OP_TYPES = ("Conv", "MatMul", "Gemm")
MIN_OPSET = 13  # DequantizeLinear's `axis` (per-channel weights)


@dataclass(frozen=True)
class Options:
    """What gets quantized and how: activations u8 asymmetric or s8 symmetric."""

    activations: str = "u8"
    op_types: tuple[str, ...] = DEFAULT_OP_TYPES
    exclude: frozenset[str] = frozenset()
    reduce_range: bool = False  # 7-bit weights (REDUCED_QMAX)

    @property
    def weight_qmax(self) -> int:
        return REDUCED_QMAX if self.reduce_range else WEIGHT_QMAX

    @property
    def symmetric(self) -> bool:
        return self.activations == "s8"


def upgrade_for_quantization(
    model: onnx.ModelProto, opset: int = MIN_OPSET
) -> onnx.ModelProto:
    """A copy of `model` that a QDQ quantizer (ours, or onnxruntime's
    `quantize_static`) can take: no initializer listed as a graph input (IR < 4
    models list every weight there; a weight that is an input is not a constant,
    and onnxruntime's quantizer then fails with "Input ... is undefined"), IR
    version ≥ 7, and the default-domain opset ≥ `opset` (13: DequantizeLinear's
    per-channel `axis`) by onnx's version converter. Models already so are copied
    unchanged."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    graph_inputs = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(graph_inputs)
    m.ir_version = max(m.ir_version, 7)
    have = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    if have < opset:
        try:
            m = onnx.version_converter.convert_version(m, opset)
        except Exception as e:  # the converter raises its own types
            raise SmeltError(
                f"cannot convert the model from opset {have} to {opset} (needed "
                f"for per-channel DequantizeLinear): {e}"
            ) from None
        m.ir_version = max(m.ir_version, 7)
    return m


def prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy at opset ≥ 13 (`upgrade_for_quantization`), Constant nodes as
    initializers, every node named (the names --exclude and the report use)."""
    m = upgrade_for_quantization(model)
    kept = []
    for node in m.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(node.attribute[0].t)
            t.name = node.output[0]
            m.graph.initializer.append(t)
        else:
            kept.append(node)
    del m.graph.node[:]
    m.graph.node.extend(kept)
    taken = {n.name for n in m.graph.node if n.name}
    for i, node in enumerate(m.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
    return m


def initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer}


def quantized_nodes(model: onnx.ModelProto, options: Options) -> list[onnx.NodeProto]:
    unknown = options.exclude - {n.name for n in model.graph.node}
    if unknown:
        names = [n.name for n in model.graph.node if n.op_type in options.op_types]
        raise SmeltError(
            f"--exclude names no node: {sorted(unknown)}; the quantizable nodes are "
            f"{names[:20]}{' …' if len(names) > 20 else ''}"
        )
    return [
        n for n in model.graph.node
        if n.op_type in options.op_types and n.name not in options.exclude
    ]  # fmt: skip


def weight_axis(node: onnx.NodeProto, index: int, rank: int) -> int | None:
    """The output-channel axis of a weight input, None for per-tensor."""
    if node.op_type == "Conv" and index == 1:
        return 0
    if node.op_type == "ConvTranspose" and index == 1:
        return 1 if rank > 1 else None
    if node.op_type == "MatMul" and index == 1 and rank >= 2:
        return rank - 1
    if node.op_type == "Gemm" and index == 1 and rank == 2:
        trans = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans else 1
    return None


def bias_index(node: onnx.NodeProto) -> int | None:
    return 2 if node.op_type in ("Conv", "Gemm") and len(node.input) > 2 else None


def activation_tensors(
    model: onnx.ModelProto, nodes: list[onnx.NodeProto]
) -> list[str]:
    """The float tensors whose range calibration must measure: the non-constant
    inputs of the quantized nodes and their outputs (graph outputs stay float)."""
    consts = initializers(model)
    outputs = {o.name for o in model.graph.output}
    seen: dict[str, None] = {}
    for node in nodes:
        skip = bias_index(node)
        for i, name in enumerate(node.input):
            if name and name not in consts and i != skip:
                seen[name] = None
        for name in node.output[:1]:
            if name and name not in outputs:
                seen[name] = None
    return list(seen)


def activation_params(lo: float, hi: float, symmetric: bool) -> tuple[float, int]:
    """(scale, zero point) of the range: u8 asymmetric or s8 symmetric."""
    if symmetric:
        t = max(abs(lo), abs(hi))
        return (t / 127.0 if t > 0 else 1.0), 0
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi <= lo:
        return 1.0, 0
    scale = (hi - lo) / 255.0
    return scale, int(np.clip(round(-lo / scale), 0, 255))


WEIGHT_QMAX = 127
REDUCED_QMAX = 64
"""7-bit weights (`reduce_range`, as onnxruntime's): any two of them sum to at most
128 in magnitude, so a CPU without VNNI multiplies them with vpmaddubsw exactly
(`dialects/quant_gemm.pairs_fit`)."""


def weight_params(
    w: np.ndarray, axis: int | None, qmax: int = WEIGHT_QMAX
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights: scale = max|w| / qmax per channel (or per tensor)."""
    if axis is None:
        absmax = np.max(np.abs(w)) if w.size else 0.0
        scale = np.float32(absmax / qmax if absmax > 0 else 1.0)
        q = np.clip(np.round(w / scale), -qmax, qmax).astype(np.int8)
        return q, np.asarray(scale, np.float32)
    other = tuple(d for d in range(w.ndim) if d != axis)
    absmax = np.max(np.abs(w), axis=other) if w.size else np.zeros(w.shape[axis])
    scale = np.where(absmax > 0, absmax / qmax, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -qmax, qmax).astype(np.int8)
    return q, scale


class _Writer:
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.consts = initializers(model)
        self.new_nodes: dict[int, list[onnx.NodeProto]] = {}  # before node index
        self.renamed: dict[str, str] = {}  # float activation → its DQ output
        self.weights: dict[tuple[str, int | None], str] = {}
        self.used: set[str] = {n for node in model.graph.node for n in node.output}
        self.used |= set(self.consts) | {i.name for i in model.graph.input}

    def fresh(self, name: str) -> str:
        while name in self.used:
            name += "_"
        self.used.add(name)
        return name

    def add_init(self, name: str, array: np.ndarray) -> str:
        name = self.fresh(name)
        self.model.graph.initializer.append(numpy_helper.from_array(array, name))
        return name

    def qdq(self, tensor: str, scale: float, zp: int, symmetric: bool) -> tuple:
        """Q → DQ nodes of an activation; returns (nodes, DQ output name)."""
        dtype = np.int8 if symmetric else np.uint8
        s = self.add_init(f"{tensor}_scale", np.asarray(scale, np.float32))
        z = self.add_init(f"{tensor}_zero_point", np.asarray(zp, dtype))
        q = self.fresh(f"{tensor}_QuantizeLinear_Output")
        dq = self.fresh(f"{tensor}_DequantizeLinear_Output")
        nodes = [
            helper.make_node("QuantizeLinear", [tensor, s, z], [q],
                             name=self.fresh(f"{tensor}_QuantizeLinear")),
            helper.make_node("DequantizeLinear", [q, s, z], [dq],
                             name=self.fresh(f"{tensor}_DequantizeLinear")),
        ]  # fmt: skip
        self.renamed[tensor] = dq
        return nodes, dq

    def dq_const(self, name: str, q: np.ndarray, scale: np.ndarray, axis) -> tuple:
        zp = np.zeros(scale.shape, q.dtype)
        qn = self.add_init(f"{name}_quantized", q)
        sn = self.add_init(f"{name}_scale", scale.astype(np.float32))
        zn = self.add_init(f"{name}_zero_point", zp)
        out = self.fresh(f"{name}_DequantizeLinear_Output")
        attrs = {"axis": axis} if axis is not None and scale.ndim else {}
        node = helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                name=self.fresh(f"{name}_DequantizeLinear"), **attrs)
        return node, out


def write_qdq(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    ranges: dict[str, tuple[float, float]],
    symmetric: bool,
    keep_float: frozenset[str] = frozenset(),
    weight_qmax: int = WEIGHT_QMAX,
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of the prepared `model` with `nodes` quantized: activations (inputs
    and outputs) through Q → DQ with the calibrated ranges, weights int8 per
    channel in [-weight_qmax, weight_qmax], Conv / Gemm biases int32 with scale
    s_x · s_w (as onnxruntime does).
    Other consumers of a quantized activation read its DQ output too, as in
    onnxruntime's QDQ models, except the nodes named in `keep_float` (excluded
    layers stay f32 through and through). Returns the model and, per quantized
    activation, the name of its DQ output."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    w = _Writer(m)
    chosen = {n.name for n in nodes}
    params = {t: activation_params(*r, symmetric) for t, r in ranges.items()}
    pending: list[onnx.NodeProto] = []  # Q/DQ of graph inputs go first
    out_nodes: list[onnx.NodeProto] = []
    graph_inputs = {i.name for i in m.graph.input}
    produced_qdq: dict[str, list[onnx.NodeProto]] = {}
    for node in m.graph.node:
        if node.name not in chosen:
            continue
        for t in list(node.input) + list(node.output[:1]):
            if t in params and t not in w.renamed:
                qnodes, _ = w.qdq(t, *params[t], symmetric)
                if t in graph_inputs:
                    pending.extend(qnodes)
                else:
                    produced_qdq.setdefault(t, []).extend(qnodes)
    for node in m.graph.node:
        new_inputs = list(node.input)
        if node.name in chosen:
            x_scale = None
            if node.input and node.input[0] in params:
                x_scale = params[node.input[0]][0]
            w_scale = None
            for i, t in enumerate(node.input):
                if t in w.renamed:
                    new_inputs[i] = w.renamed[t]
                elif t in w.consts and i != bias_index(node):
                    arr = numpy_helper.to_array(w.consts[t])
                    if arr.dtype != np.float32:
                        continue
                    axis = weight_axis(node, i, arr.ndim)
                    key = (t, axis)
                    if key not in w.weights:
                        q, scale = weight_params(arr, axis, weight_qmax)
                        dq, name = w.dq_const(t, q, scale, axis)
                        out_nodes.append(dq)
                        w.weights[key] = name
                        w.weights[(t, "scale", axis)] = scale
                    new_inputs[i] = w.weights[key]
                    if i == 1:
                        w_scale = w.weights[(t, "scale", axis)]
            b = bias_index(node)
            if b is not None and node.input[b] in w.consts:
                name = _bias(w, node, b, x_scale, w_scale, out_nodes)
                if name:
                    new_inputs[b] = name
        elif node.name not in keep_float:
            new_inputs = [w.renamed.get(t, t) for t in node.input]
        del node.input[:]
        node.input.extend(new_inputs)
        out_nodes.append(node)
        for t in node.output:
            out_nodes.extend(produced_qdq.get(t, []))
    del m.graph.node[:]
    m.graph.node.extend(pending + out_nodes)
    _drop_unused(m)
    return m, dict(w.renamed)


def _bias(w: _Writer, node, b: int, x_scale, w_scale, out_nodes) -> str | None:
    """int32 bias with scale s_x · s_w per channel; None keeps it f32 (no input
    scale, a bias shape that is not one value per channel, or int32 overflow)."""
    arr = numpy_helper.to_array(w.consts[node.input[b]])
    if x_scale is None or w_scale is None or arr.dtype != np.float32 or arr.ndim != 1:
        return None
    scale = (np.float32(x_scale) * np.asarray(w_scale, np.float32)).astype(np.float32)
    scale = np.broadcast_to(scale, arr.shape).copy() if scale.ndim == 0 else scale
    if scale.shape != arr.shape or np.any(scale == 0):
        return None
    q = np.round(arr.astype(np.float64) / scale)
    if np.any(np.abs(q) > 2**31 - 1):
        return None
    dq, name = w.dq_const(node.input[b], q.astype(np.int32), scale, 0)
    out_nodes.append(dq)
    return name


def _drop_unused(m: onnx.ModelProto) -> None:
    used = {t for node in m.graph.node for t in node.input}
    used |= {o.name for o in m.graph.output}
    keep = [t for t in m.graph.initializer if t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    inputs = [i for i in m.graph.input if i.name in used or i.name not in
              {t.name for t in keep}]
    del m.graph.input[:]
    m.graph.input.extend(inputs)


def weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the initializers (the weights as stored)."""
    total = 0
    for t in model.graph.initializer:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        total += int(np.prod(t.dims, dtype=np.int64)) * itemsize
    return total


def model_bytes(model: onnx.ModelProto) -> int:
    return model.ByteSize()


__all__ = ["Options", "prepare", "quantized_nodes", "activation_tensors",
           "write_qdq", "weight_bytes", "model_bytes", "TensorProto"]
