"""The generated Triton module of a loop-level module: one function per phase of
each kernel (`emit.PhaseEmitter`), after the shared prelude."""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from smelt.dialects import locations
from smelt.dialects.loop import ITERATIONS_ATTR, is_kernel
from smelt.errors import SmeltError
from smelt.lowering.triton.contraction import find_contraction
from smelt.lowering.triton.emit import PhaseEmitter, TritonKernel
from smelt.lowering.triton.prelude import PRELUDE
from smelt.lowering.triton.structure import Phase, dependences, kernel_phases


def kernel_functions(kernel: func.FuncOp) -> list[TritonKernel]:
    """The Triton functions (one per phase, launched in order) of one loop kernel."""
    if ITERATIONS_ATTR in kernel.attributes:
        raise SmeltError(
            locations.prefixed(
                f"kernel @{kernel.sym_name.data} runs a loop of "
                f"{kernel.attributes[ITERATIONS_ATTR].data} iterations around its "
                "body's loop nests (an ONNX Loop); the triton target cannot run "
                "that yet: compile it for the cpu target",
                kernel,
            )
        )
    deps = dependences(kernel)
    phases = kernel_phases(kernel)
    whole = Phase(None, [op for p in phases for op in p.ops])
    if len(phases) > 1 and find_contraction(whole, deps) is not None:
        phases = [whole]  # fill, update and epilogue nests make one dot kernel
    base = kernel.sym_name.data
    out = []
    for i, phase in enumerate(phases):
        name = base if len(phases) == 1 else f"{base}_p{i}"
        out.append(PhaseEmitter(kernel, phase, deps, name).emit())
    return out


def module_kernels(module: ModuleOp) -> dict[str, list[TritonKernel]]:
    """Loop kernel name -> its Triton functions, for every kernel of `module`."""
    out = {}
    for op in module.ops:
        if isinstance(op, func.FuncOp) and is_kernel(op):
            out[op.sym_name.data] = kernel_functions(op)
    return out


def module_source(kernels: dict[str, list[TritonKernel]]) -> str:
    """An importable Python module holding every generated function."""
    parts = [PRELUDE]
    for fns in kernels.values():
        for fn in fns:
            parts.append("\n" + fn.source)
    return "\n".join(parts)


def emit_triton(module: ModuleOp) -> str:
    """Triton source text of every kernel of a loop-level module."""
    return module_source(module_kernels(module))
