"""`func.call @smelt.qgemm` inside a `quant.qgemm` kernel → an int8 GEMM
micro-kernel function with the requantization fused on its i32 register tile
(`dialects/quant_gemm.py` defines the op, the weight packing and the units).

    void smelt.qgemm.<variant>.<m>x<k>x<n>.<hash>(ptr x, ptr wp, ptr bias,
        ptr mult, ptr zp, ptr post..., ptr y, i64 unit)

One call computes one unit (`quant_gemm.Units`: a block of rows × a chunk of
column panels), so that the kernel's parallel loop over units runs on threads.
Loops: column panels of NR (outer: a panel of packed weights, K_p · NR values,
stays in L1/L2 across the block's rows) × row tiles of MR × k groups of KG. The
register tile is MR × (NR / lanes) i32 vectors. Per k group each row's KG
activations are one 32-bit broadcast; one dot instruction per accumulator:

  vnni512 / vnni256   vpdpbusd: acc += Σ_{t<4} u8 a[t] · s8 b[t]  (an s8 x is read
                      with its sign bit flipped, `shift_input`; the bias holds
                      −128 · Σ_k W)
  maddubs512 / 256    the same sum without VNNI: vpmaddubsw (two pairs into i16,
                      exact for the weights quant-pack-gemm gives it,
                      `quant_gemm.pairs_fit`), vpmaddwd by ones, vpaddd
  pmaddwd512 / 256    vpmaddwd on i16 pairs (x widened by a kernel before,
                      `lower_qgemm.py`, W at pack time): acc += the pair sums

Epilogue per vector: + bias, f32, × multiplier, round half to even, clamp to the
storage range less the zero point (and above 0 with relu), + zero point; with
`affine_requantize` then − zero point, f32, × s_mid, × scale, + addend, ÷ s_out
and the same rounding and clamping to the output's zero point; with an epilogue
program (`quant_epilogue`) the requantized vector goes on through its f32 steps
(`int8_epilogue.py`: per-column operands loaded at the column, a residual at
the output element, masked past N) to its final quantize; truncate, store
(masked for the last panel's columns past N). With `dequantize`: + addend after
the multiplier, an f32 store. The tail rows (M mod MR) get a smaller tile, the
tail k group (K mod KG) byte loads; all shapes are static.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from llvmlite import ir
from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, StringAttr
from xdsl.ir import Operation

from smelt.dialects.quant_epilogue import result_storage
from smelt.dialects.quant_gemm import (
    CALLEE,
    PARAMS_ATTR,
    VARIANTS,
    Units,
    is_program,
    padded,
)
from smelt.errors import SmeltError
from smelt.lowering.llvm.int8_epilogue import emit_program

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter

I1, I8, I16, I32, I64 = (ir.IntType(b) for b in (1, 8, 16, 32, 64))
F32 = ir.FloatType()


def _declare(module: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    return ir.Function(module, ir.FunctionType(ret, args), name)


def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


class _Emitter:
    def __init__(self, fn: ir.Function, params: dict[str, int | str]):
        self.fn = fn
        self.module = fn.module
        self.v = v = VARIANTS[str(params["variant"])]
        self.m, self.k, self.n = (int(params[key]) for key in ("m", "k", "n"))
        self.kp, self.np = padded(self.k, self.n, str(params["variant"]))
        self.zp = int(params["zero_point"])
        self.relu = bool(params["relu"])
        self.shift = bool(params["shift_input"])
        self.signed_y = bool(params["signed_output"])
        self.signed_mid = bool(params.get("signed_zero_point", params["signed_output"]))
        self.epilogue = str(params.get("epilogue", "requantize"))
        self.post_relu = bool(params.get("post_relu", 0))
        self.post_zp = int(params.get("post_zero_point", 0))
        self.program = self.epilogue if is_program(self.epilogue) else ""
        self.float_out = self.epilogue == "dequantize" or bool(
            self.program and result_storage(self.program, float_result=True) == "f32"
        )
        kinds = str(params.get("post_kinds", ""))
        self.post_kinds = kinds.split(",") if kinds else []
        self.x, self.wp, self.bias, self.mult, _, *self.post, self.y, self.unit = (
            fn.args
        )
        self.split = Units(*(int(params[f]) for f in Units._fields))
        self.vnni = v.kg == 4
        self.wv = ir.VectorType(I32, v.lanes)
        self.vecs = v.nr // v.lanes
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.saturating = str(params["variant"]).startswith("maddubs")
        if self.saturating:  # u8 · s8 pairs into i16, then pairs of those into i32
            bytes_t = ir.VectorType(I8, 4 * v.lanes)
            halves = ir.VectorType(I16, 2 * v.lanes)
            self.pairs = _declare(self.module, v.intrinsic, halves, [bytes_t, bytes_t])
            wide = VARIANTS["pmaddwd512" if v.lanes == 16 else "pmaddwd256"]
            self.dot = _declare(self.module, wide.intrinsic, self.wv, [halves, halves])
            self.ones = ir.Constant(halves, [1] * (2 * v.lanes))
            self.b_type = bytes_t
        elif self.vnni:
            bytes_t = ir.VectorType(I8, 4 * v.lanes)
            operands = [self.wv, bytes_t, bytes_t]
            self.dot = _declare(self.module, v.intrinsic, self.wv, operands)
            self.b_type = bytes_t
        else:
            halves = ir.VectorType(I16, 2 * v.lanes)
            self.dot = _declare(self.module, v.intrinsic, self.wv, [halves, halves])
            self.b_type = halves
        fv = ir.VectorType(F32, v.lanes)
        self.fv = fv
        self.round = _declare(self.module, f"llvm.roundeven.v{v.lanes}f32", fv, [fv])
        self.bv = ir.VectorType(I8, v.lanes)
        self.mask_t = ir.VectorType(I1, v.lanes)
        out_t = fv if self.float_out else self.bv
        suffix = "f32" if self.float_out else "i8"
        self.masked_store = _declare(
            self.module, f"llvm.masked.store.v{v.lanes}{suffix}.p0", ir.VoidType(),
            [out_t, ir.PointerType(), I32, self.mask_t],
        )  # fmt: skip

    # --- control flow ------------------------------------------------------------

    def counted(self, count: int, name: str, body: Callable, carried: list) -> list:
        """A do-while loop of `count` (≥ 1) iterations: `body(i, values)` gives the
        next carried values; returns the last ones."""
        b = self.b
        pre = b.block
        header = self.fn.append_basic_block(name)
        exit_ = self.fn.append_basic_block(f"{name}.exit")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(I64, name=f"{name}.i")
        i.add_incoming(_i64(0), pre)
        phis = []
        for value in carried:
            phi = b.phi(value.type)
            phi.add_incoming(value, pre)
            phis.append(phi)
        new = body(i, phis)
        latch = b.block
        nxt = b.add(i, _i64(1))
        i.add_incoming(nxt, latch)
        for phi, value in zip(phis, new):
            phi.add_incoming(value, latch)
        b.cbranch(b.icmp_unsigned("<", nxt, _i64(count)), header, exit_)
        b.position_at_end(exit_)
        return new

    # --- the micro-kernel ----------------------------------------------------------

    def branch(self, cond: ir.Value, then: Callable, other: Callable) -> None:
        b = self.b
        yes, no = self.fn.append_basic_block("then"), self.fn.append_basic_block("else")
        join = self.fn.append_basic_block("join")
        b.cbranch(cond, yes, no)
        for block, body in ((yes, then), (no, other)):
            b.position_at_end(block)
            body()
            b.branch(join)
        b.position_at_end(join)

    def emit(self) -> None:
        """One unit (`Units`): its row block × its chunk of column panels. The
        last row block and the last chunk (a tail panel) get their own code."""
        b, s = self.b, self.split
        block = b.udiv(self.unit, _i64(s.chunks))
        chunk = b.urem(self.unit, _i64(s.chunks))
        row0 = b.mul(block, _i64(s.block_rows))
        last_rows = self.m - (s.row_blocks - 1) * s.block_rows

        def columns(rows: int) -> None:
            if s.chunks == 1:
                self.last_chunk(row0, rows)
                return
            first = b.mul(chunk, _i64(s.chunk_panels))
            self.branch(
                b.icmp_unsigned("<", chunk, _i64(s.chunks - 1)),
                lambda: self.panels(first, s.chunk_panels, row0, rows),
                lambda: self.last_chunk(row0, rows),
            )

        if s.row_blocks == 1:
            columns(last_rows)
        else:
            self.branch(
                b.icmp_unsigned("<", block, _i64(s.row_blocks - 1)),
                lambda: columns(s.block_rows),
                lambda: columns(last_rows),
            )
        b.ret_void()

    def panels(self, first: ir.Value, count: int, row0: ir.Value, rows: int) -> None:
        """`count` full panels from panel `first` for `rows` rows from row0."""
        def panel(j, _):
            self.rows(self.b.add(first, j), None, row0, rows)
            return []

        self.counted(count, "panel", panel, [])

    def last_chunk(self, row0: ir.Value, rows: int) -> None:
        s = self.split
        full_panels, tail_cols = divmod(self.n, self.v.nr)
        first = (s.chunks - 1) * s.chunk_panels
        if full_panels > first:
            self.panels(_i64(first), full_panels - first, row0, rows)
        if tail_cols:
            self.rows(_i64(full_panels), tail_cols, row0, rows)

    def rows(self, j: ir.Value, cols: int | None, row0: ir.Value, count: int) -> None:
        tiles, tail_rows = divmod(count, self.v.mr)
        if tiles:
            def tile(t, _):
                i0 = self.b.add(row0, self.b.mul(t, _i64(self.v.mr)))
                self.tile(j, i0, self.v.mr, cols)
                return []

            self.counted(tiles, "rows", tile, [])
        if tail_rows:
            self.tile(j, self.b.add(row0, _i64(tiles * self.v.mr)), tail_rows, cols)

    def tile(self, j: ir.Value, i0: ir.Value, rows: int, cols: int | None) -> None:
        v, b = self.v, self.b
        x, wp = self.x, self.wp
        groups, tail = divmod(self.k if self.vnni else self.kp, v.kg)
        panel = b.mul(j, _i64(self.kp * v.nr))  # weight elements before the panel
        # x: 8-bit [M, K], or for pmaddwd i16 [M, K_p] (widened by its own kernel)
        x_t, stride = (I8, self.k) if self.vnni else (I16, self.kp)
        row_ptrs = [
            b.gep(x, [b.mul(b.add(i0, _i64(r)), _i64(stride))], source_etype=x_t)
            for r in range(rows)
        ]
        zero = ir.Constant(self.wv, None)
        accs = [zero] * (rows * self.vecs)
        weight_t = I8 if self.vnni else I16

        def step(g: ir.Value, accs: list, width: int) -> list:
            base = b.add(panel, b.mul(g, _i64(v.nr * v.kg)))
            bvecs = []
            for h in range(self.vecs):
                at = b.add(base, _i64(h * v.lanes * v.kg))
                ptr = b.gep(wp, [at], source_etype=weight_t)
                bvecs.append(b.load(ptr, typ=self.b_type, align=1))
            out = []
            for r in range(rows):
                a = self.activations(row_ptrs[r], b.mul(g, _i64(v.kg)), width)
                for h in range(self.vecs):
                    acc = accs[r * self.vecs + h]
                    if self.saturating:
                        pairs = b.call(self.pairs, [a, bvecs[h]])
                        out.append(b.add(acc, b.call(self.dot, [pairs, self.ones])))
                    elif self.vnni:
                        out.append(b.call(self.dot, [acc, a, bvecs[h]]))
                    else:
                        out.append(b.add(acc, b.call(self.dot, [a, bvecs[h]])))
            return out

        if groups:
            accs = self.counted(groups, "k", lambda g, a: step(g, a, v.kg), accs)
        if tail:
            accs = step(_i64(groups), accs, tail)
        for r in range(rows):
            for h in range(self.vecs):
                self.store(accs[r * self.vecs + h], j, b.add(i0, _i64(r)), h, cols)

    def activations(self, row: ir.Value, k0: ir.Value, width: int) -> ir.Value:
        """`width` activations of `row` from k0, as a broadcast dot operand."""
        b, v = self.b, self.v
        ptr = b.gep(row, [k0], source_etype=I8 if self.vnni else I16)
        if self.vnni:
            if width == 4:
                word = b.load(ptr, typ=I32, align=1)
            else:
                word = ir.Constant(I32, 0)
                for t in range(width):
                    byte = b.load(b.gep(ptr, [_i64(t)], source_etype=I8), typ=I8)
                    shifted = b.shl(b.zext(byte, I32), ir.Constant(I32, 8 * t))
                    word = b.or_(word, shifted)
            if self.shift:
                word = b.xor(word, ir.Constant(I32, 0x80808080))
        else:  # a pair of widened k (K_p is even: no tail)
            word = b.load(ptr, typ=I32, align=2)
        splat = b.insert_element(ir.Constant(self.wv, ir.Undefined), word, _i64(0))
        mask = ir.Constant(ir.VectorType(I32, v.lanes), [0] * v.lanes)
        vec = b.shuffle_vector(splat, ir.Constant(self.wv, ir.Undefined), mask)
        return b.bitcast(vec, self.b_type)

    def store(self, acc, j, row, h: int, cols: int | None) -> None:
        b, v = self.b, self.v
        lanes = v.lanes
        valid = None if cols is None else cols - h * lanes
        if valid is not None and valid <= 0:
            return
        col = b.add(b.mul(j, _i64(v.nr)), _i64(h * lanes))
        biased = b.add(acc, self.column(self.bias, col, self.wv, I32))
        scaled = b.fmul(b.sitofp(biased, self.fv), self.column(self.mult, col))
        if self.epilogue == "dequantize":
            out = b.fadd(scaled, self.column(self.post[0], col))
            self.write(out, F32, row, col, valid)
            return
        q = self.requantize(scaled, self.zp, self.signed_mid, self.relu)
        if self.epilogue == "affine_requantize":
            addend, scale, scales, _ = self.post
            s_mid, s_out = (self.splat(scales, t) for t in (0, 1))
            zero = ir.Constant(self.wv, [self.zp] * lanes)
            real = b.fmul(b.sitofp(b.sub(q, zero), self.fv), s_mid)
            real = b.fmul(real, self.column(scale, col))
            real = b.fadd(real, self.column(addend, col))
            q = self.requantize(
                b.fdiv(real, s_out), self.post_zp, self.signed_y, self.post_relu
            )
        if self.program:
            q = emit_program(
                b, self.program, b.sitofp(q, self.fv),
                lambda p: self.post_operand(p, row, col, valid),
            )  # fmt: skip
            if self.float_out:  # a chain that ends in float
                self.write(q, F32, row, col, valid)
                return
        self.write(b.trunc(q, self.bv), I8, row, col, valid)

    def post_operand(self, p: int, row, col, valid: int | None) -> ir.Value:
        """Post operand p of an epilogue program as an f32 vector: per column
        (f32 [N_p]) or at the output element (a residual [M, N], f32 or 8-bit;
        the lanes past N masked off)."""
        b, lanes, kind = self.b, self.v.lanes, self.post_kinds[p]
        if kind == "c":
            return self.column(self.post[p], col)
        elem = F32 if kind == "f32" else I8
        vec = self.fv if kind == "f32" else self.bv
        ptr = b.gep(self.post[p], [b.add(b.mul(row, _i64(self.n)), col)],
                    source_etype=elem)  # fmt: skip
        if valid is None or valid >= lanes:
            value = b.load(ptr, typ=vec, align=1)
        else:
            suffix = "f32" if kind == "f32" else "i8"
            load = _declare(
                self.module, f"llvm.masked.load.v{lanes}{suffix}.p0", vec,
                [ir.PointerType(), I32, self.mask_t, vec],
            )  # fmt: skip
            mask = ir.Constant(self.mask_t, [int(t < valid) for t in range(lanes)])
            zero = ir.Constant(vec, None)
            value = b.call(load, [ptr, ir.Constant(I32, 1), mask, zero])
        if kind == "f32":
            return value
        wide = b.sext(value, self.wv) if kind == "i8" else b.zext(value, self.wv)
        return b.sitofp(wide, self.fv)

    def column(self, ptr, col, vec=None, elem=F32) -> ir.Value:
        """The vector of a per-column operand (bias, multiplier, addend) at col."""
        at = self.b.gep(ptr, [col], source_etype=elem)
        return self.b.load(at, typ=vec or self.fv, align=4)

    def splat(self, ptr, index: int) -> ir.Value:
        value = self.b.load(self.b.gep(ptr, [_i64(index)], source_etype=F32), typ=F32)
        vec = self.b.insert_element(ir.Constant(self.fv, ir.Undefined), value, _i64(0))
        mask = ir.Constant(ir.VectorType(I32, self.v.lanes), [0] * self.v.lanes)
        return self.b.shuffle_vector(vec, ir.Constant(self.fv, ir.Undefined), mask)

    def requantize(self, scaled, zp: int, signed: bool, relu: bool) -> ir.Value:
        """saturate(round_half_even(scaled) + zp) [max(·, zp)] as an i32 vector."""
        b, lanes = self.b, self.v.lanes
        rounded = b.call(self.round, [scaled])
        qmin, qmax = (-128, 127) if signed else (0, 255)
        lo = max(qmin, zp) if relu else qmin
        low = ir.Constant(self.fv, [float(lo - zp)] * lanes)
        high = ir.Constant(self.fv, [float(qmax - zp)] * lanes)
        rounded = b.select(b.fcmp_ordered("<", rounded, low), low, rounded)
        rounded = b.select(b.fcmp_ordered(">", rounded, high), high, rounded)
        return b.add(b.fptosi(rounded, self.wv), ir.Constant(self.wv, [zp] * lanes))

    def write(self, value, elem, row, col, valid: int | None) -> None:
        b, lanes = self.b, self.v.lanes
        at = b.add(b.mul(row, _i64(self.n)), col)
        ptr = b.gep(self.y, [at], source_etype=elem)
        if valid is None or valid >= lanes:
            b.store(value, ptr, align=1)
            return
        mask = ir.Constant(self.mask_t, [int(t < valid) for t in range(lanes)])
        b.call(self.masked_store, [value, ptr, ir.Constant(I32, 1), mask])


def define_qgemm(
    module: ir.Module, params: dict[str, int | str], args: int
) -> ir.Function:
    """`void(ptr x, ptr wp, ptr bias, ptr mult, ptr zp, ptr post..., ptr y, i64
    unit)` for the `quant.qgemm` parameters `params` (`lower_qgemm.py`), defined
    once per module and parameter set."""
    key = ",".join(f"{k}={params[k]}" for k in sorted(params))
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    name = f"{CALLEE}.{params['variant']}.{params['m']}x{params['k']}x{params['n']}"
    name = f"{name}.{digest}"
    existing = module.globals.get(name)
    if isinstance(existing, ir.Function):
        return existing
    ptr = ir.PointerType()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * args + [I64]), name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    for arg in fn.args[:-1]:
        arg.add_attribute("noalias")
    _Emitter(fn, params).emit()
    return fn


def emit_call(em: KernelEmitter, op: Operation) -> None:
    """`func.call @smelt.qgemm(%x, ..., %y, %unit) {quant.qgemm = ...}`."""
    assert isinstance(op, func.CallOp)
    attr = op.attributes.get(PARAMS_ATTR)
    if not isinstance(attr, DictionaryAttr):
        raise SmeltError(f"@{CALLEE} needs its {PARAMS_ATTR} parameters")
    params = {
        key: value.data if isinstance(value, StringAttr) else value.value.data
        for key, value in attr.data.items()
    }
    fn = define_qgemm(em.module, params, len(op.operands) - 1)  # type: ignore[arg-type]
    em.builder.call(fn, em.operands(op))
