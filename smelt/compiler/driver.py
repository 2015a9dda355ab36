"""compile(model) → CompiledModel: the API over the staged driver
(smelt/compiler/stages.py), and the pass runner every tool shares."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import onnx
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType
from xdsl.passes import ModulePass, PassPipeline

from smelt.compiler import pipelines
from smelt.compiler.instrument import DumpOptions, Instrumentation
from smelt.compiler.options import CompileOptions
from smelt.dialects import dtypes, program
from smelt.dialects.program import main_func
from smelt.errors import SmeltError, internal_errors
from smelt.runtime.model import CompiledModel, TensorSpec
from smelt.targets.memory import parse_size
from smelt.universe import SMELT_UNIVERSE, make_context

if TYPE_CHECKING:
    from smelt.compiler.progress import Progress

__all__ = [
    "CompileOptions", "ModelLike", "compile", "import_graph", "io_specs", "lower",
    "main_func", "parse_pipeline", "run_passes",
]  # fmt: skip

ModelLike = str | os.PathLike | bytes | onnx.ModelProto | ModuleOp


def import_graph(
    model: ModelLike,
    input_shapes: dict | None = None,
    base_dir: str | None = None,
    constants: dict | None = None,
    check_model: bool = True,
    memory_limit: int = 0,
) -> ModuleOp:
    """The graph-level module of `model` (a path, bytes, ModelProto or module);
    ResourceLimit when its weights alone need more than `memory_limit` bytes (0:
    the machine's memory)."""
    if isinstance(model, ModuleOp):
        if constants:
            raise SmeltError("constants= fixes ONNX inputs: give an ONNX model")
        return model
    from smelt.frontend.onnx import import_model

    return import_model(
        model, input_shapes or {}, base_dir, constants, check_model=check_model,
        memory_limit=memory_limit,
    )  # fmt: skip


def parse_pipeline(spec: str, callback: Callable | None = None) -> PassPipeline:
    try:
        return PassPipeline.parse_spec(SMELT_UNIVERSE.all_passes, spec, callback)
    except ValueError as e:
        raise SmeltError(f"bad pipeline '{spec}': {e}") from None


def lower(
    module: ModuleOp,
    spec: str,
    callback: Callable | None = None,
    instrument: Instrumentation | None = None,
    *,
    source: str = "input",
    passthrough: tuple[type[Exception], ...] = (),
    finish: bool = True,
) -> ModuleOp:
    """Runs pipeline `spec` on `module` in place and returns it; a pass that fails
    with anything but a SmeltError (or a `passthrough` type) is named in the
    InternalError, which says where its crash reproducer lies.

    `instrument` (default: one that only keeps the reproducer ready) dumps, times
    and counts between passes; `callback` runs after it; `source` names the
    input in dump files; `finish=False` leaves the reports (`instrument.finish()`)
    to the caller, who may time more stages."""
    instrument = instrument if instrument is not None else Instrumentation()
    passes = parse_pipeline(spec).passes
    instrument.start(module, spec, passes, source)
    run_passes(module, passes, instrument, callback, passthrough)
    if finish:
        instrument.finish()
    return module


def run_passes(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    instrument: Instrumentation,
    callback: Callable | None = None,
    passthrough: tuple[type[Exception], ...] = (),
) -> None:
    """Runs `passes`, the next ones of the pipeline that `instrument` started
    (`Instrumentation.start`), on `module` in place (see `lower`)."""
    running = ["the pipeline"]

    def track(previous, op, following) -> None:
        instrument(previous, op, following)
        running[0] = f"pass {following.name}" if following else "the pipeline"
        if callback is not None:
            callback(previous, op, following)

    try:
        with _fewer_collections():
            PassPipeline(tuple(passes), track).apply(make_context(), module)
    except (SmeltError, *passthrough):
        raise
    except Exception as e:  # noqa: BLE001 (re-raised as the failed pass's error)
        with internal_errors(running[0], lambda: reproducer_note(instrument)):
            raise e


def reproducer_note(instrument: Instrumentation) -> str:
    """The sentence saying where the crashed pass's reproducer lies."""
    try:
        return instrument.crashed(make_context)
    except Exception as e:  # noqa: BLE001 (the crash's own report comes first)
        return f"no reproducer ({type(e).__name__}: {e})"


def io_specs(module: ModuleOp) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Input and output specs of @main (graph level: args/results; loop level:
    args are inputs then outputs)."""
    main = main_func(module)
    names_in = _names(main, program.INPUT_NAMES_ATTR)
    names_out = _names(main, program.OUTPUT_NAMES_ATTR)
    types = list(main.function_type.inputs.data)
    if all(isinstance(t, TensorType) for t in types):
        types += list(main.function_type.outputs.data)
    specs = [
        TensorSpec(name, tuple(t.get_shape()), _numpy_dtype(t))
        for name, t in zip(names_in + names_out, types, strict=True)
    ]
    return specs[: len(names_in)], specs[len(names_in) :]


def _names(main: func.FuncOp, key: str) -> list[str]:
    names = program.io_names(main, key)
    if names is None:
        raise SmeltError(f"@main lacks the {key} attribute")
    return names


def _numpy_dtype(t: TensorType | MemRefType):
    return dtypes.to_numpy(t.element_type)


def compile(
    model: ModelLike,
    target: str = "cpu",
    *,
    pipeline: str | None = None,
    level: str = pipelines.DEFAULT_LEVEL,
    threads: int = 1,
    cpu: str = "host",
    device: str | None = None,
    input_shapes: dict[str, Sequence[int]] | None = None,
    constants: dict[str, Any] | None = None,
    precision: str = "f32",
    profile: bool = False,
    base_dir: str | os.PathLike | None = None,
    check_model: bool = True,
    dump: DumpOptions | None = None,
    opt_level: int = 3,
    fast_math: bool = False,
    cache: bool | str | os.PathLike | None = None,
    progress: Progress | None = None,
    memory_limit: int | str = 0,
    tf32: bool = True,
) -> CompiledModel:
    """Compiles an ONNX model (path, bytes or ModelProto) for `target`; `threads`
    picks the preset's thread count (an explicit `pipeline` says it itself);
    `cpu` (cpu target) is the CPU to build for: "host", or an LLVM CPU name with
    feature edits ("x86-64-v3", "znver5,-avx512f"; code for a CPU this one does
    not cover compiles but refuses to run); `device` (gpu target) is "cuda" or
    "cpu" (Triton's interpreter; default: cuda when torch sees a GPU, cpu under
    TRITON_INTERPRET=1, read here once); `precision` "bf16" or "f16" stores
    weights and activations in that type (quant-cast: f32 inputs, outputs and
    arithmetic; bf16 on a CPU with AVX512-BF16 also runs matmul / gemm with a
    constant weight as vdpbf16ps GEMMs, elsewhere contractions stay f32);
    `profile` (cpu) times every kernel
    call: `CompiledModel.profile()`; `base_dir` is the folder of the external
    data of a model given as bytes or a ModelProto (a path's is its folder);
    `constants` fixes graph inputs to values ({"sr": 16000}): they become
    initializers, so the If conditions and shapes that depend on them fold;
    `check_model=False` skips onnx's full checker (it refuses a few valid models:
    onnx 1.23 rejects its own test_mvn); `dump` prints, writes, times and counts
    what each pass did (mlir-opt's --print-ir-* flags, see DumpOptions), and says
    where a crashing pass's reproducer lies; `opt_level` and `fast_math` (cpu) are
    LLVM's optimization level and `reassoc nsz` on float ops; `cache` (cpu: True
    for ~/.cache/smelt, or a folder) keeps the build as an artifact keyed by the
    model's bytes, these options, the CPU and smelt's version and source, and
    loads it instead of compiling next time (a damaged or stale entry is
    rebuilt); `progress` is told each stage and pass as it starts (the CLI's
    status line: `smelt.compiler.progress`); `memory_limit` (bytes, or "8G" /
    "512M"; 0: the machine's memory) bounds what the compiled model's arena,
    weights, inputs and outputs take together: a model that needs more is
    refused (ResourceLimit naming its largest buffers), and one whose weights
    alone exceed it is refused before they are read; `tf32` (gpu) lets f32
    matmuls and convs multiply as tf32 on tensor cores (the default, as cuBLAS
    and torch.compile do where TF32 is allowed); False multiplies in f32."""
    if cache:
        from smelt.compiler.cache import check_cacheable

        check_cacheable(target)  # before the options choose a gpu device
    options = CompileOptions(
        target=target,
        pipeline=pipeline,
        level=level,
        threads=threads,
        cpu=cpu,
        device=device,
        precision=precision,
        input_shapes=input_shapes or {},
        constants=constants or {},
        check_model=check_model,
        opt_level=opt_level,
        fast_math=fast_math,
        profile=profile,
        memory_limit=parse_size(memory_limit) if memory_limit else 0,
        tf32=tf32,
    )
    if cache:
        from smelt.compiler.cache import compile_cached

        # a compile asked to show its passes runs them (and refreshes the entry)
        quiet = dump is None or dump.quiet()
        return compile_cached(
            model, options, cache, base_dir,
            lambda: _compile(model, options, base_dir, dump, progress), lookup=quiet,
        )  # fmt: skip
    return _compile(model, options, base_dir, dump, progress)


_GC_LOCK = threading.Lock()
_GC_DEPTH = [0, (0, 0, 0)]  # compiles running now, the thresholds they replaced
GC_YOUNG_THRESHOLD = 100_000
"""Allocations between the young collections of Python's cyclic GC while a
compile runs (Python's default: 700). A compile makes millions of IR objects
that live until it ends; at the default each full collection walks all of them,
and those collections took a quarter to a third of a compile's time."""


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's GC runs young collections every GC_YOUNG_THRESHOLD allocations
    (and so older ones far less often) while any compile runs; restored after.
    Garbage is still collected: erased ops that hold weights drop them at once
    (see convert-graph-to-loop and loop-pack-constant)."""
    with _GC_LOCK:
        if _GC_DEPTH[0] == 0:
            _GC_DEPTH[1] = gc.get_threshold()
            _, older, oldest = _GC_DEPTH[1]
            gc.set_threshold(max(GC_YOUNG_THRESHOLD, _GC_DEPTH[1][0]), older, oldest)
        _GC_DEPTH[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_DEPTH[0] -= 1
            if _GC_DEPTH[0] == 0:
                gc.set_threshold(*_GC_DEPTH[1])


def _compile(
    model: ModelLike,
    options: CompileOptions,
    base_dir: str | os.PathLike | None,
    dump: DumpOptions | None,
    progress: Progress | None = None,
) -> CompiledModel:
    from smelt.compiler.stages import Build, run_stages

    with _fewer_collections():
        return run_stages(Build(model, options, base_dir, dump, progress))
