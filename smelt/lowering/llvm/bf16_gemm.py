"""A bf16 GEMM micro-kernel on AVX512-BF16 (`vdpbf16ps`), standalone for now.

    C[m, n] (f32) = sum_k A[m, k] (bf16) * B[k, n] (bf16), accumulated in f32

`vdpbf16ps` multiplies pairs of bf16 along k and adds both products to an f32 lane:
for each of the 16 lanes, acc += a.lo * b.lo + a.hi * b.hi. So B is packed once
(at compile time for a constant weight, `pack_b`) into pairs along k, panel by
panel of 32 columns, Bp[n / 32, k / 2, n % 32, k % 2], where one 64-byte load
gives 16 columns × 2 k and a panel's k pairs follow each other; A stays row-major
and the pair A[m, 2p], A[m, 2p + 1] is one 32-bit broadcast. The micro-tile is
MR rows × 32 columns (2·MR zmm accumulators); the loops run column panels outside
rows, so a panel of Bp (K · 32 · 2 bytes) stays in L2 across all rows.

The pipeline's version of this kernel is llvm/emit_bf16_gemm.py (shape-specialized,
k-blocked, M/K tails inside, batched), called from the kernels that
lowering/lower_matmul_bf16.py builds; this file keeps the standalone kernel,
`pack_b` (which that lowering uses for constant weights) and `supported`.
Here, shapes are padded by the caller (`Bf16Gemm.__call__`): M to MR, N to 32, K to
even, with zeros (a zero pair adds nothing; padded A rows are never read back).
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np

from smelt.errors import SmeltError
from smelt.targets.bf16_path import FEATURE
from smelt.targets.cpu_spec import CpuSpec, host

NR = 32  # columns per micro-tile: two zmm of 16 f32


def supported(spec: CpuSpec | None = None) -> bool:
    """Whether `spec` (the host by default) has vdpbf16ps."""
    return (spec or host()).has(FEATURE)


def pack_b(b: np.ndarray) -> np.ndarray:
    """B[K, N] (any float) → bf16 Bp[Np / NR, Kp / 2, NR, 2] with
    Bp[q, p, c, t] = B[2p + t, q·NR + c], zero-padded to even Kp and Np a multiple
    of NR: each column panel's k pairs one after the other (NR · 4 bytes apart).
    Panels laid out across the rows instead (Bp[p, n, t]) put a panel's
    consecutive k pairs Np · 4 bytes apart, 16 KB for N = 4096: every B line of a
    panel fell into one L1 set, and each micro-tile of rows reloaded them."""
    k, n = b.shape
    kp, np_ = k + k % 2, -(-n // NR) * NR
    padded = np.zeros((kp, np_), ml_dtypes.bfloat16)
    padded[:k, :n] = b.astype(ml_dtypes.bfloat16)
    panels = padded.reshape(kp // 2, 2, np_ // NR, NR).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(panels)


def kernel_ir(mr: int = 8) -> str:
    """LLVM IR of `void bf16_gemm(ptr a, ptr bp, ptr c, i64 m, i64 np, i64 kp)`:
    a [m][kp] bf16, bp [np/32][kp/2][32][2] bf16 (`pack_b`), c [m][np] f32;
    m % mr == 0, np % 32 == 0, kp % 2 == 0."""
    accs = [(r, h) for r in range(mr) for h in range(2)]
    lines = [
        "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512("
        "<16 x float>, <32 x bfloat>, <32 x bfloat>)",
        "define void @bf16_gemm(ptr noalias %a, ptr noalias %b, ptr noalias %c, "
        "i64 %m, i64 %np, i64 %kp) #0 {",
        "entry:",
        "  %kh = lshr i64 %kp, 1",
        "  br label %nloop",
        "nloop:",
        "  %j = phi i64 [0, %entry], [%j.next, %nlatch]",
        "  br label %mloop",
        "mloop:",
        "  %i = phi i64 [0, %nloop], [%i.next, %mlatch]",
        "  br label %kloop",
        "kloop:",
        "  %p = phi i64 [0, %mloop], [%p.next, %kloop]",
    ]
    lines += [
        f"  %c{r}_{h} = phi <16 x float> [zeroinitializer, %mloop], "
        f"[%c{r}_{h}.n, %kloop]"
        for r, h in accs
    ]
    lines += [
        "  %bo0 = mul i64 %j, %kp",  # panel j / 32 starts at j · kp elements
        "  %bo1 = shl i64 %p, 6",  # a k pair of the panel: 32 columns × 2
        "  %bo = add i64 %bo0, %bo1",
        "  %bp0 = getelementptr i16, ptr %b, i64 %bo",
        "  %bp1 = getelementptr i16, ptr %bp0, i64 32",
        "  %b0 = load <32 x bfloat>, ptr %bp0, align 4",
        "  %b1 = load <32 x bfloat>, ptr %bp1, align 4",
        "  %k2 = shl i64 %p, 1",
    ]
    for r in range(mr):
        lines += [
            f"  %row{r} = add i64 %i, {r}",
            f"  %ao{r}.0 = mul i64 %row{r}, %kp",
            f"  %ao{r} = add i64 %ao{r}.0, %k2",
            f"  %ap{r} = getelementptr i16, ptr %a, i64 %ao{r}",
            f"  %as{r} = load i32, ptr %ap{r}, align 2",
            f"  %av{r}.0 = insertelement <16 x i32> poison, i32 %as{r}, i64 0",
            f"  %av{r}.1 = shufflevector <16 x i32> %av{r}.0, <16 x i32> poison, "
            "<16 x i32> zeroinitializer",
            f"  %av{r} = bitcast <16 x i32> %av{r}.1 to <32 x bfloat>",
        ]
        for h in range(2):
            lines.append(
                f"  %c{r}_{h}.n = call <16 x float> "
                f"@llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %c{r}_{h}, "
                f"<32 x bfloat> %av{r}, <32 x bfloat> %b{h})"
            )
    lines += [
        "  %p.next = add i64 %p, 1",
        "  %kmore = icmp ult i64 %p.next, %kh",
        "  br i1 %kmore, label %kloop, label %mlatch",
        "mlatch:",
    ]
    for r, h in accs:
        lines += [
            f"  %co{r}_{h}0 = mul i64 %row{r}, %np",
            f"  %co{r}_{h}1 = add i64 %co{r}_{h}0, %j",
            f"  %co{r}_{h} = add i64 %co{r}_{h}1, {16 * h}",
            f"  %cp{r}_{h} = getelementptr float, ptr %c, i64 %co{r}_{h}",
            f"  store <16 x float> %c{r}_{h}.n, ptr %cp{r}_{h}, align 4",
        ]
    lines += [
        f"  %i.next = add i64 %i, {mr}",
        "  %mmore = icmp ult i64 %i.next, %m",
        "  br i1 %mmore, label %mloop, label %nlatch",
        "nlatch:",
        f"  %j.next = add i64 %j, {NR}",
        "  %nmore = icmp ult i64 %j.next, %np",
        "  br i1 %nmore, label %nloop, label %exit",
        "exit:",
        "  ret void",
        "}",
        'attributes #0 = { nounwind "target-features"="+avx512f,+avx512bw,'
        '+avx512bf16" }',
    ]
    return "\n".join(lines) + "\n"


class Bf16Gemm:
    """The JIT-compiled kernel; refuses a CPU without AVX512-BF16 (callers fall
    back to f32 compute from bf16 storage, as smelt's lowering does)."""

    def __init__(self, spec: CpuSpec | None = None, mr: int = 8):
        from smelt.lowering.llvm.jit import target_machine

        spec = spec or host()
        if not supported(spec):
            raise SmeltError(
                f"the bf16 GEMM kernel needs AVX512-BF16 (vdpbf16ps), which CPU "
                f"{spec.name} lacks: use f32 compute from bf16 storage instead"
            )
        self.mr = mr
        self.tm = target_machine(spec)
        mod = llvm.parse_assembly(kernel_ir(mr))
        mod.verify()
        mod.triple = self.tm.triple
        self.engine = llvm.create_mcjit_compiler(mod, self.tm)
        self.engine.finalize_object()
        address = self.engine.get_function_address("bf16_gemm")
        proto = ctypes.CFUNCTYPE(
            None, *([ctypes.c_void_p] * 3), *([ctypes.c_int64] * 3)
        )
        self._fn = proto(address)

    def __call__(self, a: np.ndarray, bp: np.ndarray, n: int) -> np.ndarray:
        """A[M, K] @ B (packed by `pack_b`, N columns) → f32 C[M, N]."""
        m, k = a.shape
        panels, kh, _, _ = bp.shape
        np_ = panels * NR
        if 2 * kh != k + k % 2:
            raise SmeltError(f"A has {k} columns but B was packed for {2 * kh} rows")
        mp = -(-m // self.mr) * self.mr
        ap = np.zeros((mp, 2 * kh), ml_dtypes.bfloat16)
        ap[:m, :k] = a.astype(ml_dtypes.bfloat16)
        bp = np.ascontiguousarray(bp)
        c = np.empty((mp, np_), np.float32)
        self._fn(ap.ctypes.data, bp.ctypes.data, c.ctypes.data, mp, np_, 2 * kh)
        return c[:m, :n]
