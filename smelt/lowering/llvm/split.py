"""One LLVM module as several, so that LLVM optimizes and emits them on several
threads at once (as ThinLTO and LLVM's SplitModule split a compile), starting
while the rest of the module is still being emitted.

llvmlite's calls into LLVM release the GIL, so worker threads each turn one part
into object code while the others do the same and Python emits the next
kernels; MCJIT then links the objects. A part holds whole kernels (a kernel with
the tasks outlined from it), cut by op count as they are emitted; the last part
also holds the entry point, the thread pool and every mutable global. Kernels
become external symbols (the entry point calls them across parts); small
internal helpers and constant globals are copied into every part that may use
them (LLVM drops the unused copies); everything else defined in another part,
or not emitted yet, is declared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from llvmlite import ir
from xdsl.dialects import func

from smelt.lowering.llvm.emit_kernel import kernel_function_name

_KERNEL = kernel_function_name("")
_TASK = re.compile(r"\.task\d+(\.body)?$")
"""An outlined task of a kernel, or its body (emit_parallel.py): in its kernel's
part, not a kernel itself."""


class PartStream:
    """Hands a module's kernels to LLVM in parts while later kernels are still
    being emitted, so that Python's emission and LLVM's work overlap.

    `emitted` is called after each kernel is emitted; once the kernels since the
    last part reach `1 / parts` of all kernels' ops (counted in the loop
    dialect), their text goes to `submit` with every other kernel declared.
    `finish` submits the rest with the entry point, the thread pool and the
    mutable globals. With `parts` <= 1 the module is submitted whole, unchanged.
    """

    def __init__(
        self, kernels: list[func.FuncOp], parts: int, submit: Callable[[str], None]
    ):
        self.submit = submit
        self.weight = {k.sym_name.data: sum(1 for _ in k.walk()) for k in kernels}
        self.parts = min(parts, len(kernels))
        self.target = sum(self.weight.values()) / max(1, self.parts)
        self.pending: list[str] = []  # kernels emitted since the last part
        self.size = 0
        self.submitted: list[ir.Function] = []  # the functions of earlier parts

    def emitted(self, fn: ir.Function, kernel: func.FuncOp) -> None:
        if self.parts <= 1:
            return
        self.pending.append(fn.name)
        self.size += self.weight[kernel.sym_name.data]
        if self.size >= self.target:
            self._flush(fn.module, last=False)

    def finish(self, module: ir.Module) -> None:
        if self.parts <= 1:
            self.submit(str(module))
        else:
            self._flush(module, last=True)

    def _flush(self, module: ir.Module, last: bool) -> None:
        """Submits the pending kernels (and, if `last`, everything else)."""
        mutable = [
            v for v in module.globals.values()
            if isinstance(v, ir.GlobalVariable) and not v.global_constant
        ]  # fmt: skip
        kernels = [
            v for v in module.globals.values()
            if isinstance(v, ir.Function) and v.name.startswith(_KERNEL)
            and not _TASK.search(v.name)
        ]  # fmt: skip
        for value in mutable + kernels:  # kernels: called from the entry point;
            value.linkage = ""  # mutable globals: defined once (by the last
            value._clear_string_cache()  # part), used by all
        mine = set(self.pending)
        functions = [
            v for v in module.globals.values()
            if isinstance(v, ir.Function) and v.blocks
            and _TASK.sub("", v.name) in mine
        ]  # fmt: skip
        with _declared(module, self.submitted, first=last):
            self.submit(str(module))
        self.submitted += functions
        self.pending, self.size = [], 0


@contextmanager
def _declared(
    module: ir.Module, foreign: list[ir.Function], first: bool
) -> Iterator[None]:
    """`module` printing `foreign` (and, unless `first`, the entry point, the pool
    and the mutable globals) as declarations; restored afterwards."""
    saved: list[tuple[ir.GlobalValue, object, str]] = []

    def declare(value: ir.GlobalValue, body: object) -> None:
        saved.append((value, body, value.linkage))
        if isinstance(value, ir.Function):
            value.blocks = []
        else:
            value.initializer = None
        value.linkage = ""
        value._clear_string_cache()

    for fn in foreign:
        declare(fn, fn.blocks)
    if not first:
        for value in module.globals.values():
            if isinstance(value, ir.Function) and value.blocks and not (
                value.name.startswith(_KERNEL) or value.linkage == "internal"
            ):
                declare(value, value.blocks)  # the entry point, pool start / stop
            elif isinstance(value, ir.GlobalVariable) and not value.global_constant:
                declare(value, value.initializer)
    try:
        yield
    finally:
        for value, body, linkage in saved:
            if isinstance(value, ir.Function):
                value.blocks = body  # type: ignore[assignment]
            else:
                value.initializer = body
            value.linkage = linkage
            value._clear_string_cache()
