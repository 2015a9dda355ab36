"""Named pass pipelines: the only place that decides pass order.

A pipeline is a string in xDSL's pass-pipeline syntax that runs from the graph level
down to the loop level; the target backend then takes the loop-level module. Every
pass option is written out, so the string alone replays a compilation. A preset is
assembled from lists of passes (`Preset`, `preset`), never by editing its text.
"""

from __future__ import annotations

from dataclasses import dataclass

from smelt.errors import SmeltError
from smelt.passes.loop_schedule_plan import STEP_KINDS
from smelt.passes.target_attach_cpu import attach_pass
from smelt.targets.cpu import BLOCKS_PER_THREAD, K_UNROLL, TAIL_ROWS
from smelt.targets.cpu_spec import CpuSpec

TARGETS = ("cpu", "gpu")
DEFAULT_LEVEL = "O2"
PRECISIONS = ("f32", "f16", "bf16")

LOWER = "convert-graph-to-loop"
"""The conversion that ends the graph passes: the driver's graph stage runs the
passes before it, its loop stage the rest."""

# Graph-level clean-up (a precision cast and int8 GEMMs join right after it), then
# fusion; the CPU presets convert conv / pool regions to NHWC before fusing (an
# NHWC conv is an implicit GEMM along contiguous channels).
CLEANUP = ("graph-fold-constants", "graph-simplify", "graph-fold-batchnorm")
NHWC = ("graph-convert-layout{layout=nhwc}",)
FUSE = ("graph-simplify", "graph-fuse")
GRAPH_OPT = ",".join(CLEANUP + FUSE)
GRAPH_OPT_NHWC = ",".join(CLEANUP + NHWC + FUSE)

# QDQ layers as packed int8 GEMMs. Without NHWC (O1): matmul / gemm only, both
# passes right after the clean-up (INT8). With NHWC (O2, O3) convs too, as im2col
# rows (grouped convs stay float: no qgemm takes them, their i32 loops are slow):
# the fold after the clean-up, quant-pack-gemm after the layout conversion's
# clean-up, which puts the convs (and a batch norm after one, as quant-fold-qdq
# rewrites it) in NHWC.
INT8_PACK = "quant-pack-gemm"
INT8 = ("quant-fold-qdq{conv=false}", INT8_PACK)
INT8_FOLD_NHWC = "quant-fold-qdq{grouped_conv=false}"

# What turns the vectorized micro-tile into a register-blocked kernel: unroll the
# vector columns, unroll-and-jam the rows into the k loop, keep C in registers
# (across the conv window loops too, when they are inside the micro-kernel), then
# unroll the reduction loop (the rows' remainder tile by TAIL_ROWS, looped).
# loop-cse after each full unroll shares the address arithmetic that every copy
# repeats (40% of light_resnet50's loop ops; the passes after it and the LLVM
# emission, in Python, cost per op).
POST_VECTORIZE = (
    'loop-unroll{loop="n.2"}',
    "loop-cse",
    f'loop-unroll{{loop="m.2" jam=true tail={TAIL_ROWS}}}',
    "loop-cse",
    'loop-promote{loop="k.1"}',
    'loop-promote{loop="k"}',
    'loop-promote{loop="kw"}',
    'loop-promote{loop="kh"}',
    "loop-forward",
    f'loop-unroll{{loop="k.1" factor={K_UNROLL} hint=true}}',
    f'loop-unroll{{loop="k" factor={K_UNROLL} hint=true}}',
)


def cpu_loop_opt(**sizes: int) -> tuple[str, ...]:
    """CPU loop scheduling: pattern kernels planned (`loop-schedule-plan`, with
    `sizes` as its options where not 0; else from the module's #target.cpu, see
    smelt/targets/cpu.py), tiled, reordered, fused, packed and unrolled (one
    `loop-schedule-apply` per kind of step), vectorized, then register-blocked
    (`POST_VECTORIZE`)."""
    options = " ".join(f"{k}={v}" for k, v in sizes.items() if v)
    plan = f"loop-schedule-plan{{{options}}}" if options else "loop-schedule-plan"
    steps = tuple(f"loop-schedule-apply{{step={kind}}}" for kind in STEP_KINDS)
    return (plan, *steps, "loop-vectorize", *POST_VECTORIZE)


CPU_LOOP_OPT = ",".join(cpu_loop_opt())


@dataclass(frozen=True)
class Preset:
    """One optimization level of a target, as lists of passes: `cleanup` (after
    which a precision cast and int8 GEMMs join), the rest of the graph passes,
    then convert-graph-to-loop; `scheduled`: the CPU loop scheduling (threads
    join it: `preset`); `buffer_plan`: end with the static memory plan."""

    cleanup: tuple[str, ...] = ()
    graph: tuple[str, ...] = ()
    scheduled: bool = False
    buffer_plan: bool = True


PRESETS: dict[str, dict[str, Preset]] = {
    "cpu": {
        "O0": Preset(buffer_plan=False),
        "O1": Preset(CLEANUP, FUSE),
        "O2": Preset(CLEANUP, NHWC + FUSE, scheduled=True),
        "O3": Preset(CLEANUP, NHWC + FUSE, scheduled=True),
    },
    # The triton target: GPU block sizes are chosen by its schedule, not by passes.
    "gpu": {
        "O0": Preset(),
        "O1": Preset(CLEANUP, FUSE),
        "O2": Preset(CLEANUP, FUSE),
        "O3": Preset(CLEANUP, FUSE),
    },
}

