"""The pipeline's kernel-local tail, run kernel by kernel during code generation,
so that LLVM compiles the first kernels while Python still transforms the rest
(as MLIR's pass manager nests function passes and runs them per function).

A pass declares its `scope` (a class attribute; passes without one are
"module" passes):

    kernel  transforms each loop.kernel on its own: reads nothing outside the
            kernel but the module's attributes (its #target.cpu), changes no
            kernel signature or attribute, adds or removes no function (the
            code generator declares a kernel once its passes ran: with
            threaded loops it takes the thread pool as one more argument)
    entry   reads and changes @main, and of the kernels only their attributes
            (buffer-plan)

Kernel and entry passes commute, so a pipeline ending in them may run them as:
every kernel pass on each kernel in turn (as it is about to be emitted), then
the entry passes on the module before @main is emitted. The result is the IR
the pipeline makes in order; `test_deferred.py` compares the two.

The loop stage hands them on only for a plain compile: dumps, timings and
statistics between passes see the whole module after each pass, so with any of
them asked for the whole pipeline runs in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from smelt.compiler.instrument import Instrumentation
from smelt.compiler.runner import reproducer_note
from smelt.errors import SmeltError, internal_errors
from smelt.universe import make_context

KERNEL, ENTRY = "kernel", "entry"


def scope(p: ModulePass) -> str:
    return getattr(p, "scope", "module")


def tail_start(passes: Sequence[ModulePass]) -> int:
    """h such that passes[:h] must run on the module in order and passes[h:]
    are all kernel or entry passes (none when h == len(passes))."""
    h = len(passes)
    while h > 0 and scope(passes[h - 1]) in (KERNEL, ENTRY):
        h -= 1
    return h


@dataclass
class Deferred:
    """`passes[start:]` of the pipeline that `instrument` started, all kernel or
    entry passes: `kernel(k)` runs the kernel passes on kernel k, `entry()` the
    entry passes on the module. A crash names the pass, and its reproducer is
    the IR before that pass of the pipeline run in order."""

    module: ModuleOp
    passes: tuple[ModulePass, ...]
    start: int
    instrument: Instrumentation
    step: Callable[[str], None] | None = None  # told of each kernel (progress)
    ctx: Context = field(default_factory=make_context)

    def kernel(self, kernel: func.FuncOp) -> None:
        if self.step is not None:
            self.step(f"@{kernel.sym_name.data}")
        block, anchor = kernel.parent_block(), kernel.next_op
        assert block is not None
        kernel.detach()
        scratch = ModuleOp([], attributes=dict(self.module.attributes))
        scratch.body.block.add_op(kernel)
        try:
            self._run(KERNEL, scratch)
        finally:
            kernel.detach()
            if anchor is None:
                block.add_op(kernel)
            else:
                block.insert_op_before(kernel, anchor)

    def entry(self) -> None:
        self._run(ENTRY, self.module)

    def _run(self, kind: str, module: ModuleOp) -> None:
        for i, p in enumerate(self.passes):
            if scope(p) != kind:
                continue
            try:
                p.apply(self.ctx, module)
            except SmeltError:
                raise
            except Exception as e:  # noqa: BLE001 (re-raised as the pass's error)
                self.instrument.records_done = self.start + i
                with internal_errors(
                    f"pass {p.name}", lambda: reproducer_note(self.instrument)
                ):
                    raise e
