"""One LLVM module as several, so that LLVM optimizes and emits them on several
threads at once (as ThinLTO and LLVM's SplitModule split a compile).

llvmlite's calls into LLVM release the GIL, so `parts` threads each turn one part
into object code while the others do the same; MCJIT then links the objects.
A part holds whole kernels (a kernel with the tasks outlined from it), balanced
by instruction count; the first part also holds the entry point, the thread
pool and every mutable global. Kernels become external symbols (the entry point
calls them across parts); small internal helpers and constant globals are copied
into every part that may use them (LLVM drops the unused copies); everything
else defined in another part is declared.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir

from smelt.lowering.llvm.emit_kernel import kernel_function_name

_KERNEL = kernel_function_name("")
_TASK = re.compile(r"\.task\d+$")


def split(module: ir.Module, parts: int) -> list[str]:
    """The LLVM IR text of `module` as up to `parts` modules that link together
    (one text, unchanged, when there is nothing to share out)."""
    groups: dict[str, list[ir.Function]] = {}
    for value in module.globals.values():
        if isinstance(value, ir.Function) and value.blocks:
            if value.name.startswith(_KERNEL):
                groups.setdefault(_TASK.sub("", value.name), []).append(value)
    parts = min(parts, len(groups))
    if parts <= 1:
        return [str(module)]
    owner = _balance(groups, parts)
    shared = [module.globals[name] for name in groups] + [
        v for v in module.globals.values()
        if isinstance(v, ir.GlobalVariable) and not v.global_constant
    ]  # fmt: skip
    for value in shared:  # kernels: called from the entry point; mutable globals
        value.linkage = ""  # are defined once (the first part), used by all
        value._clear_string_cache()
    texts = []
    for part in range(parts):
        foreign = [f for name, fs in groups.items() if owner[name] != part for f in fs]
        with _declared(module, foreign, first=part == 0):
            texts.append(str(module))
    return texts


def _balance(groups: dict[str, list[ir.Function]], parts: int) -> dict[str, int]:
    """Kernel → part, largest first onto the lightest part (the first part starts
    one kernel's worth heavier: it also holds the entry point and the pool)."""
    size = {
        name: sum(len(b.instructions) for f in fs for b in f.blocks)
        for name, fs in groups.items()
    }
    load = [0] * parts
    load[0] = max(size.values()) // 4
    owner = {}
    for name in sorted(size, key=lambda n: (-size[n], n)):
        part = min(range(parts), key=lambda p: (load[p], p))
        owner[name] = part
        load[part] += size[name]
    return owner


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
