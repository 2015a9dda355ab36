"""loop-flatten: elementwise nests over contiguous trailing dims become one loop."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import FunctionType, IntegerAttr, MemRefType, ModuleOp
from xdsl.ir import Block, BlockArgument, SSAValue
from xdsl.passes import ModulePass

from smelt.dialects import loop

Access = memref.LoadOp | memref.StoreOp


def _nest(top: loop.ForOp) -> list[loop.ForOp] | None:
    """The perfectly nested plain parallel loops from `top` down (each body is one
    loop and its yield; 0-based, step 1, no iter_args, no attributes), if the
    innermost body holds no loop."""
    nest, op = [], top
    while True:
        if (
            op.kind.data != loop.PARALLEL
            or op.iter_inits
            or op.lb.data != 0
            or op.step.data != 1
            or op.attributes
        ):
            return None
        nest.append(op)
        ops = list(op.body.block.ops)
        if len(ops) == 2 and isinstance(ops[0], loop.ForOp):
            op = ops[0]
            continue
        if any(isinstance(o, loop.ForOp) for o in op.body.walk()):
            return None
        return nest


def _is_zero(value: SSAValue) -> bool:
    owner = value.owner
    return (
        isinstance(owner, arith.ConstantOp)
        and isinstance(owner.value, IntegerAttr)
        and owner.value.value.data == 0
    )


def _matches(access: Access, nest: list[loop.ForOp], s: int) -> bool | None:
    """True: the access indexes its buffer's last len(nest) - s dims with the
    ivs of nest[s:] in order (a level of one trip may read index 0), over dims
    of the loops' trip counts; False: no iv of nest[s:] appears in its indices;
    None: neither (the levels cannot be flattened for it)."""
    suffix = nest[s:]
    ivs = {op.iv for op in suffix}
    indices = list(access.indices)
    dims = access.memref.type.get_shape()  # type: ignore[union-attr]
    if not any(i in ivs for i in indices):
        return False
    m = len(suffix)
    if len(indices) < m or any(i in ivs for i in indices[: len(indices) - m]):
        return None
    for op, index, dim in zip(suffix, indices[-m:], dims[-m:]):
        if dim != op.trip_count:
            return None
        if index is not op.iv and not (op.trip_count == 1 and _is_zero(index)):
            return None
    return True


def _plan(
    kernel: func.FuncOp, nest: list[loop.ForOp]
) -> tuple[int, dict[int, bool]] | None:
    """The first level s from which the nest flattens (at least two levels of
    more than one trip in nest[s:]) and, per memref argument index, whether its
    accesses see the flattened dims (True) or none of them (False)."""
    body = nest[-1].body.block
    args = kernel.body.block.args
    if any(
        isinstance(o, Access) and o.memref not in args for o in body.walk()
    ):  # a buffer of the kernel's own (scratch) keeps its shape: no flattening
        return None
    accesses: list[tuple[int, Access]] = []
    for n, arg in enumerate(args):
        if not isinstance(arg.type, MemRefType):
            continue
        for use in arg.uses:
            o = use.operation
            if not isinstance(o, Access) or o.memref is not arg:
                return None
            if o.parent_block() is not body:
                return None
            if isinstance(o, memref.StoreOp) and o.value is arg:
                return None
            accesses.append((n, o))
    for s in range(len(nest) - 1):
        if sum(op.trip_count > 1 for op in nest[s:]) < 2:
            break
        if not all(_iv_only_indexes(op.iv) for op in nest[s:]):
            continue
        seen: dict[int, bool] = {}
        for n, access in accesses:
            kind = _matches(access, nest, s)
            if kind is None or seen.setdefault(n, kind) != kind:
                break
        else:
            if any(seen.values()):
                return s, seen
    return None


def _iv_only_indexes(iv: SSAValue) -> bool:
    for use in iv.uses:
        o = use.operation
        if isinstance(o, memref.LoadOp) and use.index >= 1:
            continue
        if isinstance(o, memref.StoreOp) and use.index >= 2:
            continue
        return False
    return True


def _flatten(module: ModuleOp, kernel: func.FuncOp, nest: list[loop.ForOp]) -> bool:
    plan = _plan(kernel, nest)
    if plan is None:
        return False
    s, kinds = plan
    suffix = nest[s:]
    m = len(suffix)
    total = 1
    for op in suffix:
        total *= op.trip_count
    block: Block = kernel.body.block
    new_args: dict[SSAValue, BlockArgument] = {}
    olds = [block.args[n] for n, flat in kinds.items() if flat]
    for old in olds:
        dims = old.type.get_shape()  # type: ignore[union-attr]
        t = MemRefType(old.type.element_type, [*dims[: len(dims) - m], total])  # type: ignore[union-attr]
        new_args[old] = block.insert_arg(t, old.index)
    new = loop.ForOp(0, total, 1, loop.PARALLEL)
    flat_iv = new.body.block.args[0]
    flat_iv.name_hint = suffix[-1].iv.name_hint
    for o in list(suffix[-1].body.block.ops):
        o.detach()
        new.body.block.add_op(o)
        if isinstance(o, Access) and o.memref in new_args:
            indices = list(o.indices)
            indices = [*indices[: len(indices) - m], flat_iv]
            ref = new_args[o.memref]
            rebuilt = (
                memref.LoadOp.get(ref, indices)
                if isinstance(o, memref.LoadOp)
                else memref.StoreOp.get(o.value, ref, indices)
            )
            rebuilt.attributes.update(o.attributes)
            new.body.block.insert_op_before(rebuilt, o)
            if isinstance(o, memref.LoadOp):
                o.res.replace_all_uses_with(rebuilt.res)
            new.body.block.erase_op(o)
    outer = suffix[0]
    outer_block = outer.parent_block()
    assert outer_block is not None
    outer_block.insert_op_before(new, outer)
    outer_block.erase_op(outer)
    for old in new_args:
        block.erase_arg(old)  # type: ignore[arg-type]
    kernel.function_type = FunctionType.from_lists(
        [a.type for a in block.args], list(kernel.function_type.outputs.data)
    )
    _view_at_calls(module, kernel, new_args)
    return True


def _view_at_calls(
    module: ModuleOp, kernel: func.FuncOp, new_args: dict[SSAValue, BlockArgument]
) -> None:
    """Each call of `kernel` passes its flattened buffers as views."""
    changed = {a.index: a.type for a in new_args.values()}
    name = kernel.sym_name.data
    for call in list(module.walk()):
        if not isinstance(call, func.CallOp) or call.callee.string_value() != name:
            continue
        operands = list(call.arguments)
        for i, t in changed.items():
            view = loop.ViewOp(operands[i], t)  # type: ignore[arg-type]
            view.location = call.location
            call.parent_block().insert_op_before(view, call)  # type: ignore[union-attr]
            operands[i] = view.result
        call.operands = operands


@dataclass(frozen=True)
class LoopFlattenPass(ModulePass):
    """Flattens the trailing levels of a kernel's elementwise loop nest into one.

    Expects loop-level kernels. A top-level nest of plain parallel loops
    (0-based, step 1, no iter_args) whose innermost body only loads and stores
    the kernel's buffers: its longest run of trailing levels that every access
    either indexes as the buffer's last dims, in order and whole (contiguous),
    or does not index at all (a broadcast, e.g. a per-channel constant
    [C, 1, 1] under the H, W loops), becomes one loop over their product, and
    the buffers that see those dims are passed as views with the dims joined
    (@main's `loop.view` at each call). So a [1, 256, 56, 56] elementwise op is
    one loop of 802816 elements (whole vectors, one tail at the very end)
    instead of rows of 56 (3 vectors of 16 and 8 scalars each). Kernels whose
    buffers are used elsewhere, or with loops carrying attributes, are left
    alone.

        loop.for %c = 0 to 4 parallel {              loop.for %t = 0 to 24 parallel {
          loop.for %w = 0 to 6 parallel {      →       load %x[%t] : memref<24xf32>
            load %x[%c, %w] : memref<4x6xf32>        }
    """

    name = "loop-flatten"  # a module pass: it changes kernel signatures and @main

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in list(op.ops):
            if (
                not isinstance(kernel, func.FuncOp)
                or not loop.is_kernel(kernel)
                or loop.ITERATIONS_ATTR in kernel.attributes
            ):
                continue
            tops = [o for o in kernel.body.block.ops if isinstance(o, loop.ForOp)]
            if len(tops) != 1:
                continue
            nest = _nest(tops[0])
            if nest is not None:
                _flatten(op, kernel, nest)
