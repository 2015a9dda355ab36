"""One loop-level kernel (a `func.func` marked `loop.kernel`) → one LLVM function.

Loops become canonical LLVM loops (preheader → header with the induction phi →
body → latch → exit, bottom-tested because static bounds guarantee one trip), so
LLVM's loop passes and vectorizers see the shape they expect. Memory ops linearize
their indices with the buffer's static row-major strides. Everything else goes
through one table from op name to emitter (`emit_ops.py`, `emit_vector.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from llvmlite import ir
from xdsl.dialects import func
from xdsl.dialects.arith import FastMathFlagsAttr
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue

from smelt.dialects.loop import (
    ELEMENTWISE_ATTR,
    THREADS_ATTR,
    UNROLL_ATTR,
    ForOp,
    YieldOp,
    loops_under,
)
from smelt.errors import SmeltError
from smelt.lowering.llvm.emit_vector import fence_streams
from smelt.lowering.llvm.types import (
    I32,
    I64,
    PTR,
    VOID,
    BufferInfo,
    buffer_info,
    constant,
    is_bf16,
    memory_type,
    op_name,
    suffix,
    value_type,
)

OpEmitter = Callable[["KernelEmitter", Operation], None]
"""Emits one op at the builder's position and binds its results."""


def op_table(families: list[tuple[OpEmitter, Iterable[str]]]) -> dict[str, OpEmitter]:
    """Op name → emitter, from (emitter, names it handles) pairs."""
    return {name: emitter for emitter, names in families for name in names}


def property_of(op: Operation, key: str) -> Attribute | None:
    """A property, or an attribute for generic or unregistered ops."""
    found = op.properties.get(key)
    return found if found is not None else op.attributes.get(key)


def result_type(op: Operation) -> ir.Type:
    """The LLVM type of the op's (first) result."""
    return value_type(op.results[0].type)


BF16_OPS = frozenset(
    [
        "arith.constant",
        "arith.extf",
        "arith.truncf",
        "arith.select",
        "arith.bitcast",
        "memref.load",
        "memref.store",
        "vector.load",
        "vector.store",
        "vector.maskedload",
        "vector.maskedstore",
        "loop.select",
        "vector.broadcast",
        "vector.extract",
        "vector.insert",
        "vector.shuffle",
        "memref.alloca",
        "loop.view",
        "func.call",  # @smelt.bf16_gemm (emit_bf16_gemm.py)
    ]
)
"""Ops that may touch bf16 values, which the llvm target holds as i16 bits."""


@dataclass(frozen=True)
class EmitOptions:
    """Choices of the llvm target that change the generated code."""

    fast_math: bool = False
    """Add `reassoc nsz` to float arithmetic (vectorized reductions need it)."""
    vector_math: bool = True
    """exp, tanh, erf on f32/f16 vectors as IR polynomials (`vector_math.py`,
    a few ulp) instead of libm lane by lane."""
    release_constants: bool = False
    """The module is consumed: large constants leave the IR once copied into the
    weight blob or handed over as segments (`plan_memory(release=True)`), so no
    weight is held twice."""
    profile: bool = False
    """The entry point adds each kernel call's time-stamp-counter ticks to the
    global `PROFILE_GLOBAL` (one i64 per call of @main)."""
    memory_limit: int = 0
    """Bytes that arena, weights and inputs / outputs may take together (0: the
    machine's memory); more is refused before the weight blob is allocated."""


def kernel_function_name(kernel_name: str) -> str:
    """The LLVM symbol of a kernel; prefixed so it cannot clash with libc names."""
    return f"smelt.kernel.{kernel_name}"


