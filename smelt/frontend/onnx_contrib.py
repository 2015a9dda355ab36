"""onnxruntime's com.microsoft contrib ops that its own optimizer writes
(onnxruntime.transformers.optimizer, the graph optimizer's saved models), imported
as compositions of graph ops where the composition computes the same formula:

* FusedMatMul: alpha * op(A) @ op(B), with transA / transB and the batch
  transposes transBatchA / transBatchB;
* Gelu, BiasGelu (erf form) and FastGelu (tanh form), the last two with a bias;
* SkipLayerNormalization and SkipSimplifiedLayerNormalization: a layer (RMS)
  norm of input + skip (+ bias), with the sum as an extra output;
* EmbedLayerNormalization: BERT's embeddings (word, position, segment
  lookups) and their layer norm, with the mask's key counts.

Attention is in `onnx_contrib_attention`, the quantized ops in
`onnx_contrib_quant`, FusedConv, FusedGemm and QuickGelu in `onnx_contrib_fused`
(handlers are keyed "com.microsoft::Op"). Attribute values these decompositions
do not cover are refused naming the node and the attribute."""

from __future__ import annotations

import math

import numpy as np

from smelt.dialects import graph as g
from smelt.frontend.onnx import Const, NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py
MS = "com.microsoft::"


def handles(*ops: str):
    return HANDLERS.register(*(MS + op for op in ops))


def float_input(ctx: NodeContext, x: Value, what: str = "input 0") -> np.dtype:
    dtype = numpy_type_of(x)
    if dtype not in (np.float32, np.float64):
        raise ctx.unsupported(
            f"{ctx.node.op_type} ({ctx.node.domain}) of {dtype} ({what}) is not "
            "supported (float32 and float64 are)"
        )
    return dtype


def refuse_attrs(ctx: NodeContext, allowed: dict) -> None:
    """Refuses an attribute whose value is not the one the decomposition covers:
    `allowed` maps an attribute name to its accepted values."""
    for name, values in allowed.items():
        value = ctx.attr(name)
        if value is not None and value not in values:
            raise ctx.unsupported(
                f"attribute '{name}' = {value} is not supported (smelt imports "
                f"{ctx.node.op_type} with {name} in {sorted(values)})"
            )


def refuse_outputs(ctx: NodeContext, indices: range, what: str) -> None:
    """Refuses the optional outputs at `indices` that the model uses."""
    for i in indices:
        if i >= len(ctx.node.output):
            break
        if ctx.node.output[i] and ctx.output_used(i):
            raise ctx.unsupported(
                f"output {i} ('{ctx.node.output[i]}', {what}) is not supported"
            )


# ----- FusedMatMul -----------------------------------------------------------


def _operand(ctx: NodeContext, x: Value, trans: int, batch: int, name: str) -> Value:
    """op(x) of FusedMatMul: with transBatch, dim 0 moves after the batch dims
    ([d0, d1, .., dn-2, dn-1] -> [d1, .., dn-2, d0, dn-1]); then with trans the
    last two dims swap. A 1-D operand takes neither."""
    rank = len(shape_of(x))
    if rank < 2:
        if trans or batch:
            raise ctx.unsupported(
                f"trans{name} / transBatch{name} on a {rank}-D {name} is not supported"
            )
        return x
    perm = list(range(rank))
    if batch and rank > 2:
        perm = [*range(1, rank - 1), 0, rank - 1]
    if trans:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    if perm == list(range(rank)):
        return x
    return ctx.emit(g.TransposeOp, [x], perm=perm)[0]


@handles("FusedMatMul")
def _fused_matmul(ctx: NodeContext) -> list[Value]:
    a, b = ctx.inputs[:2]
    dtype = float_input(ctx, a, "A")
    for name in ("transA", "transB", "transBatchA", "transBatchB"):
        refuse_attrs(ctx, {name: (0, 1)})
    ranks = len(shape_of(a)), len(shape_of(b))
    batched = ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0)
    if batched and (ranks[0] != ranks[1] or ranks[0] < 3):
        raise ctx.invalid(
            f"transBatchA / transBatchB need A and B of one rank >= 3, got ranks "
            f"{ranks[0]} and {ranks[1]} (onnxruntime refuses this too)"
        )
    a = _operand(ctx, a, ctx.attr("transA", 0), ctx.attr("transBatchA", 0), "A")
    b = _operand(ctx, b, ctx.attr("transB", 0), ctx.attr("transBatchB", 0), "B")
    y = ctx.emit(g.MatMulOp, [a, b])[0]
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha != 1.0:
        y = ctx.emit(g.MulOp, [y, Const(np.array(alpha, dtype))])[0]
    return [y]


# ----- Gelu family -----------------------------------------------------------


