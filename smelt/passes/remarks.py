"""Missed-optimization remarks: why a pass left an op as it was (MLIR's
`-Rpass-missed`, `notifyMatchFailure`), kept for whoever collects them.

A pass that declines a rewrite says so where it declines:

    except Refused as e:
        remarks.missed(self.name, target, str(e))

and a caller that wants the reasons runs the pipeline inside `collect()`:

    with remarks.collect() as missed:
        smelt.compile(model, pipeline=...)
    for remark in missed: print(remark)   # @conv_3 loop.for "n.1": loop-vectorize:
                                          #   non-contiguous access

Outside `collect()` a remark costs a lookup and is dropped: remarks never change
what a pass does. The sink is a context variable, so compiles in two threads keep
their remarks apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from smelt.dialects import locations
from smelt.dialects.program import is_main
from smelt.passes.loop_nest import role


@dataclass(frozen=True)
class Remark:
    """`pass_name` left `op` (in function `function`) alone because of `reason`."""

    pass_name: str
    function: str | None  # the enclosing func.func's name (a kernel)
    op: str  # the op's name, with its loop role where it has one
    reason: str
    nodes: tuple[str, ...] = ()  # the ONNX nodes of the op, or of its kernel's calls

    def __str__(self) -> str:
        where = f"@{self.function} {self.op}" if self.function else self.op
        return f"{where}: {self.pass_name}: {self.reason}"


_SINK: ContextVar[list[Remark] | None] = ContextVar("smelt_remarks", default=None)


def missed(pass_name: str, op: Operation, reason: str) -> None:
    """Records that `pass_name` did not rewrite `op` because of `reason` (kept only
    inside `collect()`)."""
    sink = _SINK.get()
    if sink is not None:
        function = _function_of(op)
        nodes = _nodes_of(op, function)
        sink.append(Remark(pass_name, function, describe(op), reason, nodes))


@contextlib.contextmanager
def collect() -> Iterator[list[Remark]]:
    """The remarks of the passes run inside the `with`, in the order made."""
    sink: list[Remark] = []
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def describe(op: Operation) -> str:
    """`op`'s name, with its loop role where it has one: `loop.for "n.1"`."""
    name = role(op)
    return f'{op.name} "{name}"' if name is not None else op.name


def _function_of(op: Operation) -> str | None:
    at: Operation | None = op
    while at is not None and not isinstance(at, func.FuncOp):
        at = at.parent_op()
    return at.sym_name.data if at is not None else None


def _nodes_of(op: Operation, function: str | None) -> tuple[str, ...]:
    """The ONNX nodes `op` computes: its own location's, else (loop ops have
    none) those of @main's calls of its kernel."""
    own = locations.names(op)
    module = op.get_toplevel_object()
    if own or function is None or not isinstance(module, ModuleOp):
        return tuple(own)
    found: list[str] = []
    for main in module.ops:
        if is_main(main):
            for call in main.walk():
                if (
                    isinstance(call, func.CallOp)
                    and call.callee.root_reference.data == function
                ):
                    found.extend(locations.names(call))
    return tuple(dict.fromkeys(found))


def format_grouped(remarks: Sequence[Remark], limit: int = 8) -> str:
    """The remarks by pass and reason, most frequent first, each with where it
    happened (kernel, op and ONNX nodes; the first `limit`, then how many more)."""
    groups: dict[tuple[str, str], list[Remark]] = {}
    for r in remarks:
        groups.setdefault((r.pass_name, r.reason), []).append(r)
    head = f"remarks: {len(remarks)} (why a pass left an op alone), by pass and reason:"
    lines = [head]
    for (pass_name, reason), items in sorted(groups.items(), key=lambda g: -len(g[1])):
        lines.append(f"  {pass_name}: {reason} ({len(items)})")
        for r in items[:limit]:
            where = f"@{r.function} {r.op}" if r.function else r.op
            more = f" (+{len(r.nodes) - 4} more)" if len(r.nodes) > 4 else ""
            nodes = f"  [ONNX {', '.join(r.nodes[:4])}{more}]" if r.nodes else ""
            lines.append(f"    {where}{nodes}")
        if len(items) > limit:
            lines.append(f"    (+{len(items) - limit} more)")
    if not remarks:
        lines.append("  none: no pass declined a rewrite it tried")
    return "\n".join(lines)
