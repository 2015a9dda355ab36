"""NativeProgram: a model's native code, called on numpy buffers.

The interface of the code the llvm target emits (its entry point, globals and
thread-pool functions) is declared here, and this module needs only llvmlite,
numpy and the standard library: a deployed artifact loads and runs through it
without xdsl (`smelt.runtime.artifact`).
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
import weakref
from collections.abc import Sequence
from functools import cache, cached_property
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from smelt.dialects.weights import aligned_empty
from smelt.errors import InvalidInput, InvalidModel, SmeltError
from smelt.targets.cpu_spec import KNOWN_FEATURES, CpuSpec, host, host_lacks

ENTRY = "smelt_main"
"""The native entry point: void smelt_main(ptr io, ptr arena, ptr weights, ptr pool)."""
PROFILE_GLOBAL = "smelt_profile"
"""With `EmitOptions.profile`: i64 ticks per call of @main, summed over runs."""
SEGMENTS_GLOBAL = "smelt_segments"
"""A constant i64 array: how many weight segments the entry point reads, then the
bytes it reads of each; a program given other segments refuses to run them."""
STATUS_GLOBAL = "smelt_status"
"""An i32 global: 0, or the code of a failed `loop.check` (position + 1)."""
NEEDS_GLOBAL = "smelt_needs"
"""A constant NUL-terminated ASCII string: the JSON record (`code_needs`) of what
the code was built for and relies on (arena and pool bytes, threads, @main's
buffers, check messages, profiled calls, CPU). A program given other values (an
artifact's manifest edited) refuses to load (`check_needs`)."""
POOL_START = "smelt_pool_start"
"""i32 smelt_pool_start(ptr pool, i32 threads): starts threads-1 workers, returns
how many threads the pool has (fewer if the system refused some)."""
POOL_STOP = "smelt_pool_stop"
"""void smelt_pool_stop(ptr pool): wakes, stops and joins every worker."""

Signature = Sequence[tuple[tuple[int, ...], np.dtype]]
"""(shape, dtype) of each of @main's buffers: inputs, then outputs."""

_ENTRY_TYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)
_POOL_START_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)
_POOL_STOP_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _check_segments(engine: llvm.ExecutionEngine, weights: tuple[np.ndarray, ...]):
    """Refuses weight segments (from an artifact's manifest) that are fewer or
    smaller than those the code reads (`SEGMENTS_GLOBAL`): it would read past
    them."""
    address = engine.get_global_value_address(SEGMENTS_GLOBAL)
    if not address:
        raise InvalidModel("the program's code does not say which weights it reads")
    count = ctypes.c_int64.from_address(address).value
    sizes = list((ctypes.c_int64 * (count + 1)).from_address(address))[1:]
    given = [w.nbytes for w in weights]
    if len(given) != count or any(g < n for g, n in zip(given, sizes)):
        raise InvalidModel(
            f"the program reads {count} weight segments of {sizes} bytes but was "
            f"given {len(given)} of {given}: its weights do not belong to its code"
        )


def code_needs(
    arena_bytes: int,
    weight_bytes: int,
    threads: int,
    pool_bytes: int,
    signature: Signature,
    input_names: Sequence[str],
    output_names: Sequence[str],
    check_messages: Sequence[str],
    profiled_calls: Sequence[str],
    spec: CpuSpec,
) -> dict[str, Any]:
    """The record `NEEDS_GLOBAL` holds (the emitter writes it, a program compares
    its own arguments with it): each value the native code trusts its caller for."""
    return {
        "arena_bytes": int(arena_bytes),
        "weight_bytes": int(weight_bytes),
        "threads": int(threads),
        "pool_bytes": int(pool_bytes),
        "signature": [
            [[int(d) for d in shape], np.dtype(dt).name] for shape, dt in signature
        ],
        "input_names": [str(n) for n in input_names],
        "output_names": [str(n) for n in output_names],
        "check_messages": [str(m) for m in check_messages],
        "profiled_calls": [str(c) for c in profiled_calls],
        "cpu": cpu_record(spec, implied=False),
    }


def cpu_record(spec: CpuSpec, implied: bool = True) -> dict[str, Any]:
    """The JSON record of a CpuSpec (`manifest_spec` reads it back); with
    `implied`, the features LLVM takes from its name (`implied_features`)."""
    return {
        "name": spec.name,
        **({"implied": implied_features(spec)} if implied else {}),
        "features": sorted(spec.features),
        "l1d": spec.l1d,
        "l2": spec.l2,
        "l3": spec.l3,
        "cores": spec.cores,
    }


