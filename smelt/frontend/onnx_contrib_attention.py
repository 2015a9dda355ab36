"""com.microsoft Attention (the fused self-attention of onnxruntime's BERT
optimizer) as graph ops: one projection matmul for Q, K and V, per-head
scores Q @ K^T * scale, plus the mask as onnxruntime builds it (0 where a key
is kept, `mask_filter_value` where it is masked, that value added again above
the diagonal when unidirectional) and an attention bias, a softmax over the
keys and the weighted sum of V, heads merged back.

QAttention is Attention of a quantized input and weights (their int32 product
scaled to float, as MatMulIntegerToFloat). MultiHeadAttention is Attention with
query, key and value given apart (3-D, with an optional bias of Q + K + V
hidden), key and value of their own length.

Mask formats: none, 1-D key lengths (B) or end and start positions (2B), 2-D
(B, T) and 3-D (B, S, T) 0/1 masks. Not supported (refused naming the node): the
past / present key-value cache, the 4-D Megatron mask, rotary embeddings, packed
query / key / value."""

from __future__ import annotations

import math

import numpy as np

from smelt.dialects import graph as g
from smelt.frontend.onnx import NodeContext, Value, numpy_type_of, shape_of
from smelt.frontend.onnx_arith import Arith
from smelt.frontend.onnx_contrib import MS, float_input, refuse_attrs, refuse_outputs
from smelt.frontend.onnx_contrib_quant import integer_to_float, matmul_integer
from smelt.registry import Table

HANDLERS = Table()  # listed in frontend/handlers.py


def handles(*ops: str):
    return HANDLERS.register(*(MS + op for op in ops))


PAST, MASK, ATTENTION_BIAS, PAST_LENGTH = 4, 3, 5, 6


def _slice_last(ctx: NodeContext, x: Value, start: int, end: int) -> Value:
    shape = shape_of(x)
    starts = [0] * (len(shape) - 1) + [start]
    ends = [*shape[:-1], end]
    return ctx.emit(g.SliceOp, [x], starts=starts, ends=ends, steps=[1] * len(shape))[0]


