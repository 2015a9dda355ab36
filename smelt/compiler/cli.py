"""The `smelt` command: `smelt run MODEL [--check]`, `smelt report MODEL [-p ...]`,
`smelt quantize MODEL --calibration DATA -o OUT`, `smelt compile MODEL -o FILE`."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from smelt.compiler.artifact_cli import add_compile_parser, artifact_run_args
from smelt.compiler.cli_inputs import (
    DEFAULT_MODEL,
    dynamic_inputs,
    load_inputs,
    onnx_load,
    parse_constants,
    parse_shapes,
    random_inputs,
    resolve_model,
)
from smelt.compiler.cli_output import (  # test_cli imports one of them from here
    check_against_onnxruntime,
    check_tolerance,
    print_profile,
    run_and_show,
)
from smelt.errors import InternalError, SmeltError, internal_errors


def memory_size(text: str) -> int:
    """`--memory-limit`'s value: bytes from 8G, 512M, 1.5G, 4096 (binary units)."""
    from smelt.targets.memory import parse_size

    try:
        return parse_size(text)
    except SmeltError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


MEMORY_LIMIT_HELP = ("refuse a model whose arena, weights, inputs and outputs need "
                     "more than SIZE (8G, 512M, …; binary units; default: this "
                     "machine's memory)")


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def add_dump_arguments(
    parser: argparse.ArgumentParser, smelt_opt: bool = False
) -> None:
    """mlir-opt's flags that show what each pass did (`smelt run / report`,
    `smelt-opt`, whose parser has --time-passes and --print-constants already)."""
    group = parser.add_argument_group("pass instrumentation (IR dumps go to stderr)")
    group.add_argument("--print-ir-after-all", action="store_true",
                       help="print the IR after every pass")
    group.add_argument("--print-ir-before", action="append", default=[],
                       metavar="PASS", help="print the IR before each run of PASS "
                       "(comma-separated names, or repeat the flag)")
    group.add_argument("--print-ir-after", action="append", default=[],
                       metavar="PASS", help="print the IR after each run of PASS")
    group.add_argument("--print-ir-after-change", action="store_true",
                       help="print after a pass only if it changed the IR (alone: "
                       "after every pass that did)")
    group.add_argument("--dump-dir", metavar="DIR", help="write the IR before the "
                       "first pass and after each one to DIR/000-import.mlir, "
                       "DIR/001-PASS.mlir, …")
    if not smelt_opt:
        group.add_argument("--time-passes", action="store_true",
                           help="print the wall time of every pass")
        group.add_argument("--print-constants", action="store_true",
                           help="dumps print large constants in full (then they "
                           "parse back)")
        group.add_argument("--print-debuginfo", action="store_true",
                           help="dumps print each op's location: the ONNX nodes "
                           "it came from")
        group.add_argument("--dump-stage", action="append", default=[],
                           metavar="STAGE", help="print what a driver stage made: "
                           "import, graph, loop (MLIR), target (LLVM IR / Triton "
                           "source), runtime (inputs, outputs, arena)")
    group.add_argument("--time-passes-json", metavar="FILE",
                       help="write every pass's time (and statistics) as JSON")
    group.add_argument("--pass-statistics", action="store_true",
                       help="print ops / kernels / intermediate bytes after each pass")
    group.add_argument("--reproducer", metavar="FILE", help="where a crashing "
                       "pass's input IR goes (default: a temporary file)")


def dump_options(args: argparse.Namespace):
    """The DumpOptions of the flags `add_dump_arguments` added."""
    from smelt.compiler.instrument import DumpOptions

    def names(items: Sequence[str]) -> tuple[str, ...]:
        return tuple(n.strip() for item in items for n in item.split(",") if n.strip())

    return DumpOptions(
        print_after_all=args.print_ir_after_all,
        print_before=names(args.print_ir_before),
        print_after=names(args.print_ir_after),
        print_after_change=args.print_ir_after_change,
        dump_dir=args.dump_dir,
        time_passes=args.time_passes,
        time_json=args.time_passes_json,
        statistics=args.pass_statistics,
        print_constants=args.print_constants,
        print_debuginfo=args.print_debuginfo,
        print_stages=names(getattr(args, "dump_stage", [])),
        reproducer_path=args.reproducer,
    )


def progress_quiet(args: argparse.Namespace) -> bool:
    """No progress line: -q, or IR dumps (they share stderr)."""
    return bool(
        args.quiet or args.print_ir_after_all or args.print_ir_after_change
        or args.print_ir_before or args.print_ir_after
    )  # fmt: skip