def implied_features(spec: CpuSpec) -> list[str] | None:
    """For code built for this host's CPU name: the host's other ISA features
    (LLVM enables a named CPU's features beyond the ones smelt passes, so code for
    "znver5" may use gfni or avx512vbmi); None for another CPU's name."""
    if spec.name != host().name:
        return None
    found = llvm.get_host_cpu_features()
    return sorted(
        f for f, on in found.items()
        if on and f not in KNOWN_FEATURES
        and (spec.has("avx512f") or not f.startswith("avx512"))
    )  # fmt: skip


def recorded_needs(engine: llvm.ExecutionEngine) -> dict[str, Any]:
    """The record `NEEDS_GLOBAL` of the code in `engine` (InvalidModel without
    one: code from an older smelt)."""
    address = engine.get_global_value_address(NEEDS_GLOBAL)
    if not address:
        raise InvalidModel(
            "its code does not record what it needs (built by an older smelt?): "
            "compile the model again"
        )
    try:
        recorded = json.loads(ctypes.string_at(address))
    except (ValueError, RecursionError):
        recorded = None
    if not isinstance(recorded, dict):
        raise InvalidModel(
            f"its code holds an unreadable {NEEDS_GLOBAL} record: compile the "
            "model again"
        )
    return recorded


def check_needs(engine: llvm.ExecutionEngine, given: dict[str, Any]) -> None:
    """Refuses values (`code_needs`) other than those the code recorded in
    `NEEDS_GLOBAL` when it was built: the arena, pool, buffers and tables the code
    reads and writes are only as big as it was told then."""
    recorded = recorded_needs(engine)
    for field, value in given.items():
        if recorded.get(field) != value:
            raise NeedsMismatch(field, value, recorded.get(field))


class NeedsMismatch(InvalidModel):
    """A value given to a program that its code was not built for; `field` names
    it (a key of `code_needs`)."""

    def __init__(self, field: str, given: Any, recorded: Any) -> None:
        self.field, self.given, self.recorded = field, _short(given), _short(recorded)
        super().__init__(
            f"its {field} ({self.given}) is not what its code was built for "
            f"({self.recorded}): the record does not belong to the code"
        )


