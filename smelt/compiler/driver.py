"""compile(model) → CompiledModel: import, run the pipeline, hand the result to a target."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, MemRefType, ModuleOp, TensorType
from xdsl.passes import PassPipeline

from smelt.compiler import pipelines
from smelt.compiler.instrument import DumpOptions, Instrumentation
from smelt.dialects import dtypes
from smelt.errors import SmeltError, internal_errors
from smelt.runtime.model import CompiledModel, TensorSpec
from smelt.targets.memory import parse_size
from smelt.universe import SMELT_UNIVERSE, make_context

ModelLike = str | os.PathLike | bytes | onnx.ModelProto | ModuleOp


@dataclass(frozen=True)
class CompileOptions:
    """Everything that decides a compilation; the pipeline string holds the passes."""

    target: str = "cpu"
    pipeline: str | None = None  # None: the preset for `level`
    level: str = pipelines.DEFAULT_LEVEL
    threads: int = 1  # worker threads of the CPU presets (loop-parallelize)
    cpu: str = "host"  # the CPU to compile for (cpu target): see CpuSpec.parse
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # graph inputs fixed to values at import (their If conditions and shapes fold)
    constants: dict[str, Any] = field(default_factory=dict)
    check_model: bool = True  # onnx's full checker before import
    precision: str = "f32"  # "bf16" / "f16": quant-cast joins the pipeline
    opt_level: int = 3  # LLVM's optimization level (cpu target)
    fast_math: bool = False  # LLVM's `reassoc nsz` on float ops (cpu target)
    profile: bool = False  # time every kernel call (cpu target)
    # bytes that arena + weights + inputs / outputs may take (0: the machine's)
    memory_limit: int = 0

    def record(self) -> dict[str, Any]:
        """Every field as JSON-able data, and the pipeline they resolve to: what
        keys the compile cache and what an artifact's manifest says it was built
        with (constants: dtype, shape and values, or a sha256 when large)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["input_shapes"] = {
            k: list(v) for k, v in sorted(self.input_shapes.items())
        }
        fields["constants"] = {
            k: _array_record(v) for k, v in sorted(self.constants.items())
        }
        fields["resolved_pipeline"] = self.resolved_pipeline()
        return fields

    def resolved_pipeline(self) -> str:
        if self.pipeline is not None:
            spec = pipelines.with_precision(self.pipeline, self.precision)
            if self.target != "cpu":
                return spec
            return pipelines.with_cpu(spec, self.cpu)
        spec = pipelines.preset(self.target, self.level, self.threads, self.cpu)
        return pipelines.with_precision(spec, self.precision)


def _array_record(value: Any) -> dict[str, Any]:
    array = np.asarray(value)
    record = {"dtype": array.dtype.name, "shape": list(array.shape)}
    if array.size <= 1024:
        return record | {"values": array.tolist()}
    data = np.ascontiguousarray(array).tobytes()
    return record | {"sha256": hashlib.sha256(data).hexdigest()}


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
    running = ["the pipeline"]

    def track(previous, op, following) -> None:
        instrument(previous, op, following)
        running[0] = f"pass {following.name}" if following else "the pipeline"
        if callback is not None:
            callback(previous, op, following)

    pipeline = parse_pipeline(spec, track)
    instrument.start(module, spec, pipeline.passes, source)
    try:
        pipeline.apply(make_context(), module)
    except (SmeltError, *passthrough):
        raise
    except Exception as e:  # noqa: BLE001 (re-raised as the failed pass's error)
        with internal_errors(running[0], lambda: _reproduce(instrument)):
            raise e
    if finish:
        instrument.finish()
    return module


def _reproduce(instrument: Instrumentation) -> str:
    try:
        return instrument.crashed(make_context)
    except Exception as e:  # noqa: BLE001 (the crash's own report comes first)
        return f"no reproducer ({type(e).__name__}: {e})"


def main_func(module: ModuleOp) -> func.FuncOp:
    for op in module.ops:
        if isinstance(op, func.FuncOp) and op.sym_name.data == "main":
            return op
    raise SmeltError("the module has no @main function")


