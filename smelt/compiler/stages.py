"""The driver's stages: import → graph → loop → target → runtime, each named,
timed and dumpable (as Triton's backend is a list of named stages).

    import   ONNX model → graph-level module (frontend)
    graph    the pipeline's passes before convert-graph-to-loop
    loop     convert-graph-to-loop and the passes after it
    target   loop-level module → native code (llvm) or Triton kernels
    runtime  the program → a CompiledModel (inputs, outputs, info)

`smelt.compile` runs `STAGES` in order on a `Build`. Every stage's wall time goes
to `info["seconds"][name]` (with "passes" = graph + loop and "codegen" = target,
the names of the first driver); `DumpOptions.print_stages` prints a stage's
result (the module's MLIR, the LLVM IR or Triton source, the io summary) and
`dump_dir` gets the target's code as `target.ll` / `target.py` beside the
per-pass files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from smelt.compiler.deferred import Deferred, tail_start
from smelt.compiler.instrument import DumpOptions, Instrumentation, module_text
from smelt.compiler.options import CompileOptions
from smelt.compiler.pipelines import LOWER
from smelt.compiler.progress import SILENT, Progress
from smelt.compiler.runner import (
    ModelLike,
    import_graph,
    io_specs,
    parse_pipeline,
    run_passes,
)
from smelt.compiler.stats import summary
from smelt.dialects.loop import is_kernel
from smelt.errors import SmeltError, internal_errors
from smelt.runtime.model import CompiledModel, TensorSpec


@dataclass
class Build:
    """One compile as the stages hand it on: what went in, and what each stage
    made so far."""

    model: ModelLike
    options: CompileOptions
    base_dir: str | os.PathLike | None = None
    dump: DumpOptions | None = None
    progress: Progress | None = None  # told each stage and pass as it starts
    spec: str = field(init=False)  # the resolved pipeline
    passes: tuple[ModulePass, ...] = field(init=False)
    graph_passes: int = field(init=False)  # passes[:graph_passes]: graph stage's
    instrument: Instrumentation = field(init=False)
    module: ModuleOp | None = None
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)  # report.summary, arena
    deferred: Deferred | None = None  # the loop passes left to code generation
    program: Any = None
    compiled: CompiledModel | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Parses the pipeline before anything runs: a bad one fails at once."""
        self.spec = self.options.resolved_pipeline()
        self.passes = parse_pipeline(self.spec).passes
        names = [p.name for p in self.passes]
        self.graph_passes = names.index(LOWER) if LOWER in names else len(names)
        source = None
        if not isinstance(self.model, ModuleOp):  # a crash re-imports the model

            def source() -> ModuleOp:
                return _import(self, check_model=False)

        self.instrument = Instrumentation(self.dump, source=source)
        if self.progress is None:
            self.progress = SILENT


@dataclass(frozen=True)
class Stage:
    """A named step of the driver: `run` advances a Build, `show` prints what it
    made (for --dump-stage)."""

    name: str
    run: Callable[[Build], None]
    show: Callable[[Build], str]


def _import(build: Build, check_model: bool) -> ModuleOp:
    options = build.options
    return import_graph(
        build.model, options.shape_map(), build.base_dir, options.constant_map(),
        check_model, options.memory_limit,
    )  # fmt: skip


def import_stage(build: Build) -> None:
    with internal_errors("the ONNX import"):
        build.module = _import(build, build.options.check_model)
        build.inputs, build.outputs = io_specs(build.module)


def graph_stage(build: Build) -> None:
    build.instrument.start(build.module, build.spec, build.passes, "import")
    passes = build.passes[: build.graph_passes]
    run_passes(build.module, passes, build.instrument, build.progress.callback)


def loop_stage(build: Build) -> None:
    passes = build.passes[build.graph_passes :]
    end = _loop_passes_now(build)
    if end < len(passes):
        build.deferred = Deferred(
            build.module, passes[end:], build.graph_passes + end, build.instrument,
            build.progress.step,
        )
    run_passes(build.module, passes[:end], build.instrument, build.progress.callback)


def _loop_passes_now(build: Build) -> int:
    """How many of the loop stage's passes it runs itself: all but a kernel-local
    tail, which a plain CPU compile runs kernel by kernel while LLVM compiles
    the kernels before (smelt.compiler.deferred); all of them when anything
    between passes or stages is to be shown."""
    passes = build.passes[build.graph_passes :]
    if build.options.target != "cpu" or not build.instrument.options.quiet():
        return len(passes)
    return tail_start(passes)


