"""Named pass pipelines: the only place that decides pass order.

A pipeline is a string in xDSL's pass-pipeline syntax that runs from the graph level
down to the loop level; the target backend then takes the loop-level module. Every
pass option is written out, so the string alone replays a compilation.
"""

from smelt.errors import SmeltError
from smelt.passes.target_attach_cpu import attach_pass
from smelt.targets.cpu import BLOCKS_PER_THREAD, POST_VECTORIZE
from smelt.targets.cpu_spec import CpuSpec

TARGETS = ("cpu", "gpu")

# Graph-level clean-up and fusion, in order.
GRAPH_OPT = (
    "graph-fold-constants,graph-simplify,graph-fold-batchnorm,graph-simplify,graph-fuse"
)
# The same with conv / pool regions in NHWC: the CPU presets' graph pipeline (an
# NHWC conv is an implicit GEMM along contiguous channels).
GRAPH_OPT_NHWC = (
    "graph-fold-constants,graph-simplify,graph-fold-batchnorm,"
    "graph-convert-layout{layout=nhwc},graph-simplify,graph-fuse"
)

# Graph-level clean-up / fusion and loop-level scheduling passes join these presets
# as they land ([graph-opt], [loop-opt]); O0 is the plain lowering.
_LOWER = "convert-graph-to-loop,buffer-plan"

# CPU loop scheduling: pattern kernels tiled, reordered and packed (sizes from
# smelt/targets/cpu.py for the module's #target.cpu, overridable as loop-schedule options), vectorized,
# then register-blocked (unroll the vector columns, unroll-and-jam the rows, keep
# the C tile in registers across k, and across a conv's window loops, unroll k).
CPU_LOOP_OPT = f"loop-schedule,loop-vectorize,{POST_VECTORIZE}"
_LOWER_CPU_OPT = f"convert-graph-to-loop,loop-dedup-kernels,{CPU_LOOP_OPT},buffer-plan"

PRESETS: dict[str, dict[str, str]] = {
    "cpu": {
        "O0": "convert-graph-to-loop",
        "O1": f"{GRAPH_OPT},{_LOWER}",
        "O2": f"{GRAPH_OPT_NHWC},{_LOWER_CPU_OPT}",
        "O3": f"{GRAPH_OPT_NHWC},{_LOWER_CPU_OPT}",
    },
    # The triton target: GPU block sizes are chosen by its schedule, not by passes.
    "gpu": {
        "O0": _LOWER,
        "O1": f"{GRAPH_OPT},{_LOWER}",
        "O2": f"{GRAPH_OPT},{_LOWER}",
        "O3": f"{GRAPH_OPT},{_LOWER}",
    },
}

DEFAULT_LEVEL = "O2"

# CPU presets that run their outer parallel loops on `threads` threads: the last
# loop pass, after scheduling and vectorization, before the memory plan.
THREADED_LEVELS = ("O2", "O3")


def preset(
    target: str, level: str = DEFAULT_LEVEL, threads: int = 1, cpu: str = "host"
) -> str:
    """The pipeline string of preset `level` (O0…O3) for `target`.

    CPU presets start with `target-attach-cpu` for `cpu` ("host" or an LLVM CPU
    name with feature edits, see `CpuSpec.parse`), written out in full so that the
    string replays the build on any machine. With `threads` > 1, CPU presets O2/O3
    end their loop passes with `loop-parallelize{threads=N}`: the only place a
    thread count comes from.
    """
    if target not in PRESETS:
        raise SmeltError(f"unknown target '{target}': choose one of {', '.join(PRESETS)}")
    levels = PRESETS[target]
    if level not in levels:
        raise SmeltError(
            f"unknown optimization level '{level}': choose one of {', '.join(levels)}"
        )
    if not isinstance(threads, int) or threads < 1:
        raise SmeltError(f"threads must be a positive integer, not {threads!r}")
    spec = levels[level]
    if threads > 1 and target == "cpu" and level in THREADED_LEVELS:
        blocks = BLOCKS_PER_THREAD * threads
        loops = spec.removesuffix(",buffer-plan")
        loops = loops.replace("loop-schedule", f"loop-schedule{{min_blocks={blocks}}}")
        spec = f"{loops},loop-parallelize{{threads={threads}}},buffer-plan"
    if target == "cpu":
        spec = with_cpu(with_int8(spec, cpu), cpu)
    return spec


def all_presets(threads: int = 1, cpu: str = "host") -> list[tuple[str, str, str]]:
    """(target, level, pipeline) of every preset, as `smelt pipelines` prints them."""
    return [
        (target, level, preset(target, level, threads, cpu))
        for target, levels in PRESETS.items()
        for level in levels
    ]


# QDQ layers as packed int8 GEMMs: matmul / gemm, and with NHWC convs (im2col
# rows; grouped convs stay float: no qgemm takes them, their i32 loops are slow).
# quant-pack-gemm runs after the layout conversion, which puts the convs (and a
# batch norm after one, as quant-fold-qdq rewrites it) in NHWC.
INT8_FOLD = "quant-fold-qdq{grouped_conv=false}"
INT8_FOLD_NCHW = "quant-fold-qdq{conv=false}"
INT8_PACK = "quant-pack-gemm"


def with_int8(spec: str, cpu: str) -> str:
    """`spec` with the int8 passes when `cpu` has an int8 GEMM micro-kernel (AVX2
    or better: `quant_gemm.choose_variant`); else unchanged. quant-fold-qdq goes
    after the graph clean-up, quant-pack-gemm after graph-convert-layout's
    clean-up (convs folded too) or right after the fold (without NHWC: convs
    stay float)."""
    from smelt.dialects.quant_gemm import choose_variant

    anchor, layout = "graph-fold-batchnorm,", "graph-convert-layout{layout=nhwc},"
    if anchor not in spec or "quant-fold-qdq" in spec:
        return spec
    if choose_variant(CpuSpec.parse(cpu).has) is None:
        return spec
    nhwc = f"{layout}graph-simplify,"
    if nhwc not in spec:
        return spec.replace(anchor, f"{anchor}{INT8_FOLD_NCHW},{INT8_PACK},", 1)
    spec = spec.replace(anchor, f"{anchor}{INT8_FOLD},", 1)
    return spec.replace(nhwc, f"{nhwc}{INT8_PACK},", 1)


PRECISIONS = ("f32", "f16", "bf16")


def with_precision(spec: str, precision: str) -> str:
    """`spec` with `quant-cast{to=precision}` after the graph clean-up (before
    layout conversion and fusion; first when `spec` has no clean-up), unless it is
    "f32" or `spec` casts already."""
    if precision not in PRECISIONS:
        raise SmeltError(
            f"unknown precision '{precision}': choose one of {', '.join(PRECISIONS)}"
        )
    if precision == "f32" or "quant-cast" in spec:
        return spec
    cast = f"quant-cast{{to={precision}}}"
    anchor = "graph-fold-batchnorm,"
    if anchor in spec:
        return spec.replace(anchor, f"{anchor}{cast},", 1)
    parts = spec.split(",")
    head = 1 if parts[0].startswith("target-attach-cpu") else 0
    return ",".join([*parts[:head], cast, *parts[head:]])


def with_cpu(spec: str, cpu: str) -> str:
    """`spec` starting with the `target-attach-cpu` of `cpu`, unless it attaches
    a CPU itself."""
    if "target-attach-cpu" in spec:
        return spec
    return f"{attach_pass(CpuSpec.parse(cpu))},{spec}"
