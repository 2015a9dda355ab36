"""compile(model) → CompiledModel: smelt's public entry, over the staged driver
(smelt/compiler/stages.py) and the pass runner every tool shares
(smelt/compiler/runner.py, whose names it re-exports for the tools and tests
that import them from here)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from smelt.compiler import pipelines
from smelt.compiler.cache import check_cacheable, compile_cached
from smelt.compiler.instrument import DumpOptions
from smelt.compiler.options import CompileOptions
from smelt.compiler.runner import (
    ModelLike,
    fewer_collections,
    import_graph,
    io_specs,
    lower,
    parse_pipeline,
    run_passes,
)
from smelt.compiler.stages import Build, run_stages
from smelt.dialects.program import main_func
from smelt.runtime.model import CompiledModel
from smelt.targets.memory import parse_size

if TYPE_CHECKING:
    from smelt.compiler.progress import Progress

__all__ = [
    "CompileOptions", "ModelLike", "compile", "import_graph", "io_specs", "lower",
    "main_func", "parse_pipeline", "run_passes",
]  # fmt: skip


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
        # a compile asked to show its passes runs them (and refreshes the entry)
        quiet = dump is None or dump.quiet()
        return compile_cached(
            model, options, cache, base_dir,
            lambda: _compile(model, options, base_dir, dump, progress), lookup=quiet,
        )  # fmt: skip
    return _compile(model, options, base_dir, dump, progress)


def _compile(
    model: ModelLike,
    options: CompileOptions,
    base_dir: str | os.PathLike | None,
    dump: DumpOptions | None,
    progress: Progress | None = None,
) -> CompiledModel:
    with fewer_collections():
        return run_stages(Build(model, options, base_dir, dump, progress))
