"""Blocks of T rows for a run-time batch (`dynamic_batch`): the same model scheduled
for batch T gives each kernel a second body, run per block of T rows (a GEMM
over T rows instead of T matrix-vector products), the batch-1 body then doing
the rows left (a remainder loop).

`attach_blocked(one, many, T)` pairs the calls of the batch-1 @main with those of
the batch-T @main, in order: an argument that carries the batch in one carries
it in the other (leading dim 1 and T, the same dims after), any other is a
`loop.constant` in both (the T module's may be packed otherwise: it moves into
the batch-1 @main and becomes one more kernel argument). Where the two modules
differ in any other way (fusion, kernel sharing, scratch buffers), it returns
why and changes nothing.
"""

from __future__ import annotations

import math

from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import SSAValue

from smelt.dialects import loop
from smelt.dialects.loop_dynamic import joined_rows
from smelt.dialects.program import is_main

Blocked = dict[str, tuple[func.FuncOp, int, dict[int, SSAValue]]]


def _main(module: ModuleOp) -> func.FuncOp:
    return next(op for op in module.ops if is_main(op))  # type: ignore[return-value]


def _constant(v: SSAValue) -> loop.ConstantOp | None:
    owner = getattr(v, "op", None)
    return owner if isinstance(owner, loop.ConstantOp) else None


def _rows_of_batch(v: SSAValue) -> bool:
    """Whether @main's `v` carries the batch as `make_batch_dynamic` sees it: an
    argument, a `loop.alloc` of leading dim 1, or a view of one of those."""
    while isinstance(owner := getattr(v, "op", None), loop.ViewOp):
        v = owner.source
    owner = getattr(v, "op", None)
    if owner is None:  # a block argument: @main's inputs and outputs
        return True
    shape = v.type.get_shape() if isinstance(v.type, MemRefType) else ()
    return isinstance(owner, loop.AllocOp) and bool(shape) and shape[0] == 1


def _pair(a: SSAValue, b: SSAValue, rows: int) -> str | None:
    """"rows" where a / b carry the batch (1 / rows), "constant", else None."""
    ta, tb = a.type, b.type
    if not (isinstance(ta, MemRefType) and isinstance(tb, MemRefType)):
        return None
    if _constant(a) is not None and _constant(b) is not None:
        return "constant"
    sa, sb = ta.get_shape(), tb.get_shape()
    row = tuple(sa[1:]) if sa and sa[0] == 1 else tuple(sa)
    if (
        _constant(a) is None
        and _constant(b) is None
        and sa and sb and _rows_of_batch(a)
        and math.prod(sb) == rows * math.prod(row)
        and (tuple(sb) == (rows, *row) or joined_rows(row, sb))
        and ta.element_type == tb.element_type
    ):  # fmt: skip
        return "rows"  # T rows, perhaps with their leading dims joined (loop-flatten)
    return None


def attach_blocked(one: ModuleOp, many: ModuleOp, rows: int) -> Blocked | str:
    main1, main_t = _main(one), _main(many)
    calls1 = [op for op in main1.body.block.ops if isinstance(op, func.CallOp)]
    calls_t = [op for op in main_t.body.block.ops if isinstance(op, func.CallOp)]
    if len(calls1) != len(calls_t):
        return f"{len(calls1)} kernel calls at batch 1, {len(calls_t)} at {rows}"
    kernels_t = {
        op.sym_name.data: op
        for op in many.ops
        if isinstance(op, func.FuncOp) and loop.is_kernel(op)
    }
    kernels1 = {
        op.sym_name.data: op
        for op in one.ops
        if isinstance(op, func.FuncOp) and loop.is_kernel(op)
    }
    chosen: dict[str, str] = {}
    kinds: dict[str, tuple[str, ...]] = {}
    for c1, ct in zip(calls1, calls_t):
        name1, name_t = c1.callee.root_reference.data, ct.callee.root_reference.data
        if len(c1.arguments) != len(ct.arguments):
            return f"@{name1} and @{name_t} take different arguments"
        pairs = tuple(_pair(a, b, rows) for a, b in zip(c1.arguments, ct.arguments))
        if None in pairs:
            return f"@{name1}'s arguments do not pair with @{name_t}'s"
        if chosen.setdefault(name1, name_t) != name_t or kinds.setdefault(
            name1, pairs
        ) != pairs:  # fmt: skip
            return f"@{name1} is shared by calls that differ at batch {rows}"
    for name1, name_t in chosen.items():
        # buffer-plan may put an elementwise kernel's output over its input (the
        # batch-1 plan is the one used): the T body must allow that too
        if (loop.ELEMENTWISE_ATTR in kernels1[name1].attributes) != (
            loop.ELEMENTWISE_ATTR in kernels_t[name_t].attributes
        ):
            return f"@{name1} and @{name_t} differ in loop.elementwise"
    # checked: now move the T constants over and give the kernels their bodies
    result: Blocked = {}
    for name1, name_t in chosen.items():
        kernel1, kernel_t = kernels1[name1], kernels_t[name_t]
        extra: dict[int, SSAValue] = {}
        block = kernel1.body.block
        for i, kind in enumerate(kinds[name1]):
            if kind == "constant":
                arg = block.insert_arg(kernel_t.body.block.args[i].type, len(block.args))
                arg.name_hint = f"blocked{i}"
                extra[i] = arg
        kernel1.update_function_type()
        kernel_t.detach()
        result[name1] = (kernel_t, rows, extra)
    moved: set[loop.ConstantOp] = set()
    for c1, ct in zip(calls1, calls_t):
        name1 = c1.callee.root_reference.data
        added = []
        for kind, v in zip(kinds[name1], ct.arguments):
            if kind != "constant":
                continue
            const = _constant(v)
            assert const is not None
            if const not in moved:
                const.detach()
                main1.body.block.insert_op_before(const, c1)
                moved.add(const)
            added.append(const.result)
        call = func.CallOp(c1.callee, [*c1.arguments, *added], [])
        call.attributes |= c1.attributes
        main1.body.block.insert_op_before(call, c1)
        main1.body.block.erase_op(c1)
    return result
