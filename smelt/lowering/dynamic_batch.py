"""A run-time leading dim (a symbolic batch) for a loop-level module (issue 34).

`make_batch_dynamic(module, "batch")` takes a loop-level module lowered and
scheduled for batch 1 (every pass of the static pipeline has run: its loops are
static, tiled, vectorized) whose @main buffers carry the batch as their leading
dim of size 1, and makes the batch a run-time value:

* @main gains a trailing `%batch: index` argument (its name in `loop.dims`);
  its inputs, outputs and the intermediates that carry the batch become
  `memref<?x...>`, and it passes `%batch` to every kernel as a last argument;
* each kernel takes those buffers as `memref<?x...>` plus `%batch: index`, and
  its whole batch-1 body runs inside `loop.for_dim %b = 0 to %batch`, reading
  `loop.row %x[%b]` (the row as the static buffer the body was scheduled for).

Correct where every kernel computes each batch row from that row alone (the
rows of a buffer that carries the batch, and buffers that do not): the
elementwise ops, MatMul / Gemm with a constant weight, and Softmax / reductions
over the other axes; `smelt.compiler.dynamic` admits only those ops. The
static memory plan of the batch-1 module stays valid scaled by the batch:
offset(b) = b * offset(1), arena(b) = b * arena(1) (every interval scales, so
none that were disjoint overlap; a buffer that does not carry the batch gets b
times its room). The batch loop is outermost and no pass sees it, so it is
never tiled, vectorized, unrolled or threaded: a remark says so per kernel.
"""

