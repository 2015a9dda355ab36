"""NCHW conv2d on a CPU as a GEMM per image and group, scheduled like the NHWC
implicit GEMM (`loop.pattern = "conv2d"`: tiles, register blocking, window loops
in the micro-kernel): out[n, g·og+m, p] = bias + Σ over ([kh], [kw], k) of
w[g·og+m, k, kh, kw] · B[n, g·kb+k, p + kh·row + kw·col].

The output pixels p run along N (contiguous in the NCHW output and in B), the
output channels along M (the weights: a constant [O, Cg·KH·KW] that
loop-schedule-plan has packed at compile time, as A), K along the input
channels.
B is where the input can be read with unit stride along p:

* stride 1 ("wide" rows): B is the (zero-padded) input itself, seen as
  [N, C, Hp·Wp]; p walks the padded rows, so each output row has Wp - OW extra
  columns that are computed and dropped. Window position (kh, kw) reads B
  shifted by kh·d·Wp + kw·d. No copy beyond the padding; a 1x1 conv without
  pads reads its input in place.
* other strides: B is the im2col of the (padded) input, [N, C·KH·KW, OH·OW],
  built by a copy kernel (the window is then folded into K).

Where B is a copy, its columns run to a multiple of `LANES` (zero rows below
the padded input, zero columns in im2col), so the band has no scalar tail. The
band accumulates in an f32 scratch [N, O, OH·Wb] (Wb the row pitch of p: Wp or
OW; wider for the rounded-up band) that a last nest copies into the output
through the fused epilogue.
Depthwise convs (one output channel per group: a GEMM of one row), non-f32
convs, other targets and im2col buffers over `MAX_COL_BYTES` keep the window
loops of lower_conv.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph, loop, target
from smelt.lowering import lower_conv
from smelt.lowering.kernel_io import Anchor, KernelIO
from smelt.lowering.loop_builder import (
    BATCH_ROLE,
    CONV_PATTERN,
    Index,
    mark_pattern,
    tag_loops,
)
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.lower_data import pad_nest
from smelt.lowering.scalar_ops import Arith

LANES = 16
"""Where B is a copy (pads or im2col), the band's columns are rounded up to a
multiple of this (AVX-512's f32 lanes, twice AVX2's) and the copy gets room
for them: a tail of columns that fills no vector ran scalar, 6 rows x up to
15 columns of scalar accumulators (a 7x7 conv: 13 of its 61 columns)."""

MAX_COL_BYTES = 64 << 20
"""The largest im2col buffer (strided convs) the GEMM form builds; a bigger one
keeps the window loops (lower_conv.py) rather than grow the arena by it."""


@dataclass(frozen=True)
class NchwGemm:
    """The sizes of one NCHW conv as a GEMM (see the module docstring)."""

    n: int
    c: int  # input channels
    h: int  # padded input height and width
    w: int
    groups: int
    cg: int
    og: int
    kh: int
    kw: int
    oh: int
    ow: int
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]

    @staticmethod
    def of(op: graph.Conv2dOp) -> NchwGemm:
        n, c, h, w = graph.shape_of(op.input)
        _, cg, kh, kw = graph.shape_of(op.weight)
        _, o, oh, ow = graph.shape_of(op.result)
        g = op.attr("group")
        pads = tuple(op.attr("pads") or (0, 0, 0, 0))
        strides = tuple(op.attr("strides") or (1, 1))
        dilations = tuple(op.attr("dilations") or (1, 1))
        return NchwGemm(
            n, c, h + pads[0] + pads[2], w + pads[1] + pads[3], g, cg, o // g,
            kh, kw, oh, ow, strides, dilations, pads,  # type: ignore[arg-type]
        )  # fmt: skip

    @property
    def wide(self) -> bool:
        """B is the padded input read along its rows (stride 1)."""
        return self.strides == (1, 1)

    @property
    def row(self) -> int:
        """Wb: the distance in p between two output rows."""
        return self.w if self.wide else self.ow

    @property
    def window(self) -> list[tuple[int, str, int]]:
        """(size, role, step along p in B) of the window loops of the band."""
        if not self.wide:
            return []
        d0, d1 = self.dilations
        dims = [(self.kh, "kh", d0 * self.w), (self.kw, "kw", d1)]
        return [dim for dim in dims if dim[0] > 1]

    @property
    def kb(self) -> int:
        """B rows per group (the k loop)."""
        return self.cg if self.wide else self.cg * self.kh * self.kw

    @property
    def columns(self) -> int:
        """The band's n extent: through the last output pixel of the last row."""
        return (self.oh - 1) * self.row + self.ow

    @property
    def copied(self) -> bool:
        """Whether B is a copy of the input (padded, or im2col)."""
        return any(self.pads) or not self.wide

    @property
    def band(self) -> int:
        """The columns the band computes: `columns`, rounded up to LANES where
        B is a copy with room for them."""
        return -(-self.columns // LANES) * LANES if self.copied else self.columns

    @property
    def extra_rows(self) -> int:
        """Zero rows below the padded input (wide rows) that the band's extra
        columns read."""
        return -(-(self.band - self.columns) // self.w) if self.wide else 0

    @property
    def col_bytes(self) -> int:
        return 4 * self.n * self.c * self.kh * self.kw * self.oh * self.ow


def _cpu_module(op: Operation) -> bool:
    module = op.get_toplevel_object()
    return isinstance(module, ModuleOp) and target.cpu_target(module) is not None


def gemm_form(op: graph.Conv2dOp) -> bool:
    """Whether `op` lowers through the GEMM form here (else lower_conv.py)."""
    if op.attr("layout", "nchw") != "nchw" or not _cpu_module(op):
        return False
    values = (op.input, op.weight, op.result)
    if any(graph.element_type_of(v) != dtypes.f32 for v in values):
        return False
    if any(0 in graph.shape_of(v) for v in values):
        return False
    c = NchwGemm.of(op)
    if c.og == 1:  # depthwise-like: a GEMM of one row per group
        return False
    return c.wide or c.col_bytes <= MAX_COL_BYTES


def prepare(
    ctx: LoweringContext, op: graph.Conv2dOp, operand_buffer: Callable[[int], SSAValue]
) -> list[SSAValue]:
    """[B as [N, C', L], the weights as [O, Cg·KH·KW], the f32 scratch]; B comes
    from the padded input (a copy kernel when there are pads) and, for strides
    other than 1, an im2col kernel after it."""
    if not gemm_form(op):
        return lower_conv.prepare_conv2d(ctx, op, operand_buffer)
    c = NchwGemm.of(op)
    f32 = dtypes.f32
    x = operand_buffer(0)
    if any(c.pads):
        rows = c.h + c.extra_rows
        padded = ctx.alloc(MemRefType(f32, [c.n, c.c, rows, c.w]))
        k = ctx.kernel("conv2d_pad", [x], [padded])
        p = c.pads
        widths = [0, 0, p[0], p[1], 0, 0, p[2] + c.extra_rows, p[3]]
        pad_nest(k, k.inputs[0], k.outputs[0], widths, fill=k.constant(0.0, f32))
        x = padded
    if c.wide:
        size = (c.h + c.extra_rows) * c.w
        b = ctx.emit(loop.ViewOp(x, MemRefType(f32, [c.n, c.c, size])))
    else:
        b = _im2col(ctx, c, x)
    o = c.groups * c.og
    w2 = _weight_rows(ctx, operand_buffer(1), [o, c.cg * c.kh * c.kw])
    scratch = ctx.alloc(MemRefType(f32, [c.n, o, max(c.oh * c.row, c.band)]))
    return [b, w2, scratch]


def _weight_rows(ctx: LoweringContext, weight: SSAValue, shape: list[int]) -> SSAValue:
    """The weights as [O, Cg·KH·KW]: a new constant when they are one (so that
    loop-schedule can pack them at compile time), else a view."""
    owner = weight.owner
    t = MemRefType(dtypes.f32, shape)
    if isinstance(owner, loop.ConstantOp):
        rows = graph.dense_to_array(owner.value).reshape(shape)
        return ctx.emit(loop.ConstantOp(graph.array_to_dense(rows), t))
    return ctx.emit(loop.ViewOp(weight, t))


def _im2col(ctx: LoweringContext, c: NchwGemm, x: SSAValue) -> SSAValue:
    """col[n, c, kh, kw, oh·OW + ow] = x[n, c, oh·s + kh·d, ow·s + kw·d] (x
    padded), zeros in the band's extra columns, seen as [N, C·KH·KW, band]."""
    f32 = dtypes.f32
    col = ctx.alloc(MemRefType(f32, [c.n, c.c, c.kh, c.kw, c.band]))
    k = ctx.kernel("conv2d_im2col", [x], [col])
    (s0, s1), (d0, d1) = c.strides, c.dilations
    with k.nest([c.n, c.c, c.kh, c.kw, c.oh, c.ow]) as (n, ch, kh, kw, oh, ow):
        ih = k.affine([(oh, s0), (kh, d0)])
        iw = k.affine([(ow, s1), (kw, d1)])
        p = k.affine([(oh, c.ow), (ow, 1)])
        k.store(k.load(k.inputs[0], [n, ch, ih, iw]), k.outputs[0],
                [n, ch, kh, kw, p])  # fmt: skip
    pixels = c.oh * c.ow
    if c.band > pixels:
        zero = k.constant(0.0, f32)
        with k.nest([c.n, c.c, c.kh, c.kw, c.band - pixels]) as (n, ch, kh, kw, j):
            p = k.affine([(j, 1)], pixels)
            k.store(zero, k.outputs[0], [n, ch, kh, kw, p])
    shape = [c.n, c.c * c.kh * c.kw, c.band]
    return ctx.emit(loop.ViewOp(col, MemRefType(f32, shape)))


def emit(io: KernelIO, op: graph.Conv2dOp) -> None:
    """Three nests as for the NHWC conv: scratch = bias; the band n [g] m [kh]
    [kw] k n accumulating in the scratch (roles for loop-schedule); then the
    output (through the epilogue) from the scratch's valid columns."""
    if not gemm_form(op):
        return lower_conv.emit_conv2d(io, op)
    c = NchwGemm.of(op)
    k = io.k
    a = Arith(k, dtypes.f32)
    b, w2, scratch = io.extra[-3:]
    mark_pattern(k, CONV_PATTERN)
    grouped = c.groups > 1
    lead = [c.n] + ([c.groups] if grouped else [])
    lead_roles = [BATCH_ROLE] + (["g"] if grouped else [])

    def split(ivs: list[Index]) -> tuple[Index, Index]:
        return ivs[0], ivs[1] if grouped else k.index(0)

    def channel(g: Index, i: Index, size: int) -> Index:
        return k.affine([(g, size), (i, 1)]) if grouped else i

    with k.nest([*lead, c.og, c.band]) as ivs:
        tag_loops(ivs, [*lead_roles, "m", "n"])
        n, g = split(ivs)
        o = channel(g, ivs[-2], c.og)
        k.store_value(io.read(2, [o]), scratch, [n, o, ivs[-1]])
    window = c.window
    taps = c.kh * c.kw if c.wide else 1
    with k.nest([*lead, c.og]) as ivs:
        tag_loops(ivs, [*lead_roles, "m"])
        n, g = split(ivs)
        o = channel(g, ivs[-1], c.og)
        sizes = [size for size, _, _ in window] + [c.kb]
        with k.nest(sizes, loop.REDUCTION) as red, k.loop(c.band) as p:
            tag_loops([*red, p], [*(role for _, role, _ in window), "k", "n"])
            at = {role: iv for (_, role, _), iv in zip(window, red)}
            kk = red[-1]
            shift = [(at[role], step) for _, role, step in window]
            x = k.load_value(b, [n, channel(g, kk, c.kb), k.affine([(p, 1), *shift])])
            tap = [(at["kh"], c.kw)] if "kh" in at else []
            tap += [(at["kw"], 1)] if "kw" in at else []
            w = k.load_value(w2, [o, k.affine([(kk, taps), *tap])])
            index = [n, o, p]
            k.store_value(a.add(k.load_value(scratch, index), a.mul(x, w)), scratch,
                          index)  # fmt: skip
    with k.nest([c.n, c.groups * c.og, c.oh, c.ow]) as (n, o, oh, ow):
        value = k.load_value(scratch, [n, o, k.affine([(oh, c.row), (ow, 1)])])
        io.write(0, value, [n, o, oh, ow])


ANCHORS: dict[type[Operation], Anchor] = {
    graph.Conv2dOp: Anchor(emit, prepare),  # type: ignore[arg-type]
}
"""Overrides lower_conv.ANCHORS' conv2d: the GEMM form where `gemm_form` holds."""
