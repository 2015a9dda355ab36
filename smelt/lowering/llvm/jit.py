"""JIT-compiles a loop-level module for the host CPU and runs it on numpy arrays."""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from functools import cache, cached_property

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir
from xdsl.dialects.builtin import MemRefType, ModuleOp

from smelt.dialects.dtypes import to_numpy
from smelt.dialects.target import cpu_target
from smelt.errors import InvalidInput, SmeltError
from smelt.lowering.llvm import libm, threads
from smelt.lowering.llvm.emit import (
    ENTRY,
    PROFILE_GLOBAL,
    LoweredModule,
    lower_module,
)
from smelt.lowering.llvm.emit_kernel import EmitOptions
from smelt.lowering.llvm.emit_memory import STATUS_GLOBAL
from smelt.lowering.llvm.plan import aligned_empty
from smelt.lowering.llvm.types import buffer_info
from smelt.targets.cpu_spec import CpuSpec, host, host_lacks

_ENTRY_TYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)
_POOL_START_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
_POOL_STOP_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


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


class NativeProgram:
    """A compiled model: `run(args)` calls the native entry point on numpy buffers.

    `args` are @main's buffers in order (inputs, then outputs), C-contiguous with
    @main's dtypes and shapes; outputs are written in place. The arena and the
    weight blob are allocated once here, so a run allocates nothing large; for the
    same reason one program runs one call at a time (the arena is shared: a lock
    makes concurrent calls wait).

    A program whose loops run on threads owns a pool of `threads` threads, started
    here and stopped (workers woken and joined) when the program is collected or
    the interpreter exits; a forked child starts its own.
    """

    def __init__(
        self,
        engine: llvm.ExecutionEngine,
        mod: llvm.ModuleRef,
        tm: llvm.TargetMachine,
        io_types: list[MemRefType],
        input_names: list[str],
        output_names: list[str],
        arena_bytes: int,
        weights: np.ndarray,
        weight_bytes: int,
        threads: int = 1,
        profiled_calls: tuple[str, ...] = (),
        spec: CpuSpec | None = None,
        check_messages: tuple[str, ...] = (),
        profiled_nodes: tuple[tuple[str, ...], ...] = (),
    ):
        # The engine owns the code; keep it (and the module) alive with this object.
        self._engine, self._module, self._tm = engine, mod, tm
        self._entry = _ENTRY_TYPE(engine.get_function_address(ENTRY))
        self.spec = spec or host()
        self.missing_features = host_lacks(self.spec)
        self.check_messages = check_messages
        self._status: ctypes.c_int32 | None = None
        if check_messages:
            address = engine.get_global_value_address(STATUS_GLOBAL)
            self._status = ctypes.c_int32.from_address(address)
        self.arena_bytes = arena_bytes
        self.weight_bytes = weight_bytes
        self.input_names, self.output_names = input_names, output_names
        self._arena = aligned_empty(arena_bytes)
        self._weights = weights
        self._signature = [
            (tuple(buffer_info(t).shape), to_numpy(t.get_element_type()))
            for t in io_types
        ]
        names = [*input_names, *output_names]
        self._arg_names = [
            names[i] if i < len(names) else f"#{i}" for i in range(len(io_types))
        ]
        self._io = (ctypes.c_void_p * max(1, len(io_types)))()
        self.llvm_ir = str(mod)
        self._lock = threading.Lock()
        self.threads = 1
        self._threads_wanted = threads
        self._pool: np.ndarray | None = None
        self._pool_pid = 0
        self._pool_finalizer: weakref.finalize | None = None
        self.profiled_calls = profiled_calls
        self.profiled_nodes = profiled_nodes  # the ONNX nodes of each call
        self._ticks: np.ndarray | None = None
        if profiled_calls:
            address = engine.get_global_value_address(PROFILE_GLOBAL)
            ticks = (ctypes.c_int64 * len(profiled_calls)).from_address(address)
            self._ticks = np.ctypeslib.as_array(ticks)
        if threads > 1 and not self.missing_features:
            self._start_pool()

    def profile(self, reset: bool = True) -> list[tuple[str, int]]:
        """(kernel, time-stamp-counter ticks summed over the runs so far) per call
        of @main, in call order; needs `compile_to_native(..., profile=True)`."""
        if self._ticks is None:
            raise SmeltError("this program was compiled without profile=True")
        with self._lock:
            result = list(zip(self.profiled_calls, self._ticks.tolist()))
            if reset:
                self._ticks[:] = 0
        return result

    def _start_pool(self) -> None:
        if self._pool_finalizer is not None:
            # a fork: the parent's workers do not exist here; forget, never join them
            self._pool_finalizer.detach()
        engine = self._engine
        start = _POOL_START_TYPE(engine.get_function_address(threads.START))
        stop = _POOL_STOP_TYPE(engine.get_function_address(threads.STOP))
        pool = aligned_empty(threads.pool_bytes(self._threads_wanted))
        self.threads = int(start(pool.ctypes.data, self._threads_wanted))
        self._pool, self._pool_pid = pool, os.getpid()
        # The finalizer holds the engine (the code) and the pool memory alive until
        # the workers are joined; it must not hold `self`.
        self._pool_finalizer = weakref.finalize(
            self, _stop_pool, stop, pool, engine, self._lock
        )

    @cached_property
    def asm(self) -> str:
        """The host assembly of the optimized module (computed on first use)."""
        return self._tm.emit_assembly(self._module)

    def run(self, args: list[np.ndarray]) -> None:
        """Runs the model; outputs (the trailing args) are written in place."""
        if self.missing_features:
            raise SmeltError(
                f"this model was compiled for {self.spec.name} with "
                f"{', '.join(self.missing_features)}, which this CPU "
                f"({host().name}) lacks: compile it with cpu='host' (--cpu host) or "
                "for a CPU this one covers (e.g. x86-64-v3)"
            )
        if len(args) != len(self._signature):
            raise SmeltError(
                f"the model takes {len(self._signature)} buffers (inputs then outputs), "
                f"got {len(args)}"
            )
        for i, (arg, (shape, dtype), name) in enumerate(
            zip(args, self._signature, self._arg_names)
        ):
            if not isinstance(arg, np.ndarray):
                raise SmeltError(f"buffer {name} must be a numpy array")
            if arg.shape != shape or not _same_storage(arg.dtype, dtype):
                raise SmeltError(
                    f"buffer {name} must be {dtype}{list(shape)}, "
                    f"got {arg.dtype}{list(arg.shape)}"
                )
            if not (arg.flags.c_contiguous and arg.flags.aligned):
                raise SmeltError(
                    f"buffer {name} must be C-contiguous and aligned "
                    "(use np.ascontiguousarray)"
                )
            if i >= len(self.input_names) and not arg.flags.writeable:
                raise SmeltError(f"output buffer {name} must be writeable")
        with self._lock:
            for i, arg in enumerate(args):
                self._io[i] = arg.ctypes.data
            if self._pool is not None and self._pool_pid != os.getpid():
                self._start_pool()
            self._entry(
                ctypes.addressof(self._io),
                self._arena.ctypes.data,
                self._weights.ctypes.data,
                self._pool.ctypes.data if self._pool is not None else None,
            )
            if self._status is not None and self._status.value:
                code, self._status.value = self._status.value, 0
                # an input out of range (the message names its ONNX node)
                raise InvalidInput(self.check_messages[code - 1])