def cmd_run(args: argparse.Namespace) -> int:
    import smelt

    path = resolve_model(args.model)
    feeds = load_inputs(args.inputs) if args.inputs else None
    shapes = {k: feeds[k].shape for k in dynamic_inputs(path) if k in (feeds or {})}
    shapes.update(parse_shapes(args.input_shape))
    constants = parse_constants(args.constant)
    from smelt.compiler.progress import shown
    from smelt.compiler.report import format_summary

    source = path
    if args.random_weights is not None:  # the same seeded weights for onnxruntime
        from smelt.frontend.random_weights import random_weights

        proto = random_weights(onnx_load(path), args.random_weights)
        source = proto.SerializeToString()
    t0 = time.perf_counter()
    with shown(os.path.basename(path), progress_quiet(args)) as progress:
        model = smelt.compile(
            source, args.target, input_shapes=shapes, level=args.level,
            base_dir=os.path.dirname(os.path.abspath(path)),
            constants=constants,
            threads=args.threads, profile=args.profile, cpu=args.cpu,
            check_model=not args.no_check_model, memory_limit=args.memory_limit,
            precision=args.precision, dump=dump_options(args), progress=progress,
            **({"pipeline": args.pipeline} if args.pipeline else {}),
            **({"tf32": False} if args.no_tf32 else {}),
        )
    print(f"compiled {os.path.basename(path)} for {args.target} in "
          f"{time.perf_counter() - t0:.2f} s  [pipeline: {model.info['pipeline']}]")
    if model.info.get("stats"):
        print(f"  {format_summary(model.info['stats'])}")
    if "cpu" in model.info:
        print(f"  cpu {model.info['cpu']}")
    feeds = feeds if feeds is not None else random_inputs(model)
    feeds = {k: v for k, v in feeds.items() if k not in constants}
    outputs = run_and_show(model, feeds, args.output)
    if args.profile:
        print_profile(model, feeds, args.profile)
    if args.check:
        from smelt.compiler.check_quant import check_in_steps, quantized_model

        tolerance, why = check_tolerance(args.tolerance, args.precision)
        quantized = quantized_model(source)
        if quantized is not None:  # in output steps, against an exact int8 oracle
            return check_in_steps(
                source, quantized, feeds, outputs, args.tolerance,
                check_tolerance(None, args.precision), constants,
            )  # fmt: skip
        return check_against_onnxruntime(
            source, feeds, outputs, tolerance, constants, why
        )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from smelt.compiler.driver import import_graph
    from smelt.compiler.instrument import Instrumentation
    from smelt.compiler.report import format_rows, kernel_count, report

    path = resolve_model(args.model)
    shapes, constants = parse_shapes(args.input_shape), parse_constants(args.constant)

    def source():  # a crash re-imports the model: no copy of it held meanwhile
        return import_graph(path, shapes, constants=constants, check_model=False)

    module = import_graph(path, shapes, constants=constants)
    spec = pipeline_of(args)
    print(f"{os.path.basename(path)}  [pipeline: {spec}]")
    instrument = Instrumentation(dump_options(args), source=source)
    print(format_rows(report(module, spec, instrument)))
    print(f"{kernel_count(module)}; the kernels column counts graph ops that "
          "make a kernel before convert-graph-to-loop, calls in @main after it")
    return 0


def cmd_pipelines(args: argparse.Namespace) -> int:
    from smelt.compiler import pipelines

    for target, level, spec in pipelines.all_presets(args.threads, args.cpu):
        print(f"{target} {level}: {spec}")
    return 0