def _heads(ctx: NodeContext, x: Value, heads: int, perm: list[int]) -> Value:
    """(B, S, N * h) -> (B, N, S, h) (perm [0, 2, 1, 3]) or (B, N, h, S)."""
    b, s, width = shape_of(x)
    x = ctx.reshape(x, (b, s, heads, width // heads))
    return ctx.emit(g.TransposeOp, [x], perm=perm)[0]


def _sizes(ctx: NodeContext, weights: Value, heads: int) -> tuple[int, int, int]:
    """The Q, K and V hidden sizes (qkv_hidden_sizes, or the weights' width / 3)."""
    width = shape_of(weights)[1]
    sizes = ctx.attr("qkv_hidden_sizes")
    if sizes is None:
        if width % 3:
            raise ctx.invalid(f"its weights are {width} wide; that is not 3 x hidden")
        sizes = [width // 3] * 3
    sizes = [int(s) for s in sizes]
    if len(sizes) != 3 or sum(sizes) != width or sizes[0] != sizes[1]:
        raise ctx.invalid(
            f"attribute 'qkv_hidden_sizes' is {sizes}; it must be three sizes, Q's "
            f"equal to K's, that add up to the weights' width {width}"
        )
    if any(s % heads for s in sizes):
        raise ctx.invalid(
            f"the hidden sizes {sizes} must be multiples of num_heads = {heads}"
        )
    return sizes[0], sizes[1], sizes[2]


def _key_mask(
    ctx: NodeContext, m: Arith, mask: Value | None, batch: int, queries: int, seq: int
) -> Value | None:
    """The additive mask `mask` (of `seq` keys), shaped to broadcast against the
    scores (B, N, S, T): 0 where a key is kept, mask_filter_value where it is
    masked."""
    if mask is None:
        return None
    fill = float(ctx.attr("mask_filter_value", -10000.0))
    shape = tuple(shape_of(mask))
    if numpy_type_of(mask) != np.int32:
        raise ctx.invalid(f"its mask_index is {numpy_type_of(mask)}; it must be int32")
    keys = m.const(np.arange(seq, dtype=np.int32).reshape(1, seq), np.int32)
    if shape in ((batch,), (2 * batch,)):
        ends = ctx.reshape(_slice_last(ctx, mask, 0, batch), (batch, 1))
        masked = m.op(g.NotOp, m.less(keys, ends))  # key index >= its row's end
        if shape == (2 * batch,):
            starts = ctx.reshape(_slice_last(ctx, mask, batch, 2 * batch), (batch, 1))
            masked = m.either(masked, m.less(keys, starts))
        return ctx.reshape(m.where(masked, fill, 0.0), (batch, 1, 1, seq))
    if shape == (batch, seq):
        kept = m.greater(mask, m.const(0, np.int32))
        return ctx.reshape(m.where(kept, 0.0, fill), (batch, 1, 1, seq))
    if shape == (batch, queries, seq):
        kept = m.greater(mask, m.const(0, np.int32))
        return ctx.reshape(m.where(kept, 0.0, fill), (batch, 1, queries, seq))
    raise ctx.unsupported(
        f"a mask of shape {list(shape)} is not supported (smelt imports "
        f"({batch},), ({2 * batch},), ({batch}, {seq}) and ({batch}, {queries}, "
        f"{seq}) masks; not the 4-D Megatron one)"
    )


@handles("Attention")
def _attention(ctx: NodeContext) -> list[Value]:
    x, weights = ctx.inputs[:2]
    dtype = float_input(ctx, x)
    m = Arith(ctx, dtype)
    for i, what in ((PAST, "past"), (PAST_LENGTH, "past_sequence_length")):
        if ctx.input(i) is not None:
            raise ctx.unsupported(
                f"input {i} ({what}: a key-value cache) is not supported"
            )
    refuse_outputs(ctx, range(1, 2), "present: a key-value cache")
    refuse_attrs(ctx, {"unidirectional": (0, 1), "do_rotary": (0,),
                       "past_present_share_buffer": (0,)})  # fmt: skip
    heads = int(ctx.attr("num_heads", 0))
    if heads < 1:
        raise ctx.invalid(f"attribute 'num_heads' is {heads}; it must be positive")
    shape = shape_of(x)
    if len(shape) != 3 or len(shape_of(weights)) != 2:
        raise ctx.invalid(
            f"its input {list(shape)} and weights {list(shape_of(weights))} must "
            "be (batch, sequence, input hidden) and (input hidden, Q+K+V hidden)"
        )
    sizes = _sizes(ctx, weights, heads)
    _check_bias(ctx, ctx.input(2), sum(sizes))
    qkv = ctx.emit(g.MatMulOp, [x, weights])[0]  # (B, S, Q + K + V hidden)
    if ctx.input(2) is not None:
        qkv = m.add(qkv, ctx.input(2))
    mask = _key_mask(ctx, m, ctx.input(MASK), shape[0], shape[1], shape[1])
    return [_split_attend(ctx, m, qkv, sizes, heads, mask, ctx.input(ATTENTION_BIAS))]


def _check_bias(ctx: NodeContext, bias: Value | None, width: int) -> None:
    if bias is not None and tuple(shape_of(bias)) != (width,):
        raise ctx.invalid(
            f"its bias has shape {list(shape_of(bias))}; it must be [{width}]"
        )


def _split_attend(
    ctx: NodeContext,
    m: Arith,
    qkv: Value,
    sizes: tuple[int, int, int],
    heads: int,
    mask: Value | None,
    attention_bias: Value | None,
) -> Value:
    """Attention of the projections side by side in qkv (B, S, Q + K + V)."""
    q_size, k_size, v_size = sizes
    q = _slice_last(ctx, qkv, 0, q_size)
    k = _slice_last(ctx, qkv, q_size, q_size + k_size)
    v = _slice_last(ctx, qkv, q_size + k_size, q_size + k_size + v_size)
    return _attend(ctx, m, q, k, v, heads, mask, attention_bias)


@handles("QAttention")
def _qattention(ctx: NodeContext) -> list[Value]:
    """Attention of a quantized input and weights: the projection is the int32
    product (input - its zero point) @ (weight - its zero point), as float
    times input_scale * weight_scale, + bias (as MatMulIntegerToFloat); the rest
    is Attention's in float."""
    x, weights, bias, x_scale, w_scale = ctx.inputs[:5]
    if ctx.input(8) is not None:
        raise ctx.unsupported("input 8 (past: a key-value cache) is not supported")
    refuse_outputs(ctx, range(1, 2), "present: a key-value cache")
    refuse_attrs(ctx, {"unidirectional": (0, 1), "do_rotary": (0,),
                       "past_present_share_buffer": (0,)})  # fmt: skip
    heads = int(ctx.attr("num_heads", 0))
    if heads < 1:
        raise ctx.invalid(f"attribute 'num_heads' is {heads}; it must be positive")
    shape = shape_of(x)
    if len(shape) != 3 or len(shape_of(weights)) != 2:
        raise ctx.invalid(
            f"its input {list(shape)} and weights {list(shape_of(weights))} must "
            "be (batch, sequence, input hidden) and (input hidden, Q+K+V hidden)"
        )
    sizes = _sizes(ctx, weights, heads)
    _check_bias(ctx, bias, sum(sizes))
    acc = matmul_integer(ctx, x, weights, ctx.input(6), ctx.input(7))
    qkv = integer_to_float(ctx, acc, x_scale, w_scale, bias)
    m = Arith(ctx, np.dtype(np.float32))
    mask = _key_mask(ctx, m, ctx.input(5), shape[0], shape[1], shape[1])
    return [_split_attend(ctx, m, qkv, sizes, heads, mask, None)]


def _attend(
    ctx: NodeContext,
    m: Arith,
    q: Value,
    k: Value,
    v: Value,
    heads: int,
    mask: Value | None,
    attention_bias: Value | None,
) -> Value:
    """softmax(Q K^T * scale + mask (+ causal) + attention_bias) V per head,
    of q (B, S, N * h), k (B, T, N * h) and v (B, T, N * hv): (B, S, N * hv)."""
    batch, queries, q_size = shape_of(q)
    keys = shape_of(k)[1]
    v_size = shape_of(v)[2]
    scale = ctx.attr("scale")
    scale = float(scale) if scale else 1.0 / math.sqrt(q_size // heads)
    q = _heads(ctx, q, heads, [0, 2, 1, 3])
    k = _heads(ctx, k, heads, [0, 2, 3, 1])
    v = _heads(ctx, v, heads, [0, 2, 1, 3])
    scores = m.mul(ctx.emit(g.MatMulOp, [q, k])[0], scale)  # (B, N, S, T)
    if ctx.attr("unidirectional", 0):
        fill = float(ctx.attr("mask_filter_value", -10000.0))
        above = np.triu(np.full((queries, keys), fill, m.dtype), k=1)
        mask = m.const(above) if mask is None else m.add(mask, above)
    if mask is not None:
        scores = m.add(scores, mask)
    if attention_bias is not None:
        scores = m.add(scores, attention_bias)
    probs = ctx.emit(g.SoftmaxOp, [scores], axis=3)[0]
    out = ctx.emit(g.MatMulOp, [probs, v])[0]  # (B, N, S, hv)
    out = ctx.emit(g.TransposeOp, [out], perm=[0, 2, 1, 3])[0]
    return ctx.reshape(out, (batch, queries, v_size))


@handles("MultiHeadAttention")
def _multi_head_attention(ctx: NodeContext) -> list[Value]:
    """Query, key and value given apart, each (B, length, hidden) (+ bias of
    Q + K + V hidden), a key padding mask and an attention bias."""
    q, k, v = ctx.inputs[0], ctx.input(1), ctx.input(2)
    dtype = float_input(ctx, q, "query")
    m = Arith(ctx, dtype)
    for i in range(6, len(ctx.inputs)):
        if ctx.input(i) is not None:
            raise ctx.unsupported(
                f"input {i} ('{ctx.node.input[i]}': a key-value cache) is not supported"
            )
    refuse_outputs(ctx, range(1, 4), "a key-value cache or the scores")
    refuse_attrs(ctx, {"unidirectional": (0, 1)})
    heads = int(ctx.attr("num_heads", 0))
    if heads < 1:
        raise ctx.invalid(f"attribute 'num_heads' is {heads}; it must be positive")
    shapes = [shape_of(x) if x is not None else None for x in (q, k, v)]
    if k is None or v is None or any(len(sh) != 3 for sh in shapes):
        raise ctx.unsupported(
            f"query, key and value of shapes {shapes} are not supported (smelt "
            "imports three 3-D ones, (batch, length, hidden); not packed ones)"
        )
    batch, queries, q_size = shapes[0]
    _, keys, k_size = shapes[1]
    v_size = shapes[2][2]
    if k_size != q_size or shapes[2][:2] != shapes[1][:2] or shapes[1][0] != batch:
        raise ctx.invalid(f"its query, key and value shapes {shapes} do not fit")
    if any(size % heads for size in (q_size, v_size)):
        raise ctx.invalid(f"hidden sizes {q_size}, {v_size} must be multiples of "
                          f"num_heads = {heads}")  # fmt: skip
    bias = ctx.input(3)
    if bias is not None:
        if tuple(shape_of(bias)) != (2 * q_size + v_size,):
            raise ctx.invalid(f"its bias has shape {list(shape_of(bias))}; it must "
                              f"be [{2 * q_size + v_size}]")  # fmt: skip
        q = m.add(q, _slice_last(ctx, bias, 0, q_size))
        k = m.add(k, _slice_last(ctx, bias, q_size, 2 * q_size))
        v = m.add(v, _slice_last(ctx, bias, 2 * q_size, 2 * q_size + v_size))
    mask = _key_mask(ctx, m, ctx.input(4), batch, queries, keys)
    return [_attend(ctx, m, q, k, v, heads, mask, ctx.input(5))]
