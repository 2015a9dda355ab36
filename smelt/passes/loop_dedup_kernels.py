"""loop-dedup-kernels: kernels that are the same but for their name become one."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, SymbolRefAttr
from xdsl.passes import ModulePass

from smelt.dialects import locations, loop


def _key(kernel: func.FuncOp) -> tuple:
    """What two equal kernels share for sure: a cheap bucket before the full
    structural comparison."""
    attrs = tuple(sorted((k, str(v)) for k, v in kernel.attributes.items()))
    ops = sum(1 for _ in kernel.walk())
    return (kernel.function_type, attrs, ops)


def _same(a: func.FuncOp, b: func.FuncOp) -> bool:
    return a.function_type == b.function_type and a.attributes == b.attributes and (
        a.body.is_structurally_equivalent(b.body)
    )


@dataclass(frozen=True)
class LoopDedupKernelsPass(ModulePass):
    """Calls of a kernel equal to an earlier one (same signature, attributes and
    body, names aside) call the earlier one; the copy is erased.

    Expects a loop-level module (kernels and @main, as convert-graph-to-loop
    makes). Every later pass then schedules, and the target compiles, each
    distinct kernel once: repeated blocks of a model (ResNet's bottlenecks, a
    transformer's layers) share their kernels, whose weights are arguments.
    A pass that rewrites a kernel per call site must handle several callers.
    The kept kernel's location names the ONNX nodes of all of them; each call
    keeps its own. Kernels whose run-time checks (`loop.check`) name different
    nodes differ in their messages, so they stay apart and a failure names its node.

        func.func @conv_3(...) {A}   func.func @conv_7(...) {A}
        func.call @conv_3(%x, %w1)   func.call @conv_7(%y, %w2)
      → func.func @conv_3(...) {A}
        func.call @conv_3(%x, %w1)   func.call @conv_3(%y, %w2)
    """

    name = "loop-dedup-kernels"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        kept: dict[tuple, list[func.FuncOp]] = {}
        renamed: dict[str, str] = {}
        served: dict[func.FuncOp, list[str]] = {}  # the nodes each kept one serves
        for kernel in [k for k in op.ops if isinstance(k, func.FuncOp)]:
            if not loop.is_kernel(kernel):
                continue
            bucket = kept.setdefault(_key(kernel), [])
            same = next((k for k in bucket if _same(k, kernel)), None)
            if same is None:
                bucket.append(kernel)
                continue
            renamed[kernel.sym_name.data] = same.sym_name.data
            names = served.setdefault(same, locations.names(same))
            names += locations.names(kernel)
            op.body.block.erase_op(kernel)
        for kernel, names in served.items():  # once per kernel: a chain of n
            kernel.location = locations.of_names(names)  # copies stays linear
        if not renamed:
            return
        for call in op.walk():
            if isinstance(call, func.CallOp):
                target = renamed.get(call.callee.string_value())
                if target is not None:
                    call.callee = SymbolRefAttr(StringAttr(target))