def one_line(error: Exception) -> str:
    """A multi-line error (a list of problems) as one line for the terminal."""
    lines = [line.strip().removeprefix("- ") for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    if len(lines) <= 1:
        return "".join(lines)
    return lines[0] + " " + "; ".join(lines[1:])


def cmd_aot(args: argparse.Namespace) -> int:
    from smelt.compiler.triton_kernels import model_kernels
    from smelt.lowering.triton import aot

    arch = aot.parse_arch(args.arch)
    path = resolve_model(args.model)
    kernels = model_kernels(path, args.level, parse_shapes(args.input_shape))
    if args.output:
        written = aot.write_sources(kernels, args.output, os.path.basename(path)[:-5])
        print(f"wrote {written}")
    if args.no_compile:
        return 0
    flat = [k for fns in kernels.values() for k in fns]
    print(f"{os.path.basename(path)}: {len(flat)} triton kernels for sm_{arch}")
    rows = aot.compile_all(flat, arch, args.jobs)
    print(aot.format_table(rows, arch))
    return 0


def cmd_target(args: argparse.Namespace) -> int:
    from smelt.passes.target_attach_cpu import attach_pass
    from smelt.targets.cpu import CpuSchedule
    from smelt.targets.cpu_spec import CpuSpec

    spec = CpuSpec.parse(args.cpu)
    print(spec)
    print(f"  pipeline: {attach_pass(spec)}")
    print(f"  llvm: cpu={spec.name} features={spec.llvm_features()}")
    sizes = CpuSchedule.for_spec(spec)
    print(f"  gemm: {sizes.mr}x{sizes.nr} micro-kernel ({sizes.width} lanes), "
          f"kc={sizes.kc} mc={sizes.mc} nc={sizes.nc}")
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    import smelt

    result = smelt.quantize(
        resolve_model(args.model), args.calibration, args.output, method=args.method,
        percentile=args.percentile, activations=args.activations,
        op_types=args.op_types, exclude=args.exclude, report=args.report,
        accuracy_budget=args.accuracy_budget, reduce_range=args.reduce_range,
    )
    print(result.format())
    print(f"wrote {args.output}")
    return 0


CPU_HELP = ("CPU to compile for: host (default) or an LLVM CPU name (x86-64-v3, "
            "x86-64-v4, znver5, skylake-avx512, …), feature edits may follow: "
            "znver5,-avx512f")


CONSTANT_HELP = ("fix an input to a value (a number or V1,V2,…): its If conditions "
                 "and shapes fold at compile time")


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose a CPU pipeline, as `smelt run` takes them (`smelt
    run`, `report`, `show`); `pipeline_of` resolves them."""
    parser.add_argument("--level", default="O2", help="preset pipeline O0…O3")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (presets)")
    parser.add_argument("--cpu", default="host", help=CPU_HELP)
    parser.add_argument("-p", "--pipeline", help="explicit pass pipeline (default: "
                        "the preset of --level for --cpu and --threads)")
    parser.add_argument("--precision", default="f32", choices=["f32", "bf16", "f16"],
                        help="store weights and activations as bf16 / f16 "
                        "(quant-cast; f32 inputs, outputs and accumulation; "
                        "contractions compute in f32 except bf16 matmuls with "
                        "constant weights, vdpbf16ps where the CPU has avx512bf16)")


def pipeline_of(args: argparse.Namespace) -> str:
    """The CPU pipeline `add_pipeline_arguments`' flags choose: what `smelt run`
    compiles with for the same flags."""
    from smelt.compiler.options import CompileOptions

    options = CompileOptions(
        target="cpu", pipeline=args.pipeline, level=args.level,
        threads=args.threads, cpu=args.cpu, precision=args.precision,
    )  # fmt: skip
    return options.resolved_pipeline()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand (with `command`, the one that will run: the
    others may leave out arguments that are slow to define)."""
    parser = argparse.ArgumentParser(prog="smelt", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="compile a model, run it, print its outputs")
    run.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                     help=f"an .onnx path or a light_* model name (default {DEFAULT_MODEL})")
    run.add_argument("--inputs", help=".npz file of inputs by name (default: random)")
    run.add_argument("--input-shape", action="append", default=[],
                     metavar="NAME=DxD…", help="fix the dims of an input")
    run.add_argument("--constant", action="append", default=[], metavar="NAME=VALUE",
                     help=CONSTANT_HELP)
    run.add_argument("--target", default="cpu", choices=["cpu", "gpu"],
                     help="where the model runs (default cpu)")
    add_pipeline_arguments(run)
    run.add_argument("-o", "--output", help="write the outputs to this .npz")
    run.add_argument("--check", action="store_true", help="compare with onnxruntime")
    run.add_argument("--random-weights", type=int, metavar="SEED",
                     help="replace the float weights by seeded random ones (He "
                     "init; the light_* models ship constant fills, whose outputs "
                     "say little), and add the logits as an output")
    run.add_argument("--tolerance", type=float,
                     help="--check's bound on max |smelt - onnxruntime| / max "
                     "|onnxruntime| (default by --precision: f32 1e-4, bf16 2^-4 "
                     "= 0.0625, f16 2^-7 = 0.0078); on a quantized (QDQ) model, "
                     "in output quantization steps (default 1)")
    run.add_argument("--no-check-model", action="store_true",
                     help="skip onnx's full checker (it refuses a few valid models)")
    run.add_argument("--profile", type=non_negative, default=0, metavar="RUNS",
                     help="time every kernel over RUNS more runs (cpu)")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="no progress line while compiling (none without a terminal)")
    run.add_argument("--memory-limit", type=memory_size, default=0, metavar="SIZE",
                     help=MEMORY_LIMIT_HELP)
    run.add_argument("--no-tf32", action="store_true",
                     help="gpu: f32 matmuls and convs multiply in f32, not as tf32")
    add_dump_arguments(run)
    run.set_defaults(func=cmd_run)
    tgt = sub.add_parser("target", help="what smelt knows of a CPU (default: this one)")
    tgt.add_argument("--cpu", default="host", help=CPU_HELP)
    tgt.set_defaults(func=cmd_target)
    rep = sub.add_parser("report", help="op / kernel counts and traffic after each pass")
    rep.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    rep.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD…")
    rep.add_argument("--constant", action="append", default=[], metavar="NAME=VALUE",
                     help=CONSTANT_HELP)
    add_pipeline_arguments(rep)
    add_dump_arguments(rep)
    rep.set_defaults(func=cmd_report)
    pipe = sub.add_parser("pipelines", help="every preset pipeline (target × level), "
                          "each one runnable as smelt-opt -p '…'")
    pipe.add_argument("--cpu", default="host", help=CPU_HELP)
    pipe.add_argument("--threads", type=int, default=1, help="CPU threads")
    pipe.set_defaults(func=cmd_pipelines)
    ahead = sub.add_parser(
        "aot", help="compile every GPU kernel of a model ahead of time (no GPU needed)"
    )
    ahead.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    ahead.add_argument("--arch", default="sm_90", help="GPU architecture (sm_90)")
    ahead.add_argument("--target", default="gpu", choices=["gpu"])
    ahead.add_argument("--level", default="O2", help="preset pipeline O0…O3")
    ahead.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD…")
    ahead.add_argument("-o", "--output", metavar="DIR",
                       help="write the generated Triton source to DIR as a .py module")
    ahead.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                       help="compile in this many processes (default: all cores)")
    ahead.add_argument("--no-compile", action="store_true",
                       help="only write the source (with -o)")
    ahead.set_defaults(func=cmd_aot)
    add_quantize_parser(sub, command in (None, "quantize"))
    add_compile_parser(sub)
    from smelt.compiler.explore import add_explore_parser
    from smelt.compiler.show import add_show_parser

    add_explore_parser(sub)
    add_show_parser(sub)
    for name in ("run", "compile"):
        sub.choices[name].add_argument(
            "--remarks", action="store_true",
            help="print why passes left ops alone (missed-optimization remarks, as "
            "MLIR's -Rpass-missed), by pass and reason, with kernels and ONNX "
            "nodes (none from a build loaded from the cache: no pass ran)",
        )  # fmt: skip
    for command in sub.choices.values():
        command.add_argument("--debug", action="store_true",
                             help="print the traceback of an internal error")
    return parser


