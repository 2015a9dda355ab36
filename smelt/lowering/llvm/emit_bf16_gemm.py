"""The llvm target's bf16 GEMM call: `func.call @smelt.bf16_gemm` inside a kernel →
a shape-specialized `vdpbf16ps` micro-kernel function (AVX512-BF16).

    func.call @smelt.bf16_gemm(%a, %bp, %c, %u)
        : (memref<...xKxbf16>, memref<[G]xPxKhx32x2xbf16>, memref<GxMxNpxf32>, index)

computes c[g, m, n] = sum_k a[g, m, k] · b[g, k, n] in f32, where `bp` is B packed
in pairs along k, panel by panel (`bf16_gemm.pack_b`: P = Np / 32 panels of
Kh = ceil(K / 2) pairs, Np a multiple of 32, zero padded), one per GEMM (5-D) or
one for all (4-D, then G = 1), and `a` is row-major
with any leading dims (their product is G·M; K is its last dim, odd or even).

The layout follows `bf16_gemm.py`; the loops: 32-column panels of Bp, then blocks
of KC k pairs (so that the Bp slice and an A micro-tile's rows stay in L1; C is
reloaded between blocks), then MR-row micro-tiles, k innermost with 2·MR zmm
accumulators. Tails are handled in the kernel: M % MR rows get one smaller
micro-tile, an odd K's last pair reads only A's last element (zero-extended: never
a read past the row), and N pads to Np in `bp` and `c` (the caller reads c[:, :N]).
One call computes unit %u: one GEMM's band of CHUNK panels (`units`), so that the
caller's loop over units can run on threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Operation

from smelt.errors import SmeltError
from smelt.lowering.llvm.types import I32, I64, PTR, VOID, constant

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter

CALLEE = "smelt.bf16_gemm"
"""The callee name that `lower_matmul_bf16.py` emits and this file defines."""
NR = 32
MR = 8
CHUNK = 4  # 32-column panels per unit (a task of a parallel loop over units)
KC = 128  # k pairs per block: an 8-row A slice (4 KiB) and a Bp slice (16 KiB) in L1
I16 = ir.IntType(16)
F32 = ir.FloatType()
V16F = ir.VectorType(F32, 16)
V16I = ir.VectorType(I32, 16)


class _BFloat(ir.Type):
    """LLVM's `bfloat` (llvmlite has no such type); only for the intrinsic."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


V32BF = ir.VectorType(_BFloat(), 32)
DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"


def _shape(t: object) -> list[int]:
    if not isinstance(t, MemRefType):
        raise SmeltError(f"{CALLEE} takes memrefs, not {t}")
    return list(t.get_shape())


def emit_call(em: KernelEmitter, op: Operation) -> None:
    """`func.call @smelt.bf16_gemm(%a, %bp, %c)`; other callees are refused."""
    assert isinstance(op, func.CallOp)
    callee = op.callee.root_reference.data
    if callee != CALLEE:
        raise SmeltError(f"a kernel may call only @{CALLEE}, not @{callee}")
    a, bp, c = (_shape(v.type) for v in op.operands[:3])
    numel_a = 1
    for d in a[:-1]:
        numel_a *= d
    k, (panels, kh, columns, pair) = a[-1], bp[-4:]
    np_ = panels * NR
    g, m = c[0], c[1]
    shared = len(bp) == 4
    if (
        len(op.operands) != 4
        or 2 * kh != k + k % 2
        or (columns, pair) != (NR, 2)
        or len(c) != 3
        or c[2] != np_
        or numel_a != g * m
        or not (shared and g == 1 or bp[:1] == [g] and len(bp) == 5)
    ):
        raise SmeltError(f"{CALLEE}: shapes {a}, {bp}, {c} do not fit together")
    fn = define_gemm(em.module, g, m, k, np_)
    em.builder.call(fn, em.operands(op))


