"""A loop-level module → one LLVM module with one entry point per model.

    void smelt_main(ptr io, ptr arena, ptr weights, ptr pool)

`io` points to @main's buffer pointers (inputs then outputs, in @main's argument
order); intermediates live at fixed offsets in `arena`; `weights` points to the
addresses of the weight segments, the blob first (see `plan.py`). The entry point
calls the kernels, which are internal functions, in @main's order. Kernels with loops marked `loop.threads` also get `pool`, the thread
pool that runs those loops (`threads.py`, `emit_parallel.py`); a null pool runs
them serially.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import llvmlite.binding as llvm
from llvmlite import ir
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    IntegerAttr,
    MemRefType,
    ModuleOp,
)
from xdsl.ir import Operation, SSAValue

from smelt.dialects import locations
from smelt.dialects.dtypes import to_numpy
from smelt.dialects.loop import (
    THREADS_ATTR,
    AllocOp,
    CheckOp,
    ConstantOp,
    ForOp,
    ViewOp,
    is_kernel,
)
from smelt.dialects.program import (
    INPUT_NAMES_ATTR,
    OUTPUT_NAMES_ATTR,
    io_names,
    is_main,
)
from smelt.dialects.target import cpu_target
from smelt.errors import SmeltError
from smelt.lowering.llvm import emit_bf16_gemm, int8_gemm
from smelt.lowering.llvm.emit_kernel import (
    EmitOptions,
    KernelEmitter,
    OpEmitter,
    declare_kernel,
)
from smelt.lowering.llvm.emit_math import MATH_EMITTERS
from smelt.lowering.llvm.emit_memory import MEMORY_EMITTERS
from smelt.lowering.llvm.emit_ops import ARITH_EMITTERS
from smelt.lowering.llvm.emit_vector import VECTOR_EMITTERS
from smelt.lowering.llvm.program import (
    ENTRY,
    NEEDS_GLOBAL,
    PROFILE_GLOBAL,
    SEGMENTS_GLOBAL,
    STATUS_GLOBAL,
    code_needs,
    implied_features,
)
from smelt.lowering.llvm.threads import pool_bytes
from smelt.lowering.llvm.types import (
    I8,
    I32,
    I64,
    PTR,
    VOID,
    buffer_info,
    constant,
    op_name,
)
from smelt.lowering.memory_plan import MemoryPlan, plan_memory
from smelt.targets.cpu_spec import CpuSpec, host

CALLEES: dict[str, OpEmitter] = {
    emit_bf16_gemm.CALLEE: emit_bf16_gemm.emit_call,
    int8_gemm.CALLEE: int8_gemm.emit_call,
}
"""Callee → emitter: the library routines a kernel may call (`func.call`)."""


def emit_call(em: KernelEmitter, op: Operation) -> None:
    callee = op.callee.root_reference.data  # type: ignore[attr-defined]
    if callee not in CALLEES:
        known = ", ".join(f"@{name}" for name in CALLEES)
        raise SmeltError(
            f"kernel @{em.name}: func.call of @{callee}; the llvm target knows "
            f"only {known} (lowering/llvm/emit.py CALLEES)"
        )
    CALLEES[callee](em, op)


OP_EMITTERS: dict[str, OpEmitter] = {
    **ARITH_EMITTERS,
    **MATH_EMITTERS,
    **MEMORY_EMITTERS,
    **VECTOR_EMITTERS,
    "func.call": emit_call,
}
"""Op name → emitter: the ops the llvm target supports inside kernels."""


@dataclass
class LoweredModule:
    """The LLVM module of a model and what running it needs."""

    ir_module: ir.Module
    plan: MemoryPlan | None
    """None for a module without @main (kernels only)."""
    io_types: list[MemRefType]
    input_names: list[str]
    output_names: list[str]
    threads: int = 1
    """The most threads any loop asks for (`loop.threads`): the pool's size."""
    profiled_calls: tuple[str, ...] = ()
    """With `EmitOptions.profile`: the callee of each slot of `PROFILE_GLOBAL`."""
    check_messages: tuple[str, ...] = ()
    """The message of each `loop.check`: a failed one stores its position + 1 in
    `STATUS_GLOBAL`."""
    profiled_nodes: tuple[tuple[str, ...], ...] = ()
    """With `EmitOptions.profile`: the ONNX nodes of each call (its location)."""


class Deferred(Protocol):
    """The passes left for code generation to run (smelt.compiler.deferred)."""

    def kernel(self, kernel: func.FuncOp) -> None: ...

    def entry(self) -> None: ...