# CPU presets that run their outer parallel loops on `threads` threads: the last
# loop pass, after scheduling and vectorization, before the memory plan.
THREADED_LEVELS = tuple(lv for lv, p in PRESETS["cpu"].items() if p.scheduled)


def preset(
    target: str,
    level: str = DEFAULT_LEVEL,
    threads: int = 1,
    cpu: str = "host",
    precision: str = "f32",
) -> str:
    """The pipeline string of preset `level` (O0…O3) for `target`.

    CPU presets start with `target-attach-cpu` for `cpu` ("host" or an LLVM CPU
    name with feature edits, see `CpuSpec.parse`), written out in full so that the
    string replays the build on any machine, and add the int8 passes (`INT8`,
    or with NHWC the fold after the clean-up and `INT8_PACK` after the layout
    conversion's) when `cpu` has an int8 GEMM micro-kernel. With `threads` > 1, CPU presets
    O2/O3 plan blocks for the threads and end their loop passes with
    `loop-parallelize{threads=N}`: the only place a thread count comes from.
    `precision` "bf16" / "f16" adds `quant-cast` after the clean-up.
    """
    if target not in PRESETS:
        raise SmeltError(
            f"unknown target '{target}': choose one of {', '.join(PRESETS)}"
        )
    levels = PRESETS[target]
    if level not in levels:
        raise SmeltError(
            f"unknown optimization level '{level}': choose one of {', '.join(levels)}"
        )
    if not isinstance(threads, int) or threads < 1:
        raise SmeltError(f"threads must be a positive integer, not {threads!r}")
    p = levels[level]
    passes = [attach_pass(CpuSpec.parse(cpu))] if target == "cpu" else []
    passes += [*p.cleanup, *_cast(precision)]
    graph = list(p.graph)
    if p.cleanup and target == "cpu" and _has_int8_gemm(cpu):
        if NHWC[0] in graph:
            passes.append(INT8_FOLD_NHWC)
            after = graph.index("graph-simplify", graph.index(NHWC[0])) + 1
            graph.insert(after, INT8_PACK)
        else:
            passes += INT8
    passes += [*graph, LOWER]
    if p.scheduled:
        blocks = BLOCKS_PER_THREAD * threads if threads > 1 else 0
        passes += ["loop-dedup-kernels", "loop-flatten"]
        passes += cpu_loop_opt(min_blocks=blocks)
        if threads > 1:
            passes.append(f"loop-parallelize{{threads={threads}}}")
    if p.buffer_plan:
        passes.append("buffer-plan")
    return ",".join(passes)


def all_presets(threads: int = 1, cpu: str = "host") -> list[tuple[str, str, str]]:
    """(target, level, pipeline) of every preset, as `smelt pipelines` prints them."""
    return [
        (target, level, preset(target, level, threads, cpu))
        for target, levels in PRESETS.items()
        for level in levels
    ]


def _has_int8_gemm(cpu: str) -> bool:
    """Whether `cpu` has an int8 GEMM micro-kernel (AVX2 or better:
    `quant_gemm.choose_variant`)."""
    from smelt.dialects.quant_gemm import choose_variant

    return choose_variant(CpuSpec.parse(cpu).has) is not None


def _cast(precision: str) -> tuple[str, ...]:
    if precision not in PRECISIONS:
        raise SmeltError(
            f"unknown precision '{precision}': choose one of {', '.join(PRECISIONS)}"
        )
    return () if precision == "f32" else (f"quant-cast{{to={precision}}}",)


def split(spec: str) -> list[str]:
    """The passes of pipeline `spec`, each as written (commas inside an option's
    braces or quotes do not split)."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, c in enumerate(spec):
        if c == '"':
            quoted = not quoted
        elif not quoted and c in "{}":
            depth += 1 if c == "{" else -1
        elif not quoted and depth == 0 and c == ",":
            parts.append(spec[start:i].strip())
            start = i + 1
    parts.append(spec[start:].strip())
    return [p for p in parts if p]


def _name(entry: str) -> str:
    return entry.split("{", 1)[0].strip()


def with_precision(spec: str, precision: str) -> str:
    """User pipeline `spec` with `quant-cast{to=precision}` after the graph
    clean-up (after graph-fold-batchnorm, else first but after a
    target-attach-cpu), unless `precision` is "f32" or `spec` casts already."""
    cast = _cast(precision)
    passes = split(spec)
    names = [_name(p) for p in passes]
    if not cast or "quant-cast" in names:
        return spec
    if CLEANUP[-1] in names:
        at = names.index(CLEANUP[-1]) + 1
    else:
        at = 1 if names[:1] == ["target-attach-cpu"] else 0
    return ",".join([*passes[:at], *cast, *passes[at:]])


def with_cpu(spec: str, cpu: str) -> str:
    """User pipeline `spec` starting with the `target-attach-cpu` of `cpu`,
    unless it attaches a CPU itself."""
    passes = split(spec)
    if "target-attach-cpu" in map(_name, passes):
        return spec
    return ",".join([attach_pass(CpuSpec.parse(cpu)), *passes])
