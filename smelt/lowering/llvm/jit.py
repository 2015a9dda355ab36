"""JIT-compiles a loop-level module for the host CPU and runs it on numpy arrays."""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache

import llvmlite.binding as llvm
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from smelt.dialects.dtypes import to_numpy
from smelt.dialects.loop import is_kernel
from smelt.dialects.target import cpu_target
from smelt.errors import SmeltError
from smelt.lowering.llvm import libm, threads
from smelt.lowering.llvm.emit import Deferred, LoweredModule, lower_module
from smelt.lowering.llvm.emit_kernel import EmitOptions
from smelt.lowering.llvm.object_code import load_objects
from smelt.lowering.llvm.program import ENTRY, NativeProgram, tick_seconds
from smelt.lowering.llvm.split import PartStream
from smelt.lowering.llvm.types import buffer_info
from smelt.targets.cpu_spec import CpuSpec, host

__all__ = ["NativeProgram", "assembly", "build", "compile_to_native", "tick_seconds"]


@cache
def _initialize() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm.register_symbols()
    threads.register_symbols()


def target_machine(spec: CpuSpec, opt_level: int = 3) -> llvm.TargetMachine:
    """A target machine for `spec`'s CPU name and features (host or not)."""
    _initialize()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=spec.name,
        features=spec.llvm_features(),
        opt=opt_level,
        codemodel="jitdefault",
        jit=True,
    )


def module_spec(module: ModuleOp) -> CpuSpec:
    """The module's `#target.cpu`, or the host when it has none."""
    attr = cpu_target(module)
    return host() if attr is None else CpuSpec.from_attr(attr)


def optimize(
    mod: llvm.ModuleRef, tm: llvm.TargetMachine, opt_level: int, unroll: bool = False
) -> None:
    """Runs LLVM's new-pass-manager pipeline for `opt_level` (O2+: vectorizers on).

    LLVM's own loop unroller is off unless `unroll`: smelt unrolls in the loop
    dialect (loop-unroll), and LLVM fully unrolling every static nest made O3
    about ten times slower to compile with no gain on the kernels measured.
    """
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pto.loop_unrolling = unroll
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)


PARTS_PER_THREAD = 3
"""Parts per compile thread: LLVM starts on the first while Python emits the
rest (more parts start it sooner; each part costs its declarations' parse)."""


def compile_threads() -> int:
    """The threads LLVM compiles on: the cores this process may use (at most 8)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _object(
    text: str, spec: CpuSpec, opt_level: int, unroll: bool
) -> tuple[llvm.ModuleRef, bytes]:
    """One part's IR text parsed, verified, optimized and emitted as object code,
    with its own target machine (one thread each: a TargetMachine is not shared)."""
    tm = target_machine(spec, opt_level)
    mod = _parse(text, tm)
    if opt_level > 0:
        optimize(mod, tm, opt_level, unroll)
    return mod, tm.emit_object(mod)


def _parse(text: str, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    if "half" in text and libm.missing_runtime():
        raise SmeltError(
            "this model converts to or from float16, which needs the compiler "
            f"runtime's {', '.join(libm.missing_runtime())} (libgcc_s); none was "
            "found in this process"
        )
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise SmeltError(
            f"internal error: the llvm target built invalid IR: {e}"
        ) from e
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    return mod


def build(
    module: ModuleOp,
    opt_level: int = 3,
    options: EmitOptions | None = None,
    unroll: bool = False,
) -> tuple[llvm.ModuleRef, llvm.TargetMachine, CpuSpec, LoweredModule]:
    """Emits, verifies and optimizes a loop-level module for its `#target.cpu`
    (the host without one): LLVM module, target machine, spec, lowering."""
    lowered = lower_module(module, options or EmitOptions())
    spec = module_spec(module)
    tm = target_machine(spec, opt_level)
    mod = _parse(str(lowered.ir_module), tm)
    if opt_level > 0:
        optimize(mod, tm, opt_level, unroll)
    return mod, tm, spec, lowered


def assembly(module: ModuleOp, opt_level: int = 3, fast_math: bool = False) -> str:
    """The assembly of a loop-level module for its `#target.cpu`, whether this
    machine can run it or not (kernels without @main too)."""
    mod, tm, _, _ = build(module, opt_level, EmitOptions(fast_math=fast_math))
    return tm.emit_assembly(mod)


def compile_to_native(
    module: ModuleOp,
    opt_level: int = 3,
    fast_math: bool = False,
    unroll: bool = False,
    profile: bool = False,
    consume: bool = False,
    parts: int = 0,
    memory_limit: int = 0,
    deferred: Deferred | None = None,
) -> NativeProgram:
    """Emits, verifies, optimizes and JIT-compiles a loop-level module with @main,
    for the module's `#target.cpu` (the host without one). Code for a CPU whose
    features the host lacks compiles (`asm`, `llvm_ir`) and refuses to run.

    The LLVM module is split in `parts` (default: the cores this process may
    use) that LLVM optimizes and turns into object code on as many threads
    (`split.py`); MCJIT links the objects.

    `fast_math` adds `reassoc nsz` to float ops (so float reductions vectorize);
    `unroll` turns on LLVM's loop unroller (see `optimize`); `profile` times every
    kernel call (`NativeProgram.profile`); `consume` lets the weights leave
    `module` as they are copied into the program (the driver's compile: a
    weight is never held twice), after which `module` cannot be compiled again;
    a model whose arena, weights and inputs / outputs need more than
    `memory_limit` bytes (0: the machine's memory) is refused (ResourceLimit);
    `deferred` passes run on each kernel as it is emitted (`lower_module`).
    """
    options = EmitOptions(
        fast_math=fast_math, profile=profile, release_constants=consume,
        memory_limit=memory_limit,
    )  # fmt: skip
    _initialize()
    spec = module_spec(module)
    kernels = [op for op in module.ops if isinstance(op, func.FuncOp) and is_kernel(op)]
    threads_ = compile_threads()
    with ThreadPoolExecutor(threads_) as pool:  # LLVM releases the GIL
        futures: list[Future] = []
        stream = PartStream(
            kernels,
            parts or PARTS_PER_THREAD * threads_,
            lambda text: futures.append(
                pool.submit(_object, text, spec, opt_level, unroll)
            ),
        )
        lowered = lower_module(module, options, stream.emitted, deferred)
        if lowered.plan is None:
            raise SmeltError("the module has no @main: nothing to run")
        stream.finish(lowered.ir_module)
        built = [f.result() for f in futures]
    mods = [m for m, _ in built]
    objects = tuple(o for _, o in built)
    engine = load_objects(objects, ENTRY, "the compiled model")
    signature = [
        (tuple(buffer_info(t).shape), to_numpy(t.get_element_type()))
        for t in lowered.io_types
    ]
    return NativeProgram(
        engine,
        signature,
        lowered.input_names,
        lowered.output_names,
        lowered.plan.arena_bytes,
        lowered.plan.segments,
        lowered.plan.weight_bytes,
        lowered.threads,
        threads.pool_bytes(lowered.threads),
        lowered.profiled_calls,
        spec,
        lowered.check_messages,
        profiled_nodes=lowered.profiled_nodes,
        modules=mods,
        tm=target_machine(spec, opt_level),
        object_code=objects,
    )