def lower_module(
    module: ModuleOp,
    options: EmitOptions | None = None,
    emitted: Callable[[ir.Function, func.FuncOp], None] | None = None,
    deferred: Deferred | None = None,
) -> LoweredModule:
    """Builds the LLVM module of `module` (kernels, and the entry point if @main);
    `emitted` is told of each kernel as soon as its code is complete;
    `deferred` finishes each kernel just before it is emitted (`kernel`), and
    @main before the memory plan is read (`entry`): the pipeline's kernel-local
    tail (smelt.compiler.deferred)."""
    options = options or EmitOptions()
    kernels: list[func.FuncOp] = []
    main: func.FuncOp | None = None
    for op in module.ops:
        if isinstance(op, func.FuncOp) and is_kernel(op):
            kernels.append(op)
        elif is_main(op):
            main = op
        else:
            name = op.sym_name.data if isinstance(op, func.FuncOp) else op.name
            raise SmeltError(
                f"the llvm target expects kernels (func.func with loop.kernel) and "
                f"@main at the top level, not {name}"
            )
    ir_module = ir.Module(name="smelt")
    ir_module.triple = llvm.get_process_triple()
    functions: dict[str, tuple[ir.Function, func.FuncOp]] = {}
    codes: dict[CheckOp, int] = {}  # numbered as the kernels are finished
    for kernel in kernels:
        if deferred is not None:
            deferred.kernel(kernel)
        # declared once finished: loop-parallelize gives it the pool argument
        fn = declare_kernel(ir_module, kernel)
        functions[kernel.sym_name.data] = (fn, kernel)
        for op in kernel.walk():
            if isinstance(op, CheckOp):
                if not codes:
                    status = ir.GlobalVariable(ir_module, I32, STATUS_GLOBAL)
                    status.initializer = ir.Constant(I32, 0)
                codes[op] = len(codes) + 1
        with locations.naming_errors(kernel):
            KernelEmitter(fn, kernel, OP_EMITTERS, options, checks=codes).emit()
        if emitted is not None:
            emitted(fn, kernel)
    if main is None:  # a library of kernels: keep them all, exported
        for fn, _ in functions.values():
            fn.linkage = ""
        return LoweredModule(ir_module, None, [], [], [])
    if deferred is not None:
        deferred.entry()
    checks = list(codes)
    plan = plan_memory(
        main,
        release=options.release_constants,
        memory_limit=options.memory_limit,
        in_place=True,
    )
    calls = _emit_entry(ir_module, main, functions, plan, options.profile)
    io_types = [a.type for a in main.body.block.args]
    lowered = LoweredModule(
        ir_module,
        plan,
        io_types,  # type: ignore[arg-type]  # checked by _emit_entry
        io_names(main, INPUT_NAMES_ATTR) or [],
        io_names(main, OUTPUT_NAMES_ATTR) or [],
        _threads(kernels),
        tuple(callee for callee, _ in calls) if options.profile else (),
        tuple(op.message.data for op in checks),
        tuple(nodes for _, nodes in calls) if options.profile else (),
    )
    _emit_needs(lowered, module)
    return lowered


def _emit_needs(lowered: LoweredModule, module: ModuleOp) -> None:
    """Records in the code what it relies on (`NEEDS_GLOBAL`), so that a program
    given other sizes (an artifact's edited manifest) refuses them."""
    assert lowered.plan is not None  # lower_module emits @main's plan first
    attr = cpu_target(module)
    spec = host() if attr is None else CpuSpec.from_attr(attr)
    needs = code_needs(
        lowered.plan.arena_bytes,
        lowered.plan.weight_bytes,
        lowered.threads,
        pool_bytes(lowered.threads),
        [(buffer_info(t).shape, to_numpy(t.get_element_type()))
         for t in lowered.io_types],
        lowered.input_names,
        lowered.output_names,
        lowered.check_messages,
        lowered.profiled_calls,
        spec,
    )  # fmt: skip
    needs["implied"] = implied_features(spec)
    text = bytearray(json.dumps(needs, sort_keys=True).encode("ascii") + b"\0")
    array = ir.ArrayType(I8, len(text))
    declared = ir.GlobalVariable(lowered.ir_module, array, NEEDS_GLOBAL)
    declared.initializer = ir.Constant(array, text)
    declared.global_constant = True


def _threads(kernels: list[func.FuncOp]) -> int:
    counts = [
        op.attributes[THREADS_ATTR].value.data
        for kernel in kernels
        for op in kernel.walk()
        if isinstance(op, ForOp)
        and isinstance(op.attributes.get(THREADS_ATTR), IntegerAttr)
    ]
    return max([1, *counts])