def add_quantize_parser(sub, arguments: bool = True) -> None:
    """The quantize subcommand; its `arguments` only when it may run (they import
    onnx, a second of `smelt --help`)."""
    q = sub.add_parser("quantize", help="post-training int8 quantization (QDQ model)")
    q.set_defaults(func=cmd_quantize)
    if not arguments:
        return
    from smelt.quantize.calibration import METHODS
    from smelt.quantize.qdq import DEFAULT_OP_TYPES

    q.add_argument("model", help="an .onnx path or a light_* model name")
    q.add_argument("--calibration", required=True, metavar="DATA",
                   help=".npz of (N, *input_shape) arrays per input, or a folder "
                        "of per-sample .npz files")
    q.add_argument("-o", "--output", required=True, help="the QDQ .onnx to write")
    q.add_argument("--method", default="minmax", choices=METHODS)
    q.add_argument("--percentile", type=float, default=99.99,
                   help="for --method percentile (default 99.99)")
    q.add_argument("--activations", default="u8", choices=["u8", "s8"],
                   help="u8 asymmetric (default) or s8 symmetric activations")
    q.add_argument("--op-types", nargs="+", default=list(DEFAULT_OP_TYPES),
                   metavar="OP", help="op types to quantize (default Conv MatMul Gemm)")
    q.add_argument("--exclude", nargs="+", default=[], metavar="NODE",
                   help="node names kept in f32")
    q.add_argument("--report", action="store_true",
                   help="bytes, per-tensor SQNR, output cosine / max error")
    q.add_argument("--reduce-range", action="store_true",
                   help="7-bit weights (as onnxruntime's reduce_range): faster "
                        "int8 on CPUs without VNNI (AVX2), a little less accurate")
    q.add_argument("--accuracy-budget", metavar="TARGET",
                   help="output SQNR in dB (30) or cos=0.999: the most sensitive "
                        "layers stay f32 until it holds")


def with_remarks(args: argparse.Namespace) -> int:
    """Runs the command; with --remarks, collects the remarks of the passes it
    runs (smelt.passes.remarks) and prints them grouped after it."""
    if not getattr(args, "remarks", False):
        return args.func(args)
    from smelt.passes import remarks

    with remarks.collect() as missed:
        code = args.func(args)
    print(remarks.format_grouped(missed))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    # `smelt run FILE.smelt` parses its few flags alone: the full parser imports onnx
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv else ""
    args = artifact_run_args(argv) or build_parser(command).parse_args(argv)
    try:
        with internal_errors(f"smelt {args.command}"):
            return with_remarks(args)
    except SmeltError as e:
        if args.debug and isinstance(e, InternalError):
            print(e.details, file=sys.stderr, end="")
        print(f"smelt: error: {one_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
