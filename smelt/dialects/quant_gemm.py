"""quant.qgemm: an int8 GEMM with prepacked weights and a fused epilogue.

    acc[m, n] = Σ_k a[m, k] · W[k, n] + bias[n]                   (i32 accumulation)
    a         = x, or x + 128 (`shift_input`: an s8 x read as u8 by `vpdpbusd`)

and, by `epilogue` (its operands after the first five, `post`):

    requantize         y = requant(acc)  (the default; no post operands)
    affine_requantize  y = quantize(dequantize(requant(acc), s_mid, zero_point)
                                    · scale[n] + addend[n], s_out, z_out),
                       post = (addend f32[N_p], scale f32[N_p], [s_mid, s_out]
                       f32[2], z_out), then max(·, z_out) with `post_relu`: a
                       QDQ MatMul → Q → DQ → Add(bias) → Q (scale 1), or
                       Conv → Q → DQ → BatchNorm → Q, each rounding kept
    dequantize         y = f32(acc) · multiplier[n] + addend[n] (f32), post =
                    (addend f32[N_p],): a DQ → MatMul → (float) layer; the
                    zero_point operand is not read
    requant(acc)    = saturate(round_half_even(f32(acc) · multiplier[n]) +
                      zero_point), then max(·, zero_point) with `relu`
    a program          y = the program (`quant_epilogue`, as quant.dwconv's) on
                       requant(acc): the f32 chain of the unfused graph up to the
                       next quantize (dequantize, BatchNorm, HardSwish, a
                       residual add …), or an f32 result where the chain ends
                       in float (a program without a quant step); post = f32
                       [N_p] per-column operands (padded) and tensors of the
                       result's shape [..., N] (a residual: f32, or 8-bit
                       that the program dequantizes)

Every float step is the f32 operation that the unfused ops compute (a division
for a quantize), so the fold changes no bit. x is u8 / s8 [..., K]; W (int,
[K, N]) is stored packed for one micro-kernel `variant` (`VARIANTS`):
wp[N_p / NR, K_p / KG, NR, KG] with wp[j, g, c, t] = W[g · KG + t, j · NR + c],
zero past K and N (so a padded k or column adds nothing). bias (i32), multiplier
and addend (f32) are padded to N_p. quant-pack-gemm builds it; the LLVM target
emits `lowering/llvm/int8_gemm.py` for it.

quant.im2col gathers the patches of an NHWC 8-bit tensor (padded beforehand) as
the rows of a qgemm input: a k×k conv is a qgemm of its im2col by the weights
[KH·KW·C, O].
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.irdl import irdl_op_definition, operand_def, result_def, var_operand_def
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes
from smelt.dialects import quant_epilogue as epi
from smelt.dialects.graph_base import GraphOp, shape_of, tensor


class Variant(NamedTuple):
    """A micro-kernel family: i32 lanes per vector, columns per panel (NR), k per
    i32 lane (KG), weight storage, rows per register tile (MR), the dot intrinsic
    and the CPU feature it needs."""

    lanes: int
    nr: int
    kg: int
    weight: type
    mr: int
    intrinsic: str
    feature: str


VARIANTS: dict[str, Variant] = {
    # u8 × s8, 4 k per lane: acc += Σ_t a[t] · b[t]
    "vnni512": Variant(16, 32, 4, np.int8, 8, "llvm.x86.avx512.vpdpbusd.512",
                       "avx512vnni"),
    "vnni256": Variant(8, 16, 4, np.int8, 6, "llvm.x86.avx512.vpdpbusd.256",
                       "avxvnni"),
    # u8 × s8 as vpdpbusd without VNNI: vpmaddubsw (pairs into i16, saturating)
    # then vpmaddwd by ones; only for weights whose pairs cannot saturate
    # (`pairs_fit`: 7-bit weights, onnxruntime's reduce_range)
    "maddubs512": Variant(16, 32, 4, np.int8, 8, "llvm.x86.avx512.pmaddubs.w.512",
                          "avx512bw"),
    "maddubs256": Variant(8, 16, 4, np.int8, 6, "llvm.x86.avx2.pmadd.ub.sw", "avx2"),
    # i16 × i16, 2 k per lane (operands widened: weights at pack time)
    "pmaddwd512": Variant(16, 32, 2, np.int16, 8, "llvm.x86.avx512.pmaddw.d.512",
                          "avx512bw"),
    "pmaddwd256": Variant(8, 16, 2, np.int16, 6, "llvm.x86.avx2.pmadd.wd", "avx2"),
}  # fmt: skip

PAIR_LIMIT = 128
"""vpmaddubsw adds two u8 · s8 products into an i16 that saturates: exact while
255 · (|w[2t]| + |w[2t + 1]|) ≤ 32767, i.e. each k pair of a column sums to at
most 128 in magnitude (7-bit weights, in [-64, 64], always do)."""


def pairs_fit(w: np.ndarray) -> bool:
    """Whether weights w [K, N] (integers) never saturate vpmaddubsw (PAIR_LIMIT)."""
    k = w.shape[0]
    even = np.zeros((k + k % 2, w.shape[1]), np.int64)
    even[:k] = np.abs(w)
    return bool((even[0::2] + even[1::2]).max(initial=0) <= PAIR_LIMIT)


PARAMS_ATTR = "quant.qgemm"
"""On the `func.call @smelt.qgemm` of a qgemm kernel: its parameters (a dictionary,
`lower_qgemm.py` writes it, the LLVM target reads it)."""
CALLEE = "smelt.qgemm"

UNIT_TARGET = 16  # work units per GEMM when it is large enough: 2 per thread at 8
PANELS_PER_UNIT = 4  # column panels per unit
ROW_BLOCK_BYTES = 1 << 18  # the rows of x one unit reads: within L2


class Units(NamedTuple):
    """How a qgemm splits into units (tasks of a parallel loop): row blocks of
    `block_rows` (the last one shorter) × column chunks of `chunk_panels` panels
    (the last one shorter); unit u is row block u // chunks, chunk u % chunks."""

    row_blocks: int
    block_rows: int
    chunks: int
    chunk_panels: int

    @property
    def count(self) -> int:
        return self.row_blocks * self.chunks