def declare_function(
    module: ir.Module,
    name: str,
    ret: ir.Type,
    args: Iterable[ir.Type],
    attrs: Iterable[str] = ("nounwind",),
) -> ir.Function:
    """The function `name` of `module`, declared on first use."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    fn = ir.Function(module, ir.FunctionType(ret, list(args)), name)
    for attr in attrs:
        fn.attributes.add(attr)
    return fn


def uses_threads(kernel: func.FuncOp) -> bool:
    """Whether `kernel` has a loop marked to run on threads (`loop.threads`)."""
    return any(
        THREADS_ATTR in op.attributes for op in loops_under(kernel)
    )


def declare_kernel(module: ir.Module, kernel: func.FuncOp) -> ir.Function:
    """An internal `void(ptr, ...)` function for `kernel`, body not yet emitted.

    A kernel with threaded loops takes the thread pool as one more, last pointer.
    """
    name = kernel.sym_name.data
    for arg in kernel.body.block.args:
        buffer_info(arg.type)  # raises a SmeltError for non-buffer arguments
    if kernel.function_type.outputs.data:
        raise SmeltError(f"kernel @{name} must not return values")
    n_args = len(kernel.body.block.args) + uses_threads(kernel)
    fn = ir.Function(
        module, ir.FunctionType(VOID, [PTR] * n_args), kernel_function_name(name)
    )
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    # Each kernel is optimized on its own: inlining all of them into the entry
    # point makes O3 superlinear on big models, and a kernel stays the unit that
    # a thread pool will dispatch.
    fn.attributes.add("noinline")
    # @main hands a kernel buffers that are disjoint, or one buffer twice to read;
    # only buffer-plan's in-place reuse lets an output overlap an input, and it does
    # that for kernels marked loop.elementwise alone.
    distinct = ELEMENTWISE_ATTR not in kernel.attributes
    for i, (ir_arg, arg) in enumerate(zip(fn.args, kernel.body.block.args)):
        ir_arg.name = arg.name_hint or f"arg{i}"
        if distinct:
            ir_arg.add_attribute("noalias")
    if uses_threads(kernel):
        fn.args[-1].name = "pool"
    return fn


class KernelEmitter:
    """Emits the body of one kernel into its declared LLVM function (or, for an
    outlined parallel loop, into that loop's task function)."""

    def __init__(
        self,
        fn: ir.Function,
        kernel: func.FuncOp,
        table: dict[str, OpEmitter],
        options: EmitOptions,
        pool: ir.Value | None = None,
        checks: dict[Operation, int] | None = None,
    ):
        self.fn = fn
        self.checks = checks or {}
        """The code of each `loop.check` of the module (its failure status)."""
        self.module: ir.Module = fn.module
        self.kernel = kernel
        self.name = kernel.sym_name.data
        self.table = table
        self.options = options
        self.values: dict[SSAValue, ir.Value] = {}
        self.builder = ir.IRBuilder(fn.append_basic_block("entry"))
        self.pool = pool
        """The thread pool; None where marked loops run serially (inside a task)."""
        self.tasks = 0  # outlined loops so far, to name the next one
        self._address_values: dict[tuple, ir.Value] = {}
        """Address arithmetic by (basic block, kind, operands): see `address`."""

    # --- values -------------------------------------------------------------

    def get(self, value: SSAValue) -> ir.Value:
        return self.values[value]

    def operands(self, op: Operation) -> list[ir.Value]:
        return [self.values[v] for v in op.operands]

    def bind(self, result: SSAValue, value: ir.Value) -> None:
        self.values[result] = value

    def fp_flags(self, op: Operation) -> tuple[str, ...]:
        """Fast-math flags for a float op: contract, the op's own, the option's."""
        flags = {"contract"}
        attr = op.properties.get("fastmath", op.attributes.get("fastmath"))
        if isinstance(attr, FastMathFlagsAttr):
            flags |= {flag.value for flag in attr.data}
        if self.options.fast_math:
            flags |= {"reassoc", "nsz"}
        return tuple(sorted(flags))

    def call_intrinsic(
        self,
        base: str,
        args: list[ir.Value],
        ret: ir.Type,
        overloads: Iterable[ir.Type] = (),
        flags: tuple[str, ...] = (),
    ) -> ir.Value:
        """Calls intrinsic `base` (`llvm.fma`, ...) mangled with `overloads` (or ret)."""
        types = list(overloads) or [ret]
        name = ".".join([base, *(suffix(t) for t in types)])
        fn = declare_function(self.module, name, ret, [a.type for a in args])
        return self.builder.call(fn, args, fastmath=flags)

    # --- structure ----------------------------------------------------------

    def emit(self) -> None:
        """Emits the whole kernel body."""
        for ir_arg, arg in zip(self.fn.args, self.kernel.body.block.args):
            self.bind(arg, ir_arg)
        if uses_threads(self.kernel):
            self.pool = self.fn.args[-1]
        self.emit_block(self.kernel.body.block)
        fence_streams(self, self.kernel)
        self.builder.ret_void()

    def emit_block(self, block: Block) -> None:
        for op in block.ops:
            if isinstance(op, ForOp):
                self.emit_for(op)
            elif isinstance(op, YieldOp | func.ReturnOp):
                if isinstance(op, func.ReturnOp) and op.operands:
                    raise SmeltError(f"kernel @{self.name} must not return values")
            else:
                self.emit_op(op)

    def emit_op(self, op: Operation) -> None:
        emitter = self.table.get(op_name(op))
        if emitter is None:
            raise SmeltError(
                f"kernel @{self.name}: the llvm target does not support `{op_name(op)}` "
                "yet; lower it to arith/math/memref ops or extend "
                "smelt/lowering/llvm/emit_ops.py"
            )
        types = [v.type for v in (*op.operands, *op.results)]
        if op_name(op) not in BF16_OPS and any(is_bf16(t) for t in types):
            raise SmeltError(
                f"kernel @{self.name}: `{op_name(op)}` on bf16 values; compute in f32 "
                "(arith.extf / arith.truncf) as convert-graph-to-loop does"
            )
        try:
            emitter(self, op)
        except SmeltError as e:
            raise SmeltError(f"kernel @{self.name}: `{op_name(op)}`: {e}") from e
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SmeltError(
                f"kernel @{self.name}: cannot emit `{op_name(op)}` for the llvm target "
                f"({type(e).__name__}: {e})"
            ) from e

    def emit_for(self, op: ForOp) -> None:
        """`loop.for` → a bottom-tested loop with the induction phi in its header."""
        lb, step, trips = op.lb.data, op.step.data, op.trip_count
        block = op.body.block
        inits = [self.get(v) for v in op.iter_inits]
        if trips == 0:
            for res, init in zip(op.res, inits):
                self.bind(res, init)
            return
        yield_op = block.last_op
        assert isinstance(yield_op, YieldOp)  # loop.for's verifier guarantees it
        if trips == 1:
            self.bind(block.args[0], constant(I64, lb))
            for arg, init in zip(block.args[1:], inits):
                self.bind(arg, init)
            self.emit_block(block)
            for res, value in zip(op.res, yield_op.values):
                self.bind(res, self.get(value))
            return
        if self.pool is not None and THREADS_ATTR in op.attributes and not inits:
            from smelt.lowering.llvm.emit_parallel import emit_parallel_for

            emit_parallel_for(self, op)
            return
        self.emit_loop(op, constant(I64, lb), constant(I64, lb + trips * step), inits)

    def emit_loop(
        self, op: ForOp, first: ir.Value, stop: ir.Value, inits: list[ir.Value]
    ) -> None:
        """The loop of `op` from iv `first` while iv != `stop` (at least one trip)."""
        block = op.body.block
        step = op.step.data
        yield_op = block.last_op
        assert isinstance(yield_op, YieldOp)
        b = self.builder
        iv_name = block.args[0].name_hint or "iv"
        preheader = b.block
        header = self.fn.append_basic_block(f"{iv_name}.header")
        b.branch(header)
        b.position_at_end(header)
        iv = b.phi(I64, name=iv_name)
        iv.add_incoming(first, preheader)
        self.bind(block.args[0], iv)
        phis = []
        for arg, init in zip(block.args[1:], inits):
            phi = b.phi(value_type(arg.type), name=arg.name_hint or "acc")
            phi.add_incoming(init, preheader)
            self.bind(arg, phi)
            phis.append(phi)
        self.emit_block(block)
        latch = b.block
        next_iv = b.add(iv, constant(I64, step), name=f"{iv_name}.next", flags=["nsw"])
        done = b.icmp_signed("==", next_iv, stop)
        exit_block = self.fn.append_basic_block(f"{iv_name}.exit")
        back = b.cbranch(done, exit_block, header)
        self._unroll_hint(op, back)
        iv.add_incoming(next_iv, latch)
        for phi, value in zip(phis, yield_op.values):
            phi.add_incoming(self.get(value), latch)
        b.position_at_end(exit_block)
        for res, value in zip(op.res, yield_op.values):
            self.bind(res, self.get(value))

    def _unroll_hint(self, op: ForOp, back_edge: ir.Instruction) -> None:
        """`loop.unroll = N` → `llvm.loop.unroll.count N` on the back edge (LLVM
        unrolls such loops even with its unroller off for the rest)."""
        hint = op.attributes.get(UNROLL_ATTR)
        if not isinstance(hint, IntegerAttr) or hint.value.data < 2:
            return
        m = self.module
        count = m.add_metadata(
            [ir.MetaDataString(m, "llvm.loop.unroll.count"), I32(hint.value.data)]
        )
        # a placeholder unique to this loop (metadata is uniqued by operands),
        # then the loop ID as LLVM wants it: itself first
        loop_id = m.add_metadata([ir.MetaDataString(m, f"loop{len(m.metadata)}")])
        loop_id.operands = (loop_id, count)
        back_edge.set_metadata("llvm.loop", loop_id)

    # --- memory -------------------------------------------------------------

    def address(self, buffer: SSAValue, indices: list[SSAValue]) -> ir.Value:
        """The address of `buffer[indices]`: base + Σ index·stride elements.

        Constant indices fold into one constant term, and the products and
        partial sums are numbered per basic block (`_numbered`): accesses that
        share leading indices (a tile's rows, an unrolled vector's lanes) share
        their arithmetic instead of each emitting its own for LLVM to merge.
        """
        info = buffer_info(buffer.type)
        if len(indices) != len(info.shape):
            raise SmeltError(
                f"{len(indices)} indices for a buffer of rank {len(info.shape)}"
            )
        offset: ir.Value | None = None
        fixed = 0
        for index, stride in zip(indices, info.strides):
            term = self.get(index)
            if isinstance(term, ir.Constant) and isinstance(term.constant, int):
                fixed += term.constant * stride
                continue
            if stride != 1:
                term = self._numbered("mul", term, constant(I64, stride))
            offset = term if offset is None else self._numbered("add", offset, term)
        if fixed:
            fixed_term = constant(I64, fixed)
            offset = fixed_term if offset is None else self._numbered(
                "add", offset, fixed_term
            )
        if offset is None:
            return self.get(buffer)
        return self._numbered("gep", self.get(buffer), offset, info.element)

    def _numbered(
        self, kind: str, a: ir.Value, b: ir.Value, element: Attribute | None = None
    ) -> ir.Value:
        """`a * b`, `a + b` (nsw) or `gep a[b]`, reused where the same one was
        already emitted in the current basic block (which it then dominates)."""
        key = (id(self.builder.block), kind, id(a), id(b) if not isinstance(
            b, ir.Constant) else ("c", b.constant), element)  # fmt: skip
        value = self._address_values.get(key)
        if value is None:
            if kind == "mul":
                value = self.builder.mul(a, b, flags=["nsw"])
            elif kind == "add":
                value = self.builder.add(a, b, flags=["nsw"])
            else:
                value = self.builder.gep(
                    a, [b], inbounds=True, source_etype=memory_type(element)
                )
            self._address_values[key] = value
        return value

    def alloca(self, info: BufferInfo) -> ir.Value:
        """A scratch buffer in the kernel's stack frame, allocated once on entry."""
        ty = ir.ArrayType(memory_type(info.element), max(1, info.numel))
        return self.entry_alloca(ty, align=64)

    def entry_alloca(self, ty: ir.Type, name: str = "", align: int = 0) -> ir.Value:
        """A stack slot of `ty` at the start of the function, as a plain ptr."""
        entry = self.fn.entry_basic_block
        b = ir.IRBuilder()
        b.position_at_start(entry)
        slot = b.alloca(ty, name=name)
        if align:
            slot.align = align
        slot.type = PTR  # llvmlite types it as T*; memory ops want plain ptr
        if self.builder.block is entry:  # its insertion index moved by one
            self.builder.position_at_end(entry)
        return slot