def _bias(ctx: NodeContext, x: Value, index: int) -> Value:
    """x + input `index` (a bias over the last dim), or x when it is absent."""
    bias = ctx.input(index)
    if bias is None:
        return x
    last = shape_of(x)[-1:] if shape_of(x) else ()
    if tuple(shape_of(bias)) != tuple(last):
        raise ctx.invalid(
            f"its bias (input {index}) has shape {list(shape_of(bias))}; it must be "
            f"the input's last dim {list(last)}"
        )
    return ctx.emit(g.AddOp, [x, bias])[0]


def gelu_erf(m: Arith, x: Value) -> Value:
    """0.5 * x * (1 + erf(x / sqrt(2)))."""
    inner = m.op(g.ErfOp, m.mul(x, 1.0 / math.sqrt(2.0)))
    return m.mul(m.mul(x, 0.5), m.add(inner, 1.0))


def gelu_tanh(m: Arith, x: Value) -> Value:
    """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))."""
    cube = m.mul(m.mul(x, x), x)
    inner = m.mul(m.add(x, m.mul(cube, 0.044715)), math.sqrt(2.0 / math.pi))
    return m.mul(m.mul(x, 0.5), m.add(m.op(g.TanhOp, inner), 1.0))


@handles("Gelu")
def _gelu(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    return [gelu_erf(Arith(ctx, float_input(ctx, x)), x)]


@handles("BiasGelu")
def _bias_gelu(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    m = Arith(ctx, float_input(ctx, x))
    return [gelu_erf(m, _bias(ctx, x, 1))]


@handles("FastGelu")
def _fast_gelu(ctx: NodeContext) -> list[Value]:
    x = ctx.inputs[0]
    m = Arith(ctx, float_input(ctx, x))
    return [gelu_tanh(m, _bias(ctx, x, 1))]


# ----- SkipLayerNormalization ------------------------------------------------


def _skip_sum(ctx: NodeContext) -> tuple[Value, Value, np.dtype]:
    """input + skip (+ bias, input 4 or 3 for the simplified form) and gamma."""
    x, skip, gamma = ctx.inputs[:3]
    dtype = float_input(ctx, x)
    shape = shape_of(x)
    if len(shape) not in (2, 3):
        raise ctx.invalid(
            f"its input has shape {list(shape)}; it must be 3-D (batch, sequence, "
            "hidden) or 2-D (tokens, hidden)"
        )
    hidden = shape[-1]
    skip_shape = tuple(shape_of(skip))
    if skip_shape not in (tuple(shape), tuple(shape[1:]), (1, *shape[1:])):
        raise ctx.invalid(
            f"its skip has shape {list(skip_shape)}; it must be the input's "
            f"{list(shape)}, or {list(shape[1:])} / {[1, *shape[1:]]}"
        )
    if tuple(shape_of(gamma)) != (hidden,):
        raise ctx.invalid(
            f"its gamma has shape {list(shape_of(gamma))}; it must be [{hidden}]"
        )
    total = ctx.emit(g.AddOp, [x, skip])[0]
    bias_index = 3 if ctx.node.op_type == "SkipSimplifiedLayerNormalization" else 4
    return _bias(ctx, total, bias_index), gamma, dtype


@handles("SkipLayerNormalization")
def _skip_layer_norm(ctx: NodeContext) -> list[Value]:
    """LayerNormalization over the last dim of input + skip (+ bias); outputs
    1 and 2 (mean, 1 / std) as LayerNormalization's, 3 the sum."""
    total, gamma, dtype = _skip_sum(ctx)
    beta = ctx.input(3)
    if beta is None:
        beta = Const(np.zeros(shape_of(gamma), dtype))
    elif tuple(shape_of(beta)) != tuple(shape_of(gamma)):
        raise ctx.invalid(
            f"its beta has shape {list(shape_of(beta))}; it must be gamma's "
            f"{list(shape_of(gamma))}"
        )
    epsilon = float(ctx.attr("epsilon", 1e-12))
    if not 0 <= epsilon < float("inf"):
        raise ctx.invalid(f"attribute 'epsilon' is {epsilon}; it must be >= 0")
    last = len(shape_of(total)) - 1
    y, mean, inv_std = ctx.emit(
        g.LayerNormOp, [total, gamma, beta], axis=last, epsilon=epsilon
    )
    return [y, mean, inv_std, total][: len(ctx.node.output)]


@handles("SkipSimplifiedLayerNormalization")
def _skip_rms_norm(ctx: NodeContext) -> list[Value]:
    """x / sqrt(mean(x ** 2) + epsilon) * gamma over the last dim of
    x = input + skip (+ bias); output 2 is 1 / that root, 3 is x. Output 1 (a
    mean, which onnxruntime leaves unset for this op) is refused when used."""
    total, gamma, dtype = _skip_sum(ctx)
    refuse_outputs(ctx, range(1, 2), "mean: not computed by an RMS norm")
    epsilon = float(ctx.attr("epsilon", 1e-12))
    if not 0 <= epsilon < float("inf"):
        raise ctx.invalid(f"attribute 'epsilon' is {epsilon}; it must be >= 0")
    m = Arith(ctx, dtype)
    square = m.mul(total, total)
    last = len(shape_of(total)) - 1
    mean = ctx.emit(g.ReduceMeanOp, [square], axes=[last], keepdims=1)[0]
    rms = m.op(g.SqrtOp, m.add(mean, epsilon))
    y = m.mul(m.div(total, rms), gamma)
    inv_rms = m.div(1.0, rms) if ctx.output_used(2) else rms
    outputs: list[Value] = [y, mean, inv_rms, total]  # output 1: refused if used
    return outputs[: len(ctx.node.output)]


# ----- EmbedLayerNormalization ----------------------------------------------


def _lookup(ctx: NodeContext, table: Value, ids: Value, what: str) -> Value:
    """table[ids] (rows); a negative id becomes one past the end, which the
    gather's run-time check refuses as onnxruntime does (a plain gather would
    count it from the end)."""
    rows = shape_of(table)[0]
    m = Arith(ctx, numpy_type_of(ids))
    ids = m.where(m.less(ids, 0), rows, ids)
    return ctx.emit(g.GatherOp, [table, ids], axis=0, what=f"{ctx.label}'s {what}")[0]


@handles("EmbedLayerNormalization")
def _embed_layer_norm(ctx: NodeContext) -> list[Value]:
    """LayerNormalization of word_embedding[input_ids] + position_embedding[
    position_ids, or 0..S-1] (+ segment_embedding[segment_ids]); output 1 counts
    the 1s of each mask row (0 without a mask, as onnxruntime), output 2 is
    the sum before the normalization."""
    ids, segments, words, positions, segment_table, gamma, beta = (
        ctx.input(i) for i in range(7)
    )
    mask, position_ids = ctx.input(7), ctx.input(8)
    dtype = float_input(ctx, words, "word_embedding")
    if len(shape_of(ids)) != 2:
        raise ctx.invalid(f"its input_ids have shape {list(shape_of(ids))}; (B, S)")
    batch, seq = shape_of(ids)
    total = _lookup(ctx, words, ids, "input_ids")
    if position_ids is None:
        if seq > shape_of(positions)[0]:
            raise ctx.invalid(
                f"its sequence length {seq} is more than position_embedding's "
                f"{shape_of(positions)[0]} rows"
            )
        total = ctx.emit(g.AddOp, [total, _first_rows(ctx, positions, seq)])[0]
    else:
        total = ctx.emit(
            g.AddOp, [total, _lookup(ctx, positions, position_ids, "position_ids")]
        )[0]
    if segments is not None and segment_table is not None:
        total = ctx.emit(
            g.AddOp, [total, _lookup(ctx, segment_table, segments, "segment_ids")]
        )[0]
    elif (segments is None) != (segment_table is None):
        raise ctx.invalid("segment_ids and segment_embedding come together")
    if beta is None:
        beta = Const(np.zeros(shape_of(gamma), dtype))
    epsilon = float(ctx.attr("epsilon", 1e-12))
    y = ctx.emit(g.LayerNormOp, [total, gamma, beta], axis=2, epsilon=epsilon)[0]
    if mask is None:
        counts: Value = Const(np.zeros(batch, np.int32))
    else:
        m = Arith(ctx, np.dtype(np.int32))
        ones = m.cast(m.op(g.EqualOp, mask, m.const(1)), np.int32)
        counts = ctx.emit(g.ReduceSumOp, [ones], axes=[1], keepdims=0)[0]
    return [y, counts, total][: len(ctx.node.output)]


def _first_rows(ctx: NodeContext, table: Value, count: int) -> Value:
    width = shape_of(table)[1]
    return ctx.emit(g.SliceOp, [table], starts=[0, 0], ends=[count, width],
                    steps=[1, 1])[0]  # fmt: skip


# ----- SimplifiedLayerNormalization (onnxruntime's, in the default domain) ----


@HANDLERS.register("SimplifiedLayerNormalization")
def _simplified_layer_norm(ctx: NodeContext) -> list[Value]:
    """x / sqrt(mean(x ** 2) + epsilon) * scale over the dims from `axis` on;
    output 1 is 1 / that root (onnxruntime's RMS norm, which its optimizer
    writes in the default domain)."""
    x, scale = ctx.inputs[:2]
    dtype = float_input(ctx, x, "X")
    rank = len(shape_of(x))
    axis = int(ctx.attr("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.invalid(f"attribute 'axis' is {axis}; X has rank {rank}")
    axis %= rank
    epsilon = float(ctx.attr("epsilon", 1e-5))
    if not 0 <= epsilon < float("inf"):
        raise ctx.invalid(f"attribute 'epsilon' is {epsilon}; it must be >= 0")
    m = Arith(ctx, dtype)
    mean = ctx.emit(g.ReduceMeanOp, [m.mul(x, x)], axes=list(range(axis, rank)),
                    keepdims=1)[0]  # fmt: skip
    inv = m.div(1.0, m.op(g.SqrtOp, m.add(mean, epsilon)))
    return [m.mul(m.mul(x, inv), scale), inv][: len(ctx.node.output)]
