"""A `loop.for` marked `loop.threads` → an outlined task run by the thread pool.

    loop.for %i = 0 to 64 step 1 parallel {...} {loop.threads = 2 : i64}

becomes, in the kernel,

    store the values the body uses (buffers, scalars, outer ivs) in a context struct
    call @smelt.parallel_for(ptr %pool, ptr @"smelt.kernel.k.task0", ptr %ctx, i64 64)

and a task `void @"smelt.kernel.k.task0"(ptr ctx, i64 begin, i64 end)` that reloads
them and calls `@"smelt.kernel.k.task0.body"(values..., i64 first, i64 stop)`, which
runs iv = first, first + step, ... < stop (first = lb + begin·step), with buffers
`noalias` where the kernel's are. Constants are emitted again in the body, not
passed, so that LLVM still folds them. Inside a task, marked
loops run serially: the pool is busy with the task itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir
from xdsl.dialects import arith
from xdsl.ir import Operation, SSAValue

from smelt.dialects.loop import ForOp
from smelt.lowering.llvm.emit_vector import fence_streams
from smelt.lowering.llvm.threads import TASK
from smelt.lowering.llvm.threads_lifecycle import define_pool
from smelt.lowering.llvm.types import I64, VOID, constant

if TYPE_CHECKING:
    from smelt.lowering.llvm.emit_kernel import KernelEmitter


def captured_values(op: ForOp) -> tuple[list[SSAValue], list[Operation]]:
    """Values the loop uses but does not define, and the constants among them."""
    values: dict[SSAValue, None] = {}
    constants: dict[Operation, None] = {}
    for inner in op.walk():
        for operand in inner.operands:
            owner = operand.owner
            defined_inside = (
                op.is_ancestor(owner)
                if isinstance(owner, Operation)
                else op.is_ancestor(owner.parent_op())  # a block argument
            )
            if defined_inside:
                continue
            if isinstance(owner, arith.ConstantOp):
                constants[owner] = None
            else:
                values[operand] = None
    return list(values), list(constants)


def emit_parallel_for(em: KernelEmitter, op: ForOp) -> None:
    """Outlines `op` into a task and calls the pool on it (em.pool is not None)."""
    from smelt.lowering.llvm.emit_kernel import KernelEmitter

    assert em.pool is not None
    values, constants = captured_values(op)
    fields = [em.get(v) for v in values]
    ctx_type = ir.LiteralStructType([f.type for f in fields])

    task = ir.Function(em.module, TASK, f"{em.fn.name}.task{em.tasks}")
    em.tasks += 1
    task.linkage = "internal"
    task.attributes.add("nounwind")
    ctx_arg, begin, end = task.args
    ctx_arg.name, begin.name, end.name = "ctx", "begin", "end"

    # the kernel side: fill the context, hand the task to the pool
    ctx = em.entry_alloca(ctx_type, name="ctx")
    b = em.builder
    for i, value in enumerate(fields):
        b.store(value, _field(b, ctx, ctx_type, i))
    b.call(define_pool(em.module), [em.pool, task, ctx, constant(I64, op.trip_count)])

    # the task side: reload the context, call the body on iterations begin..end
    body = _body_function(em, task, values, fields)
    tb = ir.IRBuilder(task.append_basic_block("entry"))
    loaded = [
        tb.load(_field(tb, ctx_arg, ctx_type, i), typ=f.type, name=v.name_hint or "")
        for i, (v, f) in enumerate(zip(values, fields))
    ]
    lb, step = constant(I64, op.lb.data), constant(I64, op.step.data)
    first = tb.add(lb, tb.mul(begin, step, flags=["nsw"]), flags=["nsw"])
    stop = tb.add(lb, tb.mul(end, step, flags=["nsw"]), flags=["nsw"])
    run = task.append_basic_block("run")
    leave = task.append_basic_block("leave")
    tb.cbranch(tb.icmp_signed("<", begin, end), run, leave)
    tb.position_at_end(run)
    tb.call(body, [*loaded, first, stop])
    tb.branch(leave)
    tb.position_at_end(leave)
    tb.ret_void()

    sub = KernelEmitter(
        body, em.kernel, em.table, em.options, pool=None, checks=em.checks
    )
    for value, param in zip(values, body.args):
        sub.bind(value, param)
    for const in constants:
        sub.emit_op(const)
    sub.emit_loop(op, body.args[-2], body.args[-1], [])
    fence_streams(sub, op)
    sub.builder.ret_void()


def _field(b: ir.IRBuilder, ctx: ir.Value, ctx_type: ir.Type, i: int) -> ir.Value:
    index = [constant(ir.IntType(32), 0), constant(ir.IntType(32), i)]
    return b.gep(ctx, index, inbounds=True, source_etype=ctx_type)


def _body_function(
    em: KernelEmitter, task: ir.Function, values: list[SSAValue], fields: list
) -> ir.Function:
    """The task's loop as a function of the captured values and the iteration
    range (first, stop). Loaded from the context, the buffers' pointers would
    carry no aliasing facts, and LLVM kept, for instance, a max-pool of 8
    channels scalar in the task and vectorized outside it (8× slower on two
    threads than on one); as arguments they are `noalias` where the kernel's
    own arguments are, and the task's call of the body inlines with them."""
    body = ir.Function(
        em.module,
        ir.FunctionType(VOID, [f.type for f in fields] + [I64, I64]),
        f"{task.name}.body",
    )
    body.linkage = "internal"
    body.attributes.add("nounwind")
    kernel_args = {
        arg: fn_arg.attributes
        for arg, fn_arg in zip(em.kernel.body.block.args, em.fn.args)
    }
    for value, param in zip(values, body.args):
        param.name = value.name_hint or ""
        if "noalias" in kernel_args.get(value, ()):
            param.add_attribute("noalias")
    body.args[-2].name, body.args[-1].name = "first", "stop"
    return body
