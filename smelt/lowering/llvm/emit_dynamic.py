"""LLVM code for a loop-level module with run-time dims (`lowering/dynamic_batch.py`).

The entry point keeps the static one's signature, `void(io, arena, weights,
pool)`: `io` holds @main's buffers, then the value of each run-time dim (an i64
in a pointer slot). A kernel takes its buffers (pointers), then each dim (i64),
then the thread pool where it runs loops on threads. An intermediate lies at
`batch * offset` in the arena, which has `batch * arena_bytes` bytes (the
batch-1 memory plan scaled: `dynamic_batch`'s text says why that is valid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir
from xdsl.dialects import func
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Operation, SSAValue

from smelt.dialects.loop import AllocOp, CheckOp, ConstantOp, ViewOp, is_kernel
from smelt.dialects.loop_dynamic import ForDimOp, RowOp, is_dynamic
from smelt.dialects.program import (
    INPUT_NAMES_ATTR,
    OUTPUT_NAMES_ATTR,
    io_names,
    is_main,
)
from smelt.errors import SmeltError
from smelt.lowering.llvm.emit import OP_EMITTERS
from smelt.lowering.llvm.emit_kernel import (
    EmitOptions,
    KernelEmitter,
    kernel_function_name,
    uses_threads,
)
from smelt.lowering.llvm.program import ENTRY, STATUS_GLOBAL
from smelt.lowering.llvm.types import I8, I32, I64, PTR, VOID, buffer_info, constant
from smelt.lowering.memory_plan import MemoryPlan


def _row_bytes(t: MemRefType, source: MemRefType) -> int:
    """Bytes of one row of `source` (memref<?x..>), `t` being k of its rows
    (perhaps with leading dims joined: loop.row)."""
    info = buffer_info(t)
    row = math.prod(source.get_shape()[1:])
    return info.nbytes * row // math.prod(t.get_shape())


def emit_for_dim(em: KernelEmitter, op: Operation) -> None:
    """A bottom-tested loop behind a test of its trip count (a remainder loop's
    may be 0)."""
    assert isinstance(op, ForDimOp)
    b = em.builder
    ub = em.get(op.ub)
    body = em.fn.append_basic_block("dim.body")
    after = em.fn.append_basic_block("dim.after")
    b.cbranch(b.icmp_signed(">", ub, constant(I64, 0)), body, after)
    b.position_at_end(body)
    em.emit_loop(op, constant(I64, 0), ub, [])  # type: ignore[arg-type]
    b.branch(after)
    b.position_at_end(after)


def emit_row(em: KernelEmitter, op: Operation) -> None:
    assert isinstance(op, RowOp)
    b = em.builder
    row = _row_bytes(op.result.type, op.source.type)
    offset = b.mul(em.get(op.index), constant(I64, row))
    address = b.gep(em.get(op.source), [offset], inbounds=True, source_etype=I8)
    em.bind(op.result, address)


DYNAMIC_EMITTERS = {**OP_EMITTERS, "loop.for_dim": emit_for_dim, "loop.row": emit_row}


def _declare(module: ir.Module, kernel: func.FuncOp) -> ir.Function:
    types: list[ir.Type] = []
    for arg in kernel.body.block.args:
        if isinstance(arg.type, IndexType):
            types.append(I64)
        elif is_dynamic(arg.type) or buffer_info(arg.type):
            types.append(PTR)
    if uses_threads(kernel):
        types.append(PTR)
    fn = ir.Function(
        module, ir.FunctionType(VOID, types), kernel_function_name(kernel.sym_name.data)
    )
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    for i, (ir_arg, arg) in enumerate(zip(fn.args, kernel.body.block.args)):
        ir_arg.name = arg.name_hint or f"arg{i}"
    if uses_threads(kernel):
        fn.args[-1].name = "pool"
    return fn


@dataclass
class DynamicLowered:
    ir_module: ir.Module
    input_names: list[str]
    output_names: list[str]
    io_types: list[MemRefType]
    dims: list[str]
    check_messages: tuple[str, ...] = ()
    """The message of each `loop.check`: a failed one stores its position + 1 in
    `STATUS_GLOBAL` (as the static program's)."""


def lower_dynamic_module(
    module: ModuleOp, plan: MemoryPlan, dims: list[str], options: EmitOptions
) -> DynamicLowered:
    """The LLVM module of a module rewritten by `make_batch_dynamic`; `plan` is
    the memory plan of its batch-1 @main (made before the rewrite)."""
    ir_module = ir.Module(name="smelt")
    import llvmlite.binding as llvm

    ir_module.triple = llvm.get_process_triple()
    functions: dict[str, tuple[ir.Function, func.FuncOp]] = {}
    main = None
    codes: dict[CheckOp, int] = {}  # numbered as the kernels are emitted
    for op in module.ops:
        if isinstance(op, func.FuncOp) and is_kernel(op):
            for check in op.walk():
                if isinstance(check, CheckOp):
                    if not codes:
                        status = ir.GlobalVariable(ir_module, I32, STATUS_GLOBAL)
                        status.initializer = ir.Constant(I32, 0)
                    codes[check] = len(codes) + 1
            fn = _declare(ir_module, op)
            functions[op.sym_name.data] = (fn, op)
            KernelEmitter(fn, op, DYNAMIC_EMITTERS, options, checks=codes).emit()
        elif is_main(op):
            main = op
    if main is None:
        raise SmeltError("the module has no @main: nothing to run")
    _emit_entry(ir_module, main, functions, plan, len(dims))
    args = main.body.block.args
    n_io = len(args) - len(dims)
    return DynamicLowered(
        ir_module,
        io_names(main, INPUT_NAMES_ATTR) or [],
        io_names(main, OUTPUT_NAMES_ATTR) or [],
        [a.type for a in args[:n_io]],  # type: ignore[misc]
        dims,
        tuple(op.message.data for op in codes),
    )


def _emit_entry(
    ir_module: ir.Module,
    main: func.FuncOp,
    functions: dict[str, tuple[ir.Function, func.FuncOp]],
    plan: MemoryPlan,
    n_dims: int,
) -> None:
    fn = ir.Function(ir_module, ir.FunctionType(VOID, [PTR, PTR, PTR, PTR]), ENTRY)
    fn.attributes.add("nounwind")
    io, arena, weights, pool = fn.args
    io.name, arena.name, weights.name, pool.name = "io", "arena", "weights", "pool"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    values: dict[SSAValue, ir.Value] = {}
    args = main.body.block.args
    for i, arg in enumerate(args):
        slot = b.gep(io, [constant(I64, i)], inbounds=True, source_etype=PTR)
        if isinstance(arg.type, IndexType):
            values[arg] = b.load(slot, typ=I64, name=arg.name_hint or f"dim{i}")
        else:
            values[arg] = b.load(slot, typ=PTR, name=arg.name_hint or f"io{i}")
    scale = values[args[-n_dims]]  # the batch: every arena offset scales with it
    segments = [
        b.load(
            b.gep(weights, [constant(I64, i)], inbounds=True, source_etype=PTR),
            typ=PTR, name=f"weights{i}",
        )
        for i in range(len(plan.segments))
    ]  # fmt: skip
    for op in main.body.block.ops:
        if isinstance(op, AllocOp):
            offset = b.mul(scale, constant(I64, plan.arena_offsets[op.result]))
            values[op.result] = b.gep(arena, [offset], inbounds=True, source_etype=I8)
        elif isinstance(op, ConstantOp) and op.result in plan.external:
            values[op.result] = segments[plan.external[op.result]]
        elif isinstance(op, ConstantOp):
            offset = constant(I64, plan.weight_offsets[op.result])
            values[op.result] = b.gep(segments[0], [offset], inbounds=True, source_etype=I8)
        elif isinstance(op, ViewOp):
            values[op.result] = values[op.source]
        elif isinstance(op, func.CallOp):
            target, kernel = functions[op.callee.root_reference.data]
            call_args = [values[v] for v in op.arguments]
            if len(target.args) > len(call_args):
                call_args.append(pool)
            b.call(target, call_args)
        elif not isinstance(op, func.ReturnOp):
            raise SmeltError(f"@main: `{op.name}` is not supported with run-time dims")
    b.ret_void()
