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
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.ir import Operation

from smelt.passes.loop_nest import role


@dataclass(frozen=True)
class Remark:
    """`pass_name` left `op` (in function `function`) alone because of `reason`."""

    pass_name: str
    function: str | None  # the enclosing func.func's name (a kernel)
    op: str  # the op's name, with its loop role where it has one
    reason: str

    def __str__(self) -> str:
        where = f"@{self.function} {self.op}" if self.function else self.op
        return f"{where}: {self.pass_name}: {self.reason}"


_SINK: ContextVar[list[Remark] | None] = ContextVar("smelt_remarks", default=None)


def missed(pass_name: str, op: Operation, reason: str) -> None:
    """Records that `pass_name` did not rewrite `op` because of `reason` (kept only
    inside `collect()`)."""
    sink = _SINK.get()
    if sink is not None:
        sink.append(Remark(pass_name, _function_of(op), describe(op), reason))


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