def units(g: int, np_: int) -> tuple[int, int]:
    """(unit count, panels per unit): a call computes one unit, one GEMM's columns
    [c·CH·32, (c + 1)·CH·32) for unit g·chunks + c, so that a parallel loop over
    units spreads one GEMM over threads (each a band of columns of C)."""
    panels = np_ // NR
    chunks = -(-panels // CHUNK)
    return g * chunks, CHUNK


def define_gemm(
    module: ir.Module, g: int, m: int, k: int, np_: int, mr: int = MR
) -> ir.Function:
    """`void(ptr a, ptr bp, ptr c, i64 unit)` for these static sizes (g GEMMs, each
    with its own A, Bp and C one after the other), defined once per module."""
    name = f"smelt.bf16_gemm.{g}x{m}x{k}x{np_}"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * 3 + [I64]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg, arg_name in zip(fn.args, ("a", "bp", "c", "unit")):
        arg.name = arg_name
        if arg_name != "unit":
            arg.add_attribute("noalias")
    _Gemm(fn, g, m, k, np_, mr).emit()
    return fn


class _Gemm:
    def __init__(self, fn: ir.Function, g: int, m: int, k: int, np_: int, mr: int):
        self.fn, self.g, self.m, self.k, self.np, self.mr = fn, g, m, k, np_, mr
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.dp = fn.module.globals.get(DPBF16) or ir.Function(
            fn.module, ir.FunctionType(V16F, [V16F, V32BF, V32BF]), DPBF16
        )
        self.ptrs: list[ir.Value] = list(fn.args[:3])  # a, bp, c of this GEMM

    def loop(
        self, count: int | ir.Value, step: int, body, name: str,
        start: int | ir.Value = 0,
    ) -> None:
        """for iv in range(start, count, step): body(iv) (at least one trip)."""
        b = self.b
        start = constant(I64, start) if isinstance(start, int) else start
        end = constant(I64, count) if isinstance(count, int) else count
        pre = b.block
        head = self.fn.append_basic_block(f"{name}.body")
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(I64, name=name)
        iv.add_incoming(start, pre)
        body(iv)
        nxt = b.add(iv, constant(I64, step), flags=["nuw", "nsw"])
        iv.add_incoming(nxt, b.block)
        done = self.fn.append_basic_block(f"{name}.done")
        b.cbranch(b.icmp_unsigned("<", nxt, end), head, done)
        b.position_at_end(done)

    def emit(self) -> None:
        full = self.m - self.m % self.mr
        pairs = self.k // 2
        blocks = [(p, min(KC, pairs - p)) for p in range(0, pairs, KC)] or [(0, 0)]

        def panel(j: ir.Value) -> None:
            for n, (p0, count) in enumerate(blocks):
                odd = n == len(blocks) - 1 and self.k % 2 == 1
                block = (n == 0, p0, count, odd)
                if full:
                    self.loop(
                        full, self.mr, lambda i: self.tile(i, j, self.mr, *block), "i"
                    )
                if self.m % self.mr:
                    self.tile(constant(I64, full), j, self.m % self.mr, *block)

        b = self.b
        count, chunk = units(self.g, self.np)
        chunks = count // self.g
        unit = self.fn.args[3]
        gi = b.udiv(unit, constant(I64, chunks))
        first = b.mul(b.urem(unit, constant(I64, chunks)), constant(I64, chunk * NR))
        end = b.add(first, constant(I64, chunk * NR))
        end = b.select(b.icmp_unsigned("<", end, constant(I64, self.np)), end,
                       constant(I64, self.np))  # fmt: skip
        if self.g > 1:
            sizes = (self.m * self.k, (self.k + self.k % 2) * self.np, self.m * self.np)
            self.ptrs = [
                self.gep(arg, ety, b.mul(gi, constant(I64, size)))
                for arg, ety, size in zip(self.fn.args, (I16, I16, F32), sizes)
            ]
        self.loop(end, NR, panel, "j", start=first)
        b.ret_void()

    def gep(self, base: ir.Value, ety: ir.Type, offset: ir.Value) -> ir.Value:
        return self.b.gep(base, [offset], inbounds=True, source_etype=ety)

    def a_pair(self, row: ir.Value, p: ir.Value, last_odd: bool) -> ir.Value:
        """A[row, 2p], A[row, 2p + 1] broadcast to 16 lanes as <32 x bfloat>."""
        b = self.b
        a = self.ptrs[0]
        off = b.add(b.mul(row, constant(I64, self.k)), b.shl(p, constant(I64, 1)))
        ptr = self.gep(a, I16, off)
        if last_odd:  # A[row, K - 1] alone: its pair partner would be past the row
            word = b.zext(b.load(ptr, typ=I16, align=2), I32)
        else:
            word = b.load(ptr, typ=I32, align=2)
        vec = b.insert_element(ir.Constant(V16I, None), word, constant(I32, 0))
        splat = b.shuffle_vector(vec, ir.Constant(V16I, None), ir.Constant(V16I, None))
        return b.bitcast(splat, V32BF)

    def step(
        self, accs: list[ir.Value], rows: list[ir.Value], j: ir.Value, p: ir.Value,
        last_odd: bool,
    ) -> list[ir.Value]:
        b = self.b
        # panel j / 32 starts at j · Kp elements; its k pair p is 32 × 2 further
        kp = self.k + self.k % 2
        base = b.add(b.mul(j, constant(I64, kp)), b.shl(p, constant(I64, 6)))
        bvec = [
            b.load(self.gep(self.ptrs[1], I16, b.add(base, constant(I64, 32 * h))),
                   typ=V32BF, align=4)
            for h in range(2)
        ]  # fmt: skip
        out = []
        for r, row in enumerate(rows):
            av = self.a_pair(row, p, last_odd)
            out += [b.call(self.dp, [accs[2 * r + h], av, bvec[h]]) for h in range(2)]
        return out

    def c_ptr(self, row: ir.Value, j: ir.Value, h: int) -> ir.Value:
        b = self.b
        off = b.add(b.add(b.mul(row, constant(I64, self.np)), j), constant(I64, 16 * h))
        return self.gep(self.ptrs[2], F32, off)

    def tile(
        self, i: ir.Value, j: ir.Value, mr: int, first: bool, p0: int, pairs: int,
        odd: bool,
    ) -> None:
        """C[i:i+mr, j:j+32] (= 0 when `first`) += A[i:i+mr, kb] @ B[kb, j:j+32] over
        the k pairs p0 ... p0 + pairs - 1, then A's odd last column when `odd`."""
        b = self.b
        rows = [b.add(i, constant(I64, r)) for r in range(mr)]
        if first:
            accs = [ir.Constant(V16F, None)] * (2 * mr)
        else:
            accs = [
                b.load(self.c_ptr(row, j, h), typ=V16F, align=4)
                for row in rows
                for h in range(2)
            ]
        if pairs:
            pre = b.block
            head = self.fn.append_basic_block("k.body")
            b.branch(head)
            b.position_at_end(head)
            p = b.phi(I64, name="p")
            p.add_incoming(constant(I64, p0), pre)
            phis = []
            for acc in accs:
                phi = b.phi(V16F)
                phi.add_incoming(acc, pre)
                phis.append(phi)
            new = self.step(phis, rows, j, p, False)
            nxt = b.add(p, constant(I64, 1), flags=["nuw", "nsw"])
            p.add_incoming(nxt, b.block)
            for phi, value in zip(phis, new):
                phi.add_incoming(value, b.block)
            done = self.fn.append_basic_block("k.done")
            end = constant(I64, p0 + pairs)
            b.cbranch(b.icmp_unsigned("<", nxt, end), head, done)
            b.position_at_end(done)
            accs = new
        if odd:
            accs = self.step(accs, rows, j, constant(I64, self.k // 2), True)
        for r, row in enumerate(rows):
            for h in range(2):
                b.store(accs[2 * r + h], self.c_ptr(row, j, h), align=4)