@cache
def tick_seconds() -> float:
    """Seconds per time-stamp-counter tick (`llvm.readcyclecounter`), measured
    against the wall clock over 50 ms."""
    _initialize()
    module = ir.Module(name="clock")
    i64 = ir.IntType(64)
    fn = ir.Function(module, ir.FunctionType(i64, []), "smelt_clock")
    clock = module.declare_intrinsic(
        "llvm.readcyclecounter", (), ir.FunctionType(i64, [])
    )
    builder = ir.IRBuilder(fn.append_basic_block())
    builder.ret(builder.call(clock, []))
    tm = target_machine(host())
    mod = llvm.parse_assembly(str(module))
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    read = ctypes.CFUNCTYPE(ctypes.c_int64)(engine.get_function_address("smelt_clock"))
    t0, c0 = time.perf_counter(), read()
    while time.perf_counter() - t0 < 0.05:
        pass
    t1, c1 = time.perf_counter(), read()
    return (t1 - t0) / max(1, c1 - c0)


def _stop_pool(
    stop, pool: np.ndarray, engine: llvm.ExecutionEngine, lock: threading.Lock
) -> None:
    """Wakes and joins the workers, after a run still in flight (a daemon thread
    at interpreter exit) has finished; gives up on a run that never ends."""
    if lock.acquire(timeout=60):
        try:
            stop(pool.ctypes.data)
        finally:
            lock.release()


def _same_storage(given: np.dtype, expected: np.dtype) -> bool:
    """Loop-level integers are signless: i8 buffers take int8 and uint8 arrays."""
    if given == expected:
        return True
    signless = given.kind in "iu" and expected.kind in "iu"
    return signless and given.itemsize == expected.itemsize


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
    text = str(lowered.ir_module)
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
) -> NativeProgram:
    """Emits, verifies, optimizes and JIT-compiles a loop-level module with @main,
    for the module's `#target.cpu` (the host without one). Code for a CPU whose
    features the host lacks compiles (`asm`, `llvm_ir`) and refuses to run.

    `fast_math` adds `reassoc nsz` to float ops (so float reductions vectorize);
    `unroll` turns on LLVM's loop unroller (see `optimize`); `profile` times every
    kernel call (`NativeProgram.profile`).
    """
    options = EmitOptions(fast_math=fast_math, profile=profile)
    mod, tm, spec, lowered = build(module, opt_level, options, unroll)
    if lowered.plan is None:
        raise SmeltError("the module has no @main: nothing to run")
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    return NativeProgram(
        engine,
        mod,
        tm,
        lowered.io_types,
        lowered.input_names,
        lowered.output_names,
        lowered.plan.arena_bytes,
        lowered.plan.weights,
        lowered.plan.weight_bytes,
        lowered.threads,
        lowered.profiled_calls,
        spec,
        lowered.check_messages,
        lowered.profiled_nodes,
    )
