"""NHWC lowerings of windowed ops: conv2d as an implicit GEMM over weights packed at
compile time, pools with the channels innermost."""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import SSAValue

from smelt.dialects import dtypes, graph, loop
from smelt.errors import SmeltError
from smelt.lowering import lower_conv_dw
from smelt.lowering.kernel_io import KernelIO, writes_own_type
from smelt.lowering.loop_builder import (
    BATCH_ROLE,
    CONV_PATTERN,
    WINDOW_PATTERN,
    Index,
    KernelBuilder,
    element_type,
    mark_pattern,
    shape,
    tag_loops,
)
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.lower_data import pad_nest
from smelt.lowering.pool_windows import finite_lowest, hollow, nonzero_count
from smelt.lowering.scalar_ops import Arith, memref_type


@dataclass(frozen=True)
class Conv:
    """The sizes of one NHWC conv: out[n, oh, ow, g·og_+og] = bias + Σ over (kh, kw,
    ic) of x[n, oh·s+kh·d, ow·s+kw·d, g·cg+ic] · w[g, kh, kw, ic, og]."""

    n: int
    oh: int
    ow: int
    groups: int
    cg: int  # input channels per group
    og: int  # output channels per group
    kh: int
    kw: int
    strides: tuple[int, int]
    dilations: tuple[int, int]

    @staticmethod
    def of(op: graph.Conv2dOp) -> Conv:
        n, oh, ow, o = graph.shape_of(op.result)
        _, kh, kw, cg = graph.shape_of(op.weight)
        g = op.attr("group")
        strides = tuple(op.attr("strides") or (1, 1))
        dilations = tuple(op.attr("dilations") or (1, 1))
        return Conv(n, oh, ow, g, cg, o // g, kh, kw, strides, dilations)  # type: ignore[arg-type]

    @property
    def depthwise(self) -> bool:
        return self.cg == 1 and self.og == 1

    @property
    def packed_shape(self) -> tuple[int, ...]:
        """The weight layout the kernel reads: output channels innermost, so the
        vector loads along them are contiguous. [kh, kw, c] for depthwise convs,
        [kh, kw, ic, o] without groups, else [g, kh, kw, ic, og]."""
        if self.depthwise:
            return (self.kh, self.kw, self.groups)
        if self.groups == 1:
            return (self.kh, self.kw, self.cg, self.og)
        return (self.groups, self.kh, self.kw, self.cg, self.og)

    def pack(self, ohwi: np.ndarray) -> np.ndarray:
        """OHWI weights in `packed_shape` order."""
        grouped = ohwi.reshape(self.groups, self.og, self.kh, self.kw, self.cg)
        packed = np.transpose(grouped, (0, 2, 3, 4, 1))  # g, kh, kw, ic, og
        if self.depthwise:
            packed = np.transpose(grouped[:, 0, :, :, 0], (1, 2, 0))
        return np.ascontiguousarray(packed.reshape(self.packed_shape))

    def weight_index(
        self, k: KernelBuilder, g: Index, kh: Index, kw: Index, ic: Index, og: Index
    ) -> list[Index]:
        """Where w[g, kh, kw, ic, og] is in the packed buffer."""
        if self.depthwise:
            return [kh, kw, g]
        if self.groups == 1:
            return [kh, kw, ic, og]
        return [g, kh, kw, ic, og]

    def channel(self, k: KernelBuilder, g: Index, i: Index, size: int) -> Index:
        """Channel g·size + i (i when there is one group)."""
        return i if self.groups == 1 else k.affine([(g, size), (i, 1)])

    def pixel(self, k: KernelBuilder, m: Index) -> tuple[Index, Index]:
        """(oh, ow) of the flattened output pixel m = oh·OW + ow."""
        if self.oh == 1:
            return k.index(0), m
        if self.ow == 1:
            return m, k.index(0)
        oh = k.op(arith.DivUIOp, m, k.index(self.ow))
        return oh, k.affine([(m, 1), (oh, -self.ow)])

    def input_index(
        self,
        k: KernelBuilder,
        n: Index,
        oh: Index,
        ow: Index,
        kh: Index | None,
        kw: Index | None,
        c: Index,
    ) -> list[Index]:
        """x index (of the zero-padded input) that output (oh, ow) reads at window
        position (kh, kw) (None: a window of one)."""
        terms = [(oh, self.strides[0])], [(ow, self.strides[1])]
        for dim, (iv, dilation) in enumerate(zip((kh, kw), self.dilations)):
            if iv is not None:
                terms[dim].append((iv, dilation))
        return [n, k.affine(terms[0]), k.affine(terms[1]), c]


# --- conv2d -------------------------------------------------------------------------


def _needs_scratch(op: graph.Conv2dOp) -> bool:
    """Whether the conv accumulates in memory (not a 16-bit float, which sums in an
    f32 register) but its kernel writes no output of its result's type: an f32 conv
    whose fused epilogue casts to bf16 / f16 (quant-cast keeps contractions f32
    where the target has no fast 16-bit path). Without a scratch it would fall back
    to the register form, which no schedule tiles (~30x slower)."""
    t = graph.element_type_of(op.result)
    sixteen_bit_float = dtypes.is_float(t) and dtypes.byte_size(t) == 2
    return not sixteen_bit_float and not writes_own_type(op)


def prepare_conv2d(
    ctx: LoweringContext, op: graph.Conv2dOp, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """Extra kernel inputs: the zero-padded input (when `pads`), the weights in
    `Conv.packed_shape` order (a new constant when they are one, else a copy), then
    a scratch of the result's type when `_needs_scratch`."""
    conv = Conv.of(op)
    pads = list(op.attr("pads") or (0,) * 4)
    extra = []
    if any(pads) and not lower_conv_dw.handles(op):  # it guards its border itself
        src = operand_buffer(0)
        n, h, w, c = shape(src)
        padded_type = MemRefType(
            element_type(src), [n, h + pads[0] + pads[2], w + pads[1] + pads[3], c]
        )
        padded = ctx.alloc(padded_type)
        k = ctx.kernel("conv2d_pad", [src], [padded])
        zero = 0.0 if dtypes.is_float(element_type(src)) else 0
        fill = k.constant(zero, element_type(src))
        widths = [0, pads[0], pads[1], 0, 0, pads[2], pads[3], 0]
        pad_nest(k, k.inputs[0], k.outputs[0], widths, fill=fill)
        extra.append(padded)
    extra.append(_packed_weight(ctx, conv, operand_buffer(1)))
    if _needs_scratch(op):
        extra.append(ctx.alloc(memref_type(op.result.type)))  # type: ignore[arg-type]
    return extra


def _packed_weight(ctx: LoweringContext, conv: Conv, weight: SSAValue) -> SSAValue:
    owner = weight.owner
    if isinstance(owner, loop.ConstantOp):
        packed = conv.pack(graph.dense_to_array(owner.value))
        value = graph.array_to_dense(packed)
        return ctx.emit(loop.ConstantOp(value, memref_type(value.type)))  # type: ignore[arg-type]
    packed_type = MemRefType(element_type(weight), conv.packed_shape)
    buffer = ctx.alloc(packed_type)
    k = ctx.kernel("conv2d_pack", [weight], [buffer])
    # one loop per OHWI dim, the store index in packed order
    with k.nest([conv.groups, conv.og, conv.kh, conv.kw, conv.cg]) as ivs:
        g, og, kh, kw, ic = ivs
        o = k.affine([(g, conv.og), (og, 1)])
        value = k.load(k.inputs[0], [o, kh, kw, ic])
        k.store(value, k.outputs[0], conv.weight_index(k, g, kh, kw, ic, og))
    return buffer


def emit_conv2d(io: KernelIO, op: graph.Conv2dOp) -> None:
    conv = Conv.of(op)
    a = Arith(io.k, graph.element_type_of(op.input))
    extra = list(io.extra)
    out = extra.pop() if _needs_scratch(op) else io.result_buffer(0)
    x = extra[0] if len(extra) == 2 else io.operand_buffer(0)
    w = extra[-1]
    if lower_conv_dw.handles(op):
        pads = list(op.attr("pads") or (0,) * 4)
        return lower_conv_dw.conv_depthwise_registers(io, a, conv, x, w, pads)
    # 16-bit floats accumulate in an f32 register; others accumulate in the output.
    if a.type != a.storage or out is None:
        _conv_register(io, a, conv, x, w)
    elif conv.depthwise:
        _conv_depthwise(io, a, conv, x, w, out)
    else:
        _conv_gemm(io, a, conv, x, w, out)


def _conv_gemm(
    io: KernelIO, a: Arith, conv: Conv, x: SSAValue, w: SSAValue, out: SSAValue
) -> None:
    """Implicit GEMM per group: M = output pixels (flattened oh·OW + ow), N = output
    channels (contiguous in out and w), K = (kh, kw, ic). Three nests as for
    matmul: out = bias; the band n g m kh kw k n accumulating in out; the epilogue.
    The band's loops carry roles (batch, g, m, kh, kw, k, n) for loop-schedule."""
    k = io.k
    mark_pattern(k, CONV_PATTERN)
    lead = [conv.n] + ([conv.groups] if conv.groups > 1 else [])
    lead_roles = [BATCH_ROLE] + (["g"] if conv.groups > 1 else [])
    m_size = conv.oh * conv.ow

    def split(ivs: list[Index]) -> tuple[Index, Index]:
        return ivs[0], ivs[1] if conv.groups > 1 else k.index(0)

    def out_index(n: Index, g: Index, m: Index, og: Index) -> list[Index]:
        oh, ow = conv.pixel(k, m)
        return [n, oh, ow, conv.channel(k, g, og, conv.og)]

    with k.nest([*lead, m_size, conv.og]) as ivs:
        tag_loops(ivs, [*lead_roles, "m", "n"])
        n, g = split(ivs)
        index = out_index(n, g, ivs[-2], ivs[-1])
        k.store_value(io.read(2, index[-1:]), out, index)
    window = [(conv.kh, "kh"), (conv.kw, "kw")]
    window = [(size, name) for size, name in window if size > 1]
    with k.nest([*lead, m_size]) as ivs:
        tag_loops(ivs, [*lead_roles, "m"])
        n, g = split(ivs)
        m = ivs[-1]
        reduction = [size for size, _ in window] + [conv.cg]
        with k.nest(reduction, loop.REDUCTION) as red, k.loop(conv.og) as og:
            tag_loops([*red, og], [*(name for _, name in window), "k", "n"])
            at = dict(zip((name for _, name in window), red))
            kh, kw = at.get("kh"), at.get("kw")
            ic = red[-1]
            index = out_index(n, g, m, og)
            c = conv.channel(k, g, ic, conv.cg)
            pixel = conv.input_index(k, n, index[1], index[2], kh, kw, c)
            zero = k.index(0)
            w_index = conv.weight_index(k, g, kh or zero, kw or zero, ic, og)
            value = a.mul(k.load_value(x, pixel), k.load_value(w, w_index))
            k.store_value(a.add(k.load_value(out, index), value), out, index)
    if io.has_epilogue:
        with k.nest([*lead, m_size, conv.og]) as ivs:
            tag_loops(ivs, [*lead_roles, "m", "n"])
            n, g = split(ivs)
            index = out_index(n, g, ivs[-2], ivs[-1])
            io.write(0, k.load_value(out, index), index)


def _conv_depthwise(
    io: KernelIO, a: Arith, conv: Conv, x: SSAValue, w: SSAValue, out: SSAValue
) -> None:
    """One filter per channel: out = bias; for each pixel and window position,
    out[.., c] += x[.., c] · w[kh, kw, c] with the channels innermost (contiguous)."""
    k = io.k
    c_size = conv.groups
    with k.nest([conv.n, conv.oh, conv.ow, c_size]) as (n, oh, ow, c):
        k.store_value(io.read(2, [c]), out, [n, oh, ow, c])
    with (
        k.nest([conv.n, conv.oh, conv.ow]) as (n, oh, ow),
        k.nest([conv.kh, conv.kw], loop.REDUCTION) as (kh, kw),
        k.loop(c_size) as c,
    ):
        index = [n, oh, ow, c]
        value = a.mul(
            k.load_value(x, conv.input_index(k, n, oh, ow, kh, kw, c)),
            k.load_value(w, [kh, kw, c]),
        )
        k.store_value(a.add(k.load_value(out, index), value), out, index)
    if io.has_epilogue:
        with k.nest([conv.n, conv.oh, conv.ow, c_size]) as index:
            io.write(0, k.load_value(out, index), index)


def _conv_register(
    io: KernelIO, a: Arith, conv: Conv, x: SSAValue, w: SSAValue
) -> None:
    """out[n, oh, ow, o] = bias[o] + the window sum in a scalar iter_arg (16-bit
    floats, or no output buffer to accumulate in)."""
    k = io.k
    bounds = [conv.n, conv.oh, conv.ow, conv.groups, conv.og]
    with k.nest(bounds) as (n, oh, ow, g, og):
        o = k.affine([(g, conv.og), (og, 1)])

        def step(ivs: list[Index], acc: list[SSAValue]) -> list[SSAValue]:
            kh, kw, ic = ivs
            c = k.affine([(g, conv.cg), (ic, 1)])
            product = a.mul(
                k.load_value(x, conv.input_index(k, n, oh, ow, kh, kw, c)),
                k.load_value(w, conv.weight_index(k, g, kh, kw, ic, og)),
            )
            return [a.add(acc[0], product)]

        (total,) = k.reduce([conv.kh, conv.kw, conv.cg], [io.read(2, [o])], step)
        io.write(0, total, [n, oh, ow, o])


# --- pools --------------------------------------------------------------------------


def emit_pool(io: KernelIO, op: graph.PoolOp) -> None:
    """Per output pixel and channel, reduce the window in iter_args; the window
    loops (roles kh, kw) are innermost, so that loop-schedule can unroll them and
    leave the channel loop innermost for loop-vectorize. Positions outside the
    input are skipped (index clamped, value masked with select); average divides by
    the positions inside the input, or inside input + pads with count_include_pad."""
    is_max = isinstance(op, graph.MaxPoolOp)
    k = io.k
    a = Arith(k, graph.element_type_of(op.input))
    if not is_max and not a.is_float:
        raise SmeltError(
            f"{op.name} on {a.graph_type} is not supported: it needs floats"
        )
    n_, ih_, iw_, c_ = graph.shape_of(op.input)
    _, oh_, ow_, _ = graph.shape_of(op.result)
    in_sp, out_sp = (ih_, iw_), (oh_, ow_)
    kernel = list(op.attr("kernel_shape"))
    strides = list(op.attr("strides") or (1, 1))
    pads = list(op.attr("pads") or (0,) * 4)
    dilations = list(op.attr("dilations") or (1, 1))
    lows, highs = pads[:2], pads[2:]
    include_pad = not is_max and bool(op.attr("count_include_pad", 0))

    def reaches(d: int, limit: int) -> bool:
        last = (out_sp[d] - 1) * strides[d] + (kernel[d] - 1) * dilations[d] - lows[d]
        return last >= limit

    guarded = [lows[d] > 0 or reaches(d, in_sp[d]) for d in range(2)]
    counted = [reaches(d, in_sp[d] + highs[d]) for d in range(2)]
    dynamic_count = not is_max and any(counted if include_pad else guarded)
    # a window wholly in the padding (dilated): the lowest finite value, or 0 / 1
    empty = hollow(in_sp, out_sp, kernel, strides, lows, dilations,
                   highs if include_pad else None)  # fmt: skip
    max_init = (finite_lowest(a) if empty else a.lowest()) if is_max else None
    mark_pattern(k, WINDOW_PATTERN)
    with k.nest([n_, oh_, ow_, c_]) as (n, oh, ow, c):
        tag_loops([c], ["c"])

        def step(kivs: list[Index], accs: list[SSAValue]) -> list[SSAValue]:
            tag_loops(kivs, ["kh", "kw"])
            index, inside, in_padded = [], [], []
            for d, o in enumerate((oh, ow)):
                i = k.affine([(o, strides[d]), (kivs[d], dilations[d])], -lows[d])
                if include_pad and counted[d]:
                    in_padded.append(k.in_range(i, -lows[d], in_sp[d] + highs[d]))
                if guarded[d]:
                    inside.append(k.in_range(i, 0, in_sp[d]))
                    i = k.clamp(i, 0, in_sp[d] - 1)
                index.append(i)
            value = io.read(0, [n, *index, c])
            valid = k.and_all(inside)
            # the sign of a zero maximum is not observable in MaxPool's
            # contract (onnxruntime's vmaxps leaves it to operand order)
            combined = (
                a.max(accs[0], value, signed_zeros=False)
                if is_max
                else a.add(accs[0], value)
            )
            new = [combined if valid is None else a.select(valid, combined, accs[0])]
            if dynamic_count:
                counts = k.and_all(in_padded) if include_pad else valid
                new.append(a.add(accs[1], a.select(counts, a.one(), a.zero())))
            return new

        inits = [max_init if is_max else a.zero()] + (
            [a.zero()] if dynamic_count else []
        )
        accs = k.reduce(kernel, inits, step)
        result = accs[0]
        if not is_max:
            count = accs[1] if dynamic_count else a.const(pymath.prod(kernel))
            result = a.div(result, nonzero_count(a, count) if empty else count)
        io.write(0, result, [n, oh, ow, c])