def target_stage(build: Build) -> None:
    options = build.options
    with internal_errors(f"code generation for the {options.target} target"):
        if options.target == "gpu":
            from smelt.lowering.triton.runtime import compile_to_triton

            build.program = compile_to_triton(
                build.module, options.device, memory_limit=options.memory_limit,
                tf32=options.tf32,
            )
        else:
            from smelt.lowering.llvm.jit import compile_to_native

            build.program = compile_to_native(
                build.module, options.opt_level, options.fast_math,
                profile=options.profile,
                consume=not isinstance(build.model, ModuleOp),
                memory_limit=options.memory_limit, deferred=build.deferred,
            )  # fmt: skip


def runtime_stage(build: Build) -> None:
    options = build.options
    build.stats = summary(build.module)  # after the deferred loop passes
    build.stats["arena_bytes"] = build.program.arena_bytes  # what the runtime takes
    # the kernels scheduled and compiled: calls of equal kernels share one
    # (loop-dedup-kernels), so this can be fewer than stats["kernels"], the calls
    build.stats["distinct_kernels"] = sum(1 for op in build.module.ops if is_kernel(op))
    info = {
        "pipeline": build.spec, "target": options.target, "seconds": build.seconds,
        "options": options, "stats": build.stats,
    }  # fmt: skip
    if options.target == "cpu":
        info["cpu"] = str(build.program.spec)
    build.compiled = CompiledModel(build.program, build.inputs, build.outputs, info)


def _ir(build: Build) -> str:
    dump = build.instrument.options
    return module_text(build.module, dump.print_constants, dump.print_debuginfo)


def _code(build: Build) -> str:
    program = build.program
    return program.source if build.options.target == "gpu" else program.llvm_ir


def _io(build: Build) -> str:
    lines = [
        f"{kind} {s.name}: {'x'.join(map(str, s.shape)) or 'scalar'} "
        f"{np.dtype(s.dtype).name}"
        for kind, specs in (("input", build.inputs), ("output", build.outputs))
        for s in specs
    ]
    lines.append(f"arena {build.program.arena_bytes} bytes")
    return "\n".join(lines) + "\n"


STAGES = (
    Stage("import", import_stage, _ir),
    Stage("graph", graph_stage, _ir),
    Stage("loop", loop_stage, _ir),
    Stage("target", target_stage, _code),
    Stage("runtime", runtime_stage, _io),
)
STAGE_NAMES = tuple(s.name for s in STAGES)

# the names of the first driver's three steps, kept in info["seconds"]
_SUMS = {"passes": ("graph", "loop"), "codegen": ("target",)}


def run_stages(build: Build, stages: tuple[Stage, ...] = STAGES) -> CompiledModel:
    """Runs `stages` in order on `build`, timing and dumping each; returns the
    compiled model."""
    shown = build.instrument.options.print_stages
    if unknown := sorted(set(shown) - set(STAGE_NAMES)):
        raise SmeltError(
            f"--dump-stage names unknown stages {', '.join(unknown)}: choose from "
            f"{', '.join(STAGE_NAMES)}"
        )
    for stage in stages:
        build.progress.stage(stage.name, _steps(build, stage.name))
        t0 = time.perf_counter()
        stage.run(build)
        build.seconds[stage.name] = time.perf_counter() - t0
        if stage.name in shown:
            _show(build, stage)
    # the pass table lists the graph and loop stages pass by pass
    build.instrument.stages.update(
        (k, v) for k, v in build.seconds.items() if k not in ("graph", "loop")
    )
    for name, parts in _SUMS.items():
        build.seconds[name] = sum(build.seconds.get(p, 0.0) for p in parts)
    if build.instrument.options.dump_dir and build.program is not None:
        suffix = "py" if build.options.target == "gpu" else "ll"
        _write(build, f"target.{suffix}", _code(build))
    build.instrument.finish()
    if build.compiled is None:
        raise SmeltError("the stages ended before the runtime stage")
    return build.compiled


def _steps(build: Build, stage: str) -> int:
    """The passes a stage runs (0: it has no steps)."""
    if stage == "graph":
        return build.graph_passes
    if stage == "target" and build.deferred is not None:  # a step per kernel
        return sum(1 for op in build.module.ops if is_kernel(op))
    return _loop_passes_now(build) if stage == "loop" else 0


def _show(build: Build, stage: Stage) -> None:
    stream = build.instrument.stream
    stream.write(f"// -----// Stage {stage.name} //----- //\n")
    stream.write(stage.show(build))
    stream.flush()


def _write(build: Build, name: str, text: str) -> None:
    path = os.path.join(build.instrument.options.dump_dir, name)
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise SmeltError(f"cannot write the dump '{path}': {e}") from None