def _global(engine: llvm.ExecutionEngine, name: str) -> int:
    """The address of a global the code's record says it defines."""
    address = engine.get_global_value_address(name)
    if not address:
        raise InvalidModel(f"its code lacks the global {name} that its record names")
    return address


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class NativeProgram:
    """A compiled model: `run(args)` calls the native entry point on numpy buffers.

    `args` are @main's buffers in order (inputs, then outputs), C-contiguous with
    the `signature`'s dtypes and shapes; outputs are written in place. The arena
    is allocated once here and the weight segments (the blob, then the big
    weights read where the compile left them) are held, so a run allocates
    nothing large;
    for the same reason one program runs one call at a time (the arena is shared:
    a lock makes concurrent calls wait).

    A program whose loops run on threads owns a pool of `threads` threads
    (`pool_bytes` of memory), started here and stopped (workers woken and joined)
    when the program is collected or the interpreter exits; a forked child starts
    its own. `engine` holds the code: JIT-compiled from `modules` (then `llvm_ir`
    and `asm` show it) or loaded from object files (`object_code`, what an
    artifact stores; `missing_features` then says what this CPU lacks of the
    CPU the code was built for, beyond `host_lacks`).
    """

    def __init__(
        self,
        engine: llvm.ExecutionEngine,
        signature: Signature,
        input_names: list[str],
        output_names: list[str],
        arena_bytes: int,
        weights: tuple[np.ndarray, ...],
        weight_bytes: int,
        threads: int = 1,
        pool_bytes: int = 0,
        profiled_calls: tuple[str, ...] = (),
        spec: CpuSpec | None = None,
        check_messages: tuple[str, ...] = (),
        modules: list[llvm.ModuleRef] | None = None,
        tm: llvm.TargetMachine | None = None,
        object_code: tuple[bytes, ...] | None = None,
        missing_features: list[str] | None = None,
        profiled_nodes: tuple[tuple[str, ...], ...] = (),
    ):
        # The engine owns the code; keep it (and the module) alive with this object.
        self._engine, self._modules, self._tm = engine, modules, tm
        self.object_code = object_code
        self.spec = spec or host()
        # before anything is allocated or called: the sizes are the code's own
        check_needs(engine, code_needs(
            arena_bytes, weight_bytes, threads, pool_bytes, signature, input_names,
            output_names, check_messages, profiled_calls, self.spec,
        ))  # fmt: skip
        self._entry = _ENTRY_TYPE(engine.get_function_address(ENTRY))
        # features the code may use that this CPU lacks: then it refuses to run
        if missing_features is None:
            missing_features = host_lacks(self.spec)
        self.missing_features = missing_features
        self.check_messages = check_messages
        self._status: ctypes.c_int32 | None = None
        if check_messages:
            address = _global(engine, STATUS_GLOBAL)
            self._status = ctypes.c_int32.from_address(address)
        self.arena_bytes = arena_bytes
        self.weight_bytes = weight_bytes
        self.input_names, self.output_names = input_names, output_names
        self._arena = aligned_empty(arena_bytes)
        self._weights = tuple(weights)  # the segments: the blob, then big weights
        _check_segments(engine, self._weights)
        self._segments = (ctypes.c_void_p * len(self._weights))(
            *(w.ctypes.data for w in self._weights)
        )
        self._signature = [(tuple(shape), np.dtype(dt)) for shape, dt in signature]
        names = [*input_names, *output_names]
        self._arg_names = [
            names[i] if i < len(names) else f"#{i}" for i in range(len(signature))
        ]
        self._io = (ctypes.c_void_p * max(1, len(signature)))()
        self._lock = threading.Lock()
        self.threads = 1  # the pool's threads once started
        self.pool_threads, self.pool_bytes = threads, pool_bytes  # what it asks for
        self._pool: np.ndarray | None = None
        self._pool_pid = 0
        self._pool_finalizer: weakref.finalize | None = None
        self.profiled_calls = profiled_calls
        self.profiled_nodes = profiled_nodes  # the ONNX nodes of each call
        self._ticks: np.ndarray | None = None
        if profiled_calls:
            address = _global(engine, PROFILE_GLOBAL)
            ticks = (ctypes.c_int64 * len(profiled_calls)).from_address(address)
            self._ticks = np.ctypeslib.as_array(ticks)
        if threads > 1 and not self.missing_features:
            self._start_pool()

    @property
    def signature(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        return list(self._signature)

    @property
    def weights(self) -> tuple[np.ndarray, ...]:
        """The weight segments (`plan.MemoryPlan.segments`): the blob first."""
        return self._weights

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
        start = _POOL_START_TYPE(engine.get_function_address(POOL_START))
        stop = _POOL_STOP_TYPE(engine.get_function_address(POOL_STOP))
        pool = aligned_empty(self.pool_bytes)
        self.threads = int(start(pool.ctypes.data, self.pool_threads))
        self._pool, self._pool_pid = pool, os.getpid()
        # The finalizer holds the engine (the code) and the pool memory alive until
        # the workers are joined; it must not hold `self`.
        self._pool_finalizer = weakref.finalize(
            self, _stop_pool, stop, pool, engine, self._lock
        )

    @cached_property
    def llvm_ir(self) -> str:
        """The optimized LLVM IR, each part of the split module in turn (made on
        first use; "" for a program loaded from machine code)."""
        return "\n".join(str(m) for m in self._modules or ())

    @cached_property
    def asm(self) -> str:
        """The host assembly of the optimized module (computed on first use)."""
        if self._modules is None or self._tm is None:
            raise SmeltError(
                "this program was loaded from machine code: it has no assembly text "
                "(compile the model to see it)"
            )
        return "\n".join(self._tm.emit_assembly(m) for m in self._modules)

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
                f"the model takes {len(self._signature)} buffers (inputs then "
                f"outputs), got {len(args)}"
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
                ctypes.addressof(self._segments),
                self._pool.ctypes.data if self._pool is not None else None,
            )
            if self._status is not None and self._status.value:
                code, self._status.value = self._status.value, 0
                # an input out of range (the message names its ONNX node)
                raise InvalidInput(self.check_messages[code - 1])


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


@cache
def tick_seconds() -> float:
    """Seconds per time-stamp-counter tick (`llvm.readcyclecounter`), measured
    against the wall clock over 50 ms."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    text = (
        "declare i64 @llvm.readcyclecounter()\n"
        "define i64 @smelt_clock() {\n"
        "  %t = call i64 @llvm.readcyclecounter()\n  ret i64 %t\n}\n"
    )
    target = llvm.Target.from_triple(llvm.get_process_triple())
    tm = target.create_target_machine(codemodel="jitdefault", jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(text), tm)
    engine.finalize_object()
    read = ctypes.CFUNCTYPE(ctypes.c_int64)(engine.get_function_address("smelt_clock"))
    t0, c0 = time.perf_counter(), read()
    while time.perf_counter() - t0 < 0.05:
        pass
    t1, c1 = time.perf_counter(), read()
    return (t1 - t0) / max(1, c1 - c0)