def io_specs(module: ModuleOp) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Input and output specs of @main (graph level: args/results; loop level:
    args are inputs then outputs)."""
    main = main_func(module)
    names_in = _names(main, "smelt.input_names")
    names_out = _names(main, "smelt.output_names")
    types = list(main.function_type.inputs.data)
    if all(isinstance(t, TensorType) for t in types):
        types += list(main.function_type.outputs.data)
    specs = [
        TensorSpec(name, tuple(t.get_shape()), _numpy_dtype(t))
        for name, t in zip(names_in + names_out, types, strict=True)
    ]
    return specs[: len(names_in)], specs[len(names_in) :]


def _names(main: func.FuncOp, key: str) -> list[str]:
    attr = main.attributes.get(key)
    if not isinstance(attr, ArrayAttr):
        raise SmeltError(f"@main lacks the {key} attribute")
    return [a.data for a in attr.data]


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
    memory_limit: int | str = 0,
) -> CompiledModel:
    """Compiles an ONNX model (path, bytes or ModelProto) for `target`; `threads`
    picks the preset's thread count (an explicit `pipeline` says it itself);
    `cpu` (cpu target) is the CPU to build for: "host", or an LLVM CPU name with
    feature edits ("x86-64-v3", "znver5,-avx512f"; code for a CPU this one does
    not cover compiles but refuses to run); `precision` "bf16" or "f16" stores
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
    rebuilt); `memory_limit` (bytes, or "8G" / "512M"; 0: the machine's memory)
    bounds what the compiled model's arena, weights, inputs and outputs take
    together: a model that needs more is refused (ResourceLimit naming its
    largest buffers), and one whose weights alone exceed it is refused before
    they are read."""
    options = CompileOptions(
        target=target,
        pipeline=pipeline,
        level=level,
        threads=threads,
        cpu=cpu,
        precision=precision,
        input_shapes={k: tuple(v) for k, v in (input_shapes or {}).items()},
        constants=dict(constants or {}),
        check_model=check_model,
        opt_level=opt_level,
        fast_math=fast_math,
        profile=profile,
        memory_limit=parse_size(memory_limit) if memory_limit else 0,
    )
    if cache:
        from smelt.compiler.cache import compile_cached

        # a compile asked to show its passes runs them (and refreshes the entry)
        quiet = dump is None or DumpOptions() == dataclasses.replace(
            dump, reproducer=True, reproducer_path=None, print_constants=False
        )
        return compile_cached(
            model, options, cache, base_dir,
            lambda: _compile(model, options, base_dir, dump), lookup=quiet,
        )  # fmt: skip
    return _compile(model, options, base_dir, dump)


def _compile(
    model: ModelLike,
    options: CompileOptions,
    base_dir: str | os.PathLike | None,
    dump: DumpOptions | None,
) -> CompiledModel:
    target, profile = options.target, options.profile
    spec = options.resolved_pipeline()
    if target not in pipelines.TARGETS:
        raise SmeltError(
            f"unknown target '{target}': choose one of {pipelines.TARGETS}"
        )
    if profile and target != "cpu":
        raise SmeltError("profile=True times kernels on the cpu target only")
    times = {}
    t0 = time.perf_counter()
    with internal_errors("the ONNX import"):
        module = import_graph(
            model, options.input_shapes, base_dir, options.constants,
            options.check_model, options.memory_limit,
        )
        inputs, outputs = io_specs(module)
    times["import"] = time.perf_counter() - t0
    source = None
    if not isinstance(model, ModuleOp):  # a crash re-imports rather than keep a copy

        def source() -> ModuleOp:
            return import_graph(
                model, options.input_shapes, base_dir, options.constants, False,
                options.memory_limit,
            )

    instrument = Instrumentation(dump, source=source)
    instrument.stages["import"] = times["import"]
    t0 = time.perf_counter()
    lower(module, spec, instrument=instrument, source="import", finish=False)
    times["passes"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with internal_errors(f"code generation for the {target} target"):
        if target == "gpu":
            from smelt.lowering.triton.runtime import compile_to_triton

            program = compile_to_triton(module, memory_limit=options.memory_limit)
        else:
            from smelt.lowering.llvm.jit import compile_to_native

            program = compile_to_native(
                module, options.opt_level, options.fast_math, profile=profile,
                consume=source is not None, memory_limit=options.memory_limit,
            )
    times["codegen"] = time.perf_counter() - t0
    instrument.stages["codegen"] = times["codegen"]
    instrument.finish()
    info = {"pipeline": spec, "target": target, "seconds": times, "options": options}
    if target == "cpu":
        info["cpu"] = str(program.spec)
    return CompiledModel(program, inputs, outputs, info)