def units(m: int, k: int, n: int, variant: str) -> Units:
    """The split of an m × k × n qgemm: chunks of `PANELS_PER_UNIT` panels, rows
    in blocks of whole register tiles, as many as make `UNIT_TARGET` units with
    each block's rows of x within `ROW_BLOCK_BYTES` (at least 4 tiles a block)."""
    v = VARIANTS[variant]
    panels = -(-n // v.nr)
    chunk_panels = min(panels, PANELS_PER_UNIT)
    chunks = -(-panels // chunk_panels)
    tiles = -(-m // v.mr)
    wanted = max(1, -(-UNIT_TARGET // chunks))
    fits = max(1, ROW_BLOCK_BYTES // (max(k, 1) * v.mr))
    per_block = min(tiles, max(4, min(-(-tiles // wanted), fits)))
    block_rows = per_block * v.mr
    return Units(-(-m // block_rows), block_rows, chunks, chunk_panels)


def choose_variant(has) -> str | None:
    """The best variant for a CPU (`has(feature)`) for any s8 weights, or None
    (generic loops); without VNNI, quant-pack-gemm takes the maddubs variant of
    the same width for weights that fit it (`pairs_fit`)."""
    for name in ("vnni512", "vnni256", "pmaddwd512", "pmaddwd256"):
        if has(VARIANTS[name].feature):
            return name
    return None


def padded(k: int, n: int, variant: str) -> tuple[int, int]:
    v = VARIANTS[variant]
    return -(-k // v.kg) * v.kg, -(-n // v.nr) * v.nr


def pack_weights(w: np.ndarray, variant: str) -> np.ndarray:
    """W[K, N] → wp[N_p / NR, K_p / KG, NR, KG] (see the module docstring)."""
    v = VARIANTS[variant]
    k, n = w.shape
    kp, np_ = padded(k, n, variant)
    full = np.zeros((kp, np_), v.weight)
    full[:k, :n] = w
    blocks = full.reshape(kp // v.kg, v.kg, np_ // v.nr, v.nr)
    return np.ascontiguousarray(blocks.transpose(2, 0, 3, 1))


def unpack_weights(wp: np.ndarray, k: int, n: int) -> np.ndarray:
    panels, groups, nr, kg = wp.shape
    full = wp.transpose(1, 3, 0, 2).reshape(groups * kg, panels * nr)
    return full[:k, :n]


EPILOGUES = ("requantize", "affine_requantize", "dequantize")
POST_OPERANDS = {"requantize": 0, "affine_requantize": 4, "dequantize": 1}


def is_program(epilogue: str) -> bool:
    """Whether a qgemm's `epilogue` is a `quant_epilogue` program (not a mode)."""
    return epilogue not in EPILOGUES


def _requantize(
    scaled: np.ndarray, zp: int, dtype: np.dtype, relu: bool
) -> np.ndarray:
    """saturate(round_half_even(scaled) + zp) [max(·, zp)] as `dtype`."""
    info = np.iinfo(dtype)
    lo = max(info.min, zp) if relu else info.min
    return np.clip(np.rint(scaled.astype(np.float64)) + zp, lo, info.max).astype(dtype)


def reference(
    x: np.ndarray, wp: np.ndarray, bias: np.ndarray, mult: np.ndarray,
    zp: np.ndarray, post: list[np.ndarray], k: int, n: int, relu: bool,
    shift_input: bool, epilogue: str = "requantize", post_relu: bool = False,
) -> np.ndarray:  # fmt: skip
    """quant.qgemm in numpy (exact: the f32 steps as the kernel computes them)."""
    w = unpack_weights(wp, k, n).astype(np.int64)
    a = x.astype(np.int64) + (128 if shift_input else 0)
    acc = (a.reshape(-1, k) @ w + bias[:n].astype(np.int64)).astype(np.int32)
    scaled = acc.astype(np.float32) * mult[:n].astype(np.float32)
    if epilogue == "dequantize":
        y = scaled + post[0][:n].astype(np.float32)
        return y.astype(np.float32).reshape(*x.shape[:-1], n)
    z = int(zp)
    y = _requantize(scaled, z, zp.dtype, relu)
    if is_program(epilogue):  # per-column operands [N_p], residuals [..., N]
        operands = [p[:n] if p.ndim == 1 else p.reshape(-1, n) for p in post]
        return epi.evaluate(epilogue, y, operands).reshape(*x.shape[:-1], n)
    if epilogue == "affine_requantize":
        addend, scale, scales, z_out = post
        s_mid, s_out = (np.float32(v) for v in scales.reshape(-1))
        real = (y.astype(np.float32) - np.float32(z)) * s_mid * scale[:n] + addend[:n]
        y = _requantize(real / s_out, int(z_out), z_out.dtype, post_relu)
    return y.reshape(*x.shape[:-1], n)


@irdl_op_definition
class QGemmOp(GraphOp):
    """y = epilogue(x @ W + bias) with W packed (see the module docstring)."""

    FOLDABLE: ClassVar[bool] = False

    name = "quant.qgemm"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    multiplier = operand_def(TensorType)
    zero_point = operand_def(TensorType)
    post = var_operand_def(TensorType)

    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        x, wp, bias, mult, zp, *post = types
        variant = attrs.get("variant")
        if variant not in VARIANTS:
            raise VerifyException(f"unknown qgemm variant {variant!r}")
        epilogue = str(attrs.get("epilogue", "requantize"))
        if not is_program(epilogue) and len(post) != POST_OPERANDS[epilogue]:
            raise VerifyException(
                f"a qgemm with epilogue {epilogue} takes "
                f"{5 + POST_OPERANDS[epilogue]} operands"
            )
        eight = (dtypes.i8, dtypes.ui8)
        if x.element_type not in eight or zp.element_type not in eight:
            raise VerifyException("qgemm reads 8-bit integers")
        xs = shape_of(x)
        k, n = int(attrs["k"]), int(attrs["n"])
        kp, np_ = padded(k, n, variant)
        v = VARIANTS[variant]
        if len(xs) < 2 or xs[-1] != k:
            raise VerifyException(f"qgemm input {xs} must be [..., {k}]")
        if shape_of(wp) != (np_ // v.nr, kp // v.kg, v.nr, v.kg):
            raise VerifyException(f"qgemm weight {shape_of(wp)} is not packed for "
                                  f"{variant}, k={k}, n={n}")  # fmt: skip
        if shape_of(bias) != (np_,) or shape_of(mult) != (np_,):
            raise VerifyException(f"qgemm bias and multiplier must be [{np_}]")
        if is_program(epilogue):
            return [_program_type(x, post, epilogue, n, np_)]
        columns = post[:2] if epilogue == "affine_requantize" else post[:1]
        if any(shape_of(p) != (np_,) or p.element_type != dtypes.f32 for p in columns):
            raise VerifyException(f"qgemm addend and scale must be f32 [{np_}]")
        if epilogue == "dequantize":
            return [tensor(dtypes.f32, (*xs[:-1], n))]
        if epilogue == "affine_requantize":
            scales, z_out = post[2:]
            if shape_of(scales) != (2,) or shape_of(z_out) != ():
                raise VerifyException("qgemm affine_requantize needs f32[2] scales "
                                      "and a scalar output zero point")  # fmt: skip
            if z_out.element_type not in eight:
                raise VerifyException("qgemm writes 8-bit integers or f32")
            return [tensor(z_out.element_type, (*xs[:-1], n))]
        return [tensor(zp.element_type, (*xs[:-1], n))]


def _program_type(x, post, program: str, n: int, np_: int) -> TensorType:
    """The result type of a qgemm whose epilogue is a program (its checks)."""
    try:
        used = epi.posts_used(program)
        storage = epi.result_storage(program, float_result=True)
    except ValueError as e:
        raise VerifyException(f"qgemm epilogue: {e}") from e
    eight = (dtypes.i8, dtypes.ui8)
    if used != set(range(len(post))):
        raise VerifyException("qgemm's epilogue program must read each post operand")
    out = (*shape_of(x)[:-1], n)
    for p in post:
        column = shape_of(p) == (np_,) and p.element_type == dtypes.f32
        if not column and not (shape_of(p) == out and p.element_type in (
            dtypes.f32, *eight
        )):  # fmt: skip
            raise VerifyException(f"qgemm post operands are f32 [{np_}] or tensors "
                                  f"of the result's shape {out}")  # fmt: skip
    return tensor({"i8": dtypes.i8, "ui8": dtypes.ui8, "f32": dtypes.f32}[storage], out)


def im2col_shape(
    x: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int]
) -> tuple[int, ...]:
    n, h, w, c = x
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (w - (kw - 1) * dw - 1) // sw + 1
    return n, oh, ow, kh * kw * c


def im2col(
    x: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int]
) -> np.ndarray:
    """quant.im2col in numpy (see `Im2ColOp`)."""
    n, oh, ow, _ = im2col_shape(x.shape, kernel, strides, dilations)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    patches = [
        x[:, i * dh : i * dh + (oh - 1) * sh + 1 : sh,
          j * dw : j * dw + (ow - 1) * sw + 1 : sw, :]
        for i in range(kh)
        for j in range(kw)
    ]  # fmt: skip
    return np.concatenate(patches, axis=-1).reshape(n, oh, ow, -1)


@irdl_op_definition
class Im2ColOp(GraphOp):
    """y[n, oh, ow, (i·KW + j)·C + c] = x[n, oh·sh + i·dh, ow·sw + j·dw, c]
    for an NHWC 8-bit x with its padding already in place (attributes
    kernel_shape [KH, KW], strides, dilations)."""

    name = "quant.im2col"
    input = operand_def(TensorType)
    result = result_def(TensorType)

    @classmethod
    def infer(cls, types, attrs):
        (x,) = types
        if x.element_type not in (dtypes.i8, dtypes.ui8) or len(shape_of(x)) != 4:
            raise VerifyException("im2col takes an NHWC tensor of 8-bit integers")
        params = [list(attrs[a]) for a in ("kernel_shape", "strides", "dilations")]
        if any(len(p) != 2 or min(p) < 1 for p in params):
            raise VerifyException("im2col needs two positive kernel dims, strides "
                                  "and dilations")  # fmt: skip
        out = im2col_shape(shape_of(x), *params)
        if min(out) < 1:
            raise VerifyException(f"im2col window larger than the input {shape_of(x)}")
        return [tensor(x.element_type, out)]