def emit_llvm_ir(module: ModuleOp, options: EmitOptions | None = None) -> str:
    """Textual LLVM IR of a loop-level module, before optimization."""
    return str(lower_module(module, options).ir_module)


def _emit_entry(
    ir_module: ir.Module,
    main: func.FuncOp,
    functions: dict[str, tuple[ir.Function, func.FuncOp]],
    plan: MemoryPlan,
    profile: bool = False,
) -> list[tuple[str, tuple[str, ...]]]:
    """Emits the entry point; returns the callee of each kernel call in order,
    with the ONNX nodes the call computes."""
    calls = [
        (op.callee.root_reference.data, tuple(locations.names(op)))
        for op in main.body.block.ops
        if isinstance(op, func.CallOp)
    ]
    ticks = None
    if profile:
        slots = ir.ArrayType(I64, max(1, len(calls)))
        ticks = ir.GlobalVariable(ir_module, slots, PROFILE_GLOBAL)
        ticks.initializer = ir.Constant(slots, None)
        clock = ir_module.declare_intrinsic(
            "llvm.readcyclecounter", (), ir.FunctionType(I64, [])
        )
    fn = ir.Function(ir_module, ir.FunctionType(VOID, [PTR, PTR, PTR, PTR]), ENTRY)
    fn.attributes.add("nounwind")
    io, arena, weights, pool = fn.args
    io.name, arena.name, weights.name, pool.name = "io", "arena", "weights", "pool"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    buffers: dict[SSAValue, ir.Value] = {}
    for i, arg in enumerate(main.body.block.args):
        buffer_info(arg.type)
        slot = b.gep(io, [constant(I64, i)], inbounds=True, source_etype=PTR)
        buffers[arg] = b.load(slot, typ=PTR, name=arg.name_hint or f"io{i}", align=8)

    def at(base: ir.Value, offset: int, name: str | None) -> ir.Value:
        return b.gep(
            base,
            [constant(I64, offset)],
            inbounds=True,
            source_etype=I8,
            name=name or "",
        )

    # `weights`: the segments' addresses, the blob first (`MemoryPlan.segments`),
    # as many and as big as SEGMENTS_GLOBAL says
    sizes = [len(plan.segments), *(s.nbytes for s in plan.segments)]
    table = ir.ArrayType(I64, len(sizes))
    declared = ir.GlobalVariable(ir_module, table, SEGMENTS_GLOBAL)
    declared.initializer = ir.Constant(table, sizes)
    declared.global_constant = True
    segments = [
        b.load(
            b.gep(weights, [constant(I64, i)], inbounds=True, source_etype=PTR),
            typ=PTR, name=f"weights{i}", align=8,
        )
        for i in range(len(plan.segments))
    ]  # fmt: skip
    profiled = 0
    for op in main.body.block.ops:
        if isinstance(op, AllocOp):
            buffers[op.result] = at(
                arena, plan.arena_offsets[op.result], op.result.name_hint
            )
        elif isinstance(op, ConstantOp) and op.result in plan.external:
            buffers[op.result] = segments[plan.external[op.result]]
        elif isinstance(op, ConstantOp):
            buffers[op.result] = at(
                segments[0], plan.weight_offsets[op.result], op.result.name_hint
            )
        elif isinstance(op, ViewOp):
            buffers[op.result] = buffers[op.source]
        elif isinstance(op, func.CallOp):
            callee = op.callee.root_reference.data
            if callee not in functions:
                raise SmeltError(f"@main calls @{callee}, which is not a loop.kernel")
            target, kernel = functions[callee]
            given = [v.type for v in op.arguments]
            if given != list(kernel.function_type.inputs.data):
                raise SmeltError(
                    f"@main calls @{callee} with buffers of types {given}; "
                    f"it takes {list(kernel.function_type.inputs.data)}"
                )
            args = [buffers[v] for v in op.arguments]
            if len(target.args) > len(args):  # the kernel runs loops on threads
                args.append(pool)
            if ticks is None:
                b.call(target, args)
                continue
            start = b.call(clock, [])
            b.call(target, args)
            index = [constant(I64, 0), constant(I64, profiled)]
            slot = b.gep(ticks, index, inbounds=True)
            spent = b.sub(b.call(clock, []), start)
            b.store(b.add(b.load(slot, typ=I64), spent), slot)
            profiled += 1
        elif isinstance(op, func.ReturnOp):
            if op.operands:
                raise SmeltError(
                    "@main must write its outputs to its arguments, not return values"
                )
        else:
            raise SmeltError(
                f"@main: the llvm target does not support `{op_name(op)}` there; "
                "@main holds loop.alloc/constant/view and func.call only"
            )
    b.ret_void()
    return calls