from __future__ import annotations

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import (
    ArrayAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Block, Region, SSAValue

from smelt.dialects import loop
from smelt.dialects.loop_dynamic import DIMS_ATTR, DYNAMIC, ForDimOp, RowOp
from smelt.dialects.program import is_main
from smelt.errors import SmeltError
from smelt.passes import remarks


def _dynamic(t: MemRefType) -> MemRefType:
    """The rows of a buffer that carries the batch: `memref<1xD..>` (or, a view
    that joined the unit batch into its dims, `memref<D..>`: loop-flatten) is one
    row; at run time `memref<?xD..>`, a row the batch-1 buffer's bytes."""
    shape = list(t.get_shape())
    row = shape[1:] if shape[0] == 1 else shape
    return MemRefType(t.element_type, [DYNAMIC, *row])


def _carries(t: object) -> bool:
    return isinstance(t, MemRefType) and len(t.get_shape()) >= 1 and t.get_shape()[0] == 1


def _retype(value: SSAValue, t: MemRefType) -> None:
    value._type = t  # noqa: SLF001 (xDSL has no setter; uses keep the value)


def make_batch_dynamic(
    module: ModuleOp,
    dim: str = "batch",
    blocked: dict[str, tuple[func.FuncOp, int, dict[int, SSAValue]]] | None = None,
) -> func.FuncOp:
    """Rewrites `module` in place (see the module text); returns @main.
    `blocked` (`dynamic_block.attach_blocked`) gives kernels a body for blocks
    of T rows."""
    mains = [op for op in module.ops if is_main(op)]
    if len(mains) != 1:
        raise SmeltError("a run-time batch needs exactly one @main")
    main = mains[0]
    kernels = {
        op.sym_name.data: op
        for op in module.ops
        if isinstance(op, func.FuncOp) and loop.is_kernel(op)
    }
    carrying: set[SSAValue] = set()
    for arg in main.body.block.args:
        if not _carries(arg.type):
            raise SmeltError(
                f"@main argument {arg.name_hint or arg.index} of type {arg.type}: "
                f"every input and output must have the run-time dim '{dim}' first"
            )
        carrying.add(arg)
    flags: dict[str, tuple[bool, ...]] = {}
    root: dict[SSAValue, SSAValue] = {}  # a buffer without the batch: its alloc
    users: dict[SSAValue, set[int]] = {}
    for op in main.body.block.ops:
        if isinstance(op, loop.AllocOp) and _carries(op.result.type):
            carrying.add(op.result)
        elif isinstance(op, loop.AllocOp):
            root[op.result] = op.result
        elif isinstance(op, loop.ViewOp) and op.source in root:
            root[op.result] = root[op.source]
        elif isinstance(op, loop.ViewOp) and op.source in carrying:
            # a view is a reshape of the whole buffer: of one row at batch 1, so
            # row b of the source is row b of the view at any batch
            if not op.result.type.get_shape():
                raise SmeltError(
                    f"a view of a buffer that carries '{dim}' as {op.result.type} "
                    "(a scalar): not supported with a run-time batch"
                )
            carrying.add(op.result)
        elif isinstance(op, func.CallOp):
            callee = op.callee.root_reference.data
            these = tuple(v in carrying for v in op.arguments)
            for v in op.arguments:
                if v in root:
                    users.setdefault(root[v], set()).add(id(op))
            if flags.setdefault(callee, these) != these:
                raise SmeltError(
                    f"@{callee} is called with buffers that carry '{dim}' at one "
                    "call and not at another: not supported with a run-time batch"
                )
    for buffer, calls in users.items():
        if len(calls) > 1:  # written per row by one kernel, read by another
            raise SmeltError(
                f"a buffer of type {buffer.type} without the run-time '{dim}' first "
                f"passes between {len(calls)} kernels at batch 1 (a layout that "
                f"moves '{dim}' off the leading axis?): not supported with a "
                f"run-time '{dim}'"
            )
    batch = main.body.block.insert_arg(IndexType(), len(main.body.block.args))
    batch.name_hint = dim
    for value in carrying:
        _retype(value, _dynamic(value.type))  # type: ignore[arg-type]
    for op in list(main.body.block.ops):
        if isinstance(op, func.CallOp):
            call = func.CallOp(op.callee, [*op.arguments, batch], [])
            call.attributes |= op.attributes
            main.body.block.insert_op_before(call, op)
            main.body.block.erase_op(op)
    main.update_function_type()
    main.attributes[DIMS_ATTR] = ArrayAttr([StringAttr(dim)])
    for name, these in flags.items():
        _wrap_kernel(kernels[name], these, dim, (blocked or {}).get(name))
    return main


def _wrap_kernel(
    kernel: func.FuncOp,
    carrying: tuple[bool, ...],
    dim: str,
    blocked: tuple[func.FuncOp, int, dict[int, SSAValue]] | None = None,
) -> None:
    """Runs the kernel's batch-1 body per row; with `blocked` = (the same kernel
    scheduled for a batch of T, T, its constant arguments among this kernel's),
    the T-row body per block of T rows first, then the batch-1 body per row left."""
    block = kernel.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    n = block.insert_arg(IndexType(), len(block.args))
    n.name_hint = dim
    carried = [arg for arg, flag in zip(block.args, carrying) if flag]
    statics = {arg: arg.type for arg in carried}
    for arg in carried:
        _retype(arg, _dynamic(arg.type))  # type: ignore[arg-type]
    ops = [op for op in block.ops if op is not ret]
    for op in ops:
        op.detach()
    one = [(arg, arg, statics[arg]) for arg in carried]
    if blocked is None:
        block.insert_op_before(_row_loop(n, ops, one, {}), ret)
        how = "the batch-1 body runs per row"
    else:
        kt, rows, extra = blocked
        kt_block = kt.body.block
        kt_ops = [op for op in kt_block.ops if not isinstance(op, func.ReturnOp)]
        for op in kt_ops:
            op.detach()
        size = arith.ConstantOp(IntegerAttr(rows, IndexType()))
        blocks = arith.DivUIOp(n, size.result)
        full = arith.MuliOp(blocks.result, size.result)
        rest = arith.SubiOp(n, full.result)
        for op in (size, blocks, full, rest):
            block.insert_op_before(op, ret)
        sources = [
            (kt_block.args[i], block.args[i], kt_block.args[i].type)
            for i, flag in enumerate(carrying)
            if flag
        ]
        others = {kt_block.args[i]: value for i, value in extra.items()}
        block.insert_op_before(
            _row_loop(blocks.result, kt_ops, sources, others, scale=size.result), ret
        )
        block.insert_op_before(_row_loop(rest.result, ops, one, {}, full.result), ret)
        how = (
            f"blocks of {rows} rows run the body scheduled for {rows}, then the "
            "rows left the batch-1 body"
        )
    kernel.update_function_type()
    remarks.missed(
        "make-batch-dynamic",
        kernel,
        f"the loop over the run-time dim '{dim}' is outermost and left as it is "
        f"(not tiled, vectorized, unrolled or threaded): {how}",
    )


def _row_loop(
    ub: SSAValue,
    ops: list,
    sources: list[tuple[SSAValue, SSAValue, MemRefType]],
    others: dict[SSAValue, SSAValue],
    offset: SSAValue | None = None,
    scale: SSAValue | None = None,
) -> ForDimOp:
    """`loop.for_dim %b = 0 to ub` around `ops`, in which each `sources` value
    (old, the memref<?x..> it is rows of, its static type) becomes the rows from
    `offset + %b * scale`, and each `others` key its value."""
    body = Block(arg_types=[IndexType()])
    start: SSAValue = body.args[0]
    body.args[0].name_hint = "b" if scale is None else "blk"
    if scale is not None:
        mul = arith.MuliOp(start, scale)
        body.add_op(mul)
        start = mul.result
    if offset is not None:
        add = arith.AddiOp(offset, start)
        body.add_op(add)
        start = add.result
    for old, source, static in sources:
        row = RowOp(source, start, static)
        row.result.name_hint = f"{source.name_hint}.row" if source.name_hint else None
        body.add_op(row)
        for use in list(old.uses):
            if not isinstance(use.operation, RowOp):  # ours: this loop's, or another's
                use.operation.operands[use.index] = row.result
    for old, new in others.items():
        for use in list(old.uses):
            use.operation.operands[use.index] = new
    for op in ops:
        body.add_op(op)
    body.add_op(loop.YieldOp())
    return ForDimOp(ub, loop.PARALLEL, Region(body))
