"""A module's op and kernel counts and its intermediate traffic (`Stats`), at the
graph or the loop level: what `smelt report` prints after each pass, the pass
statistics of `Instrumentation` and a compile's `info["stats"]`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, MemRefType, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from smelt.dialects import dtypes, graph, loop


@dataclass(frozen=True)
class Stats:
    ops: int  # graph ops (constants excluded), or calls at the loop level
    kernels: int
    bytes_written: int  # intermediate tensors stored by one kernel ...
    bytes_read: int  # ... and loaded back by later kernels


def _nbytes(t: TensorType | MemRefType) -> int:
    return dtypes.byte_size(t.element_type) * math.prod(t.get_shape())


def _main(module: ModuleOp) -> func.FuncOp | None:
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == "main":
            return op
    return None


def _source(value: SSAValue) -> SSAValue:
    """Looks through views to the value a kernel wrote."""
    views = (graph.ReshapeOp, graph.BitcastOp, graph.IdentityOp, graph.DropoutOp)
    while isinstance(value.owner, views + (loop.ViewOp,)):
        value = value.owner.operands[0]
    return value


def graph_stats(main: func.FuncOp) -> Stats:
    ops = [op for op in main.body.ops if isinstance(op, graph.GraphOp | graph.FusedOp)]
    kernels = [op for op in ops if not getattr(op, "KERNEL_FREE", False)]
    readers: dict[SSAValue, set[Operation]] = {}
    for k in kernels:
        for operand in k.operands:
            readers.setdefault(_source(operand), set()).add(k)
    outputs = {_source(v) for v in main.body.block.last_op.operands}
    written = read = 0
    for k in kernels:
        for r in k.results:
            if r in outputs or r not in readers:
                continue
            written += _nbytes(r.type)
            read += _nbytes(r.type) * len(readers[r])
    n_ops = sum(
        1 if not isinstance(op, graph.FusedOp) else len(list(op.body.block.ops)) - 1
        for op in ops if not isinstance(op, graph.ConstantOp)
    )
    return Stats(n_ops, len(kernels), written, read)


def loop_stats(module: ModuleOp, main: func.FuncOp) -> Stats:
    written_args = {
        f.sym_name.data: _stored_args(f)
        for f in module.ops if isinstance(f, func.FuncOp) and loop.is_kernel(f)
    }
    calls = [op for op in main.body.ops if isinstance(op, func.CallOp)]
    allocs = {op.result for op in main.body.ops if isinstance(op, loop.AllocOp)}
    written = read = 0
    for call in calls:
        stored = written_args.get(call.callee.string_value(), set())
        for i, arg in enumerate(call.arguments):
            src = _source(arg)
            if src in allocs:
                if i in stored:
                    written += _nbytes(src.type)
                else:
                    read += _nbytes(src.type)
    return Stats(len(calls), len(calls), written, read)


def _stored_args(kernel: func.FuncOp) -> set[int]:
    """Indices of the kernel arguments it stores into."""
    args = list(kernel.body.block.args)
    stored = set()
    for op in kernel.walk():
        if op.name in ("memref.store", "vector.store") and op.operands[1] in args:
            stored.add(args.index(op.operands[1]))
    return stored


def stats(module: ModuleOp) -> Stats:
    main = _main(module)
    if main is None:
        return Stats(0, 0, 0, 0)
    if any(isinstance(op, func.CallOp) for op in main.body.ops):
        return loop_stats(module, main)
    return graph_stats(main)


PLAN_KEYS = ("arena_bytes", "arena_lower_bound", "naive_bytes")


def summary(module: ModuleOp) -> dict[str, int]:
    """`stats(module)` as a dict, with buffer-plan's numbers (PLAN_KEYS) where it
    ran: what `CompiledModel.info["stats"]` and `smelt explore` record."""
    out = asdict(stats(module))
    main = _main(module)
    for key in PLAN_KEYS if main is not None else ():
        attr = main.attributes.get(f"smelt.{key}")
        if isinstance(attr, IntegerAttr):
            out[key] = attr.value.data
    return out


KERNELS_ARE = "calls in @main after the whole pipeline"
"""What `smelt run`, `smelt report` and `smelt show` count as a model's kernels
(`loop_stats`: a kernel called twice counts twice, as it runs twice)."""


def format_summary(stats: dict[str, int] | None) -> str:
    """A compile's `info["stats"]` as one line ("" without them)."""
    if not stats:
        return ""
    arena = stats.get("arena_bytes")
    text = f"{stats['kernels']} kernels"
    text += f", arena {arena / 1e6:.2f} MB" if arena is not None else ""
    return text + f"  [kernels: {KERNELS_ARE}]"


def kernel_count(module: ModuleOp) -> str:
    """The kernel count of a module after its pipeline, saying what it counts:
    calls in @main (`KERNELS_ARE`) once the pipeline lowered to loops, else the
    graph ops that would make a kernel (a pipeline without convert-graph-to-loop)."""
    main = _main(module)
    if main is not None and any(isinstance(op, func.CallOp) for op in main.body.ops):
        return f"{stats(module).kernels} kernels [{KERNELS_ARE}]"
    return (
        f"{stats(module).kernels} graph-level kernels [graph ops that make a "
        "kernel: the pipeline does not lower to loops]"
    )
