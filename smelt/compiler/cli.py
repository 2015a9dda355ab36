"""The `smelt` command: `smelt run MODEL [--check]`, `smelt report MODEL [-p ...]`,
`smelt quantize MODEL --calibration DATA -o OUT`, `smelt compile MODEL -o FILE`."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from smelt.compiler.artifact_cli import (
    add_compile_parser,
    artifact_run_args,
    cmd_run_artifact,
)
from smelt.compiler.cli_inputs import (  # tests and benchmarks import some from here
    DEFAULT_MODEL,
    check_input_names,
    compile_inputs,
    load_inputs,
    parse_constants,
    parse_shapes,
    random_inputs,
    resolve_model,
)
from smelt.compiler.cli_options import (
    CPU_HELP,
    INSPECT,
    VersionAction,
    add_compile_options,
    add_dump_arguments,
    add_run_arguments,
    compile_kwargs,
    dump_options,
    one_line,
    pipeline_of,
    progress_quiet,
)
from smelt.compiler.cli_output import (  # test_cli imports one of them from here
    check_against_onnxruntime,  # noqa: F401
    check_outputs,
    print_profile,
    run_and_show,
)
from smelt.errors import InternalError, SmeltError, internal_errors


def cmd_run(args: argparse.Namespace) -> int:
    from smelt.compiler import entry
    from smelt.compiler.progress import shown
    from smelt.compiler.stats import format_summary
    from smelt.runtime.artifact import is_artifact

    if os.path.isfile(args.model) and is_artifact(args.model):
        return cmd_run_artifact(args)
    if args.trust or args.trust_key:
        raise SmeltError("--trust and --trust-key choose which FILE.smelt artifacts "
                         f"run; '{args.model}' is an ONNX model: drop them")
    path = resolve_model(args.model)
    feeds = load_inputs(args.inputs) if args.inputs else None
    source, shapes, constants = compile_inputs(args, path, feeds)
    t0 = time.perf_counter()
    with shown(os.path.basename(path), progress_quiet(args)) as progress:
        model = entry.compile(
            source, args.target, input_shapes=shapes, constants=constants,
            base_dir=os.path.dirname(os.path.abspath(path)),
            profile=bool(args.profile), dump=dump_options(args), progress=progress,
            **compile_kwargs(args),
        )  # fmt: skip
    cached = f" (cache {model.info['cache']})" if "cache" in model.info else ""
    print(f"compiled {os.path.basename(path)} for {args.target} in "
          f"{time.perf_counter() - t0:.2f} s{cached}  "
          f"[pipeline: {model.info['pipeline']}]")
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
        return check_outputs(
            source, feeds, outputs, args.tolerance, args.precision, constants
        )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from smelt.compiler.instrument import Instrumentation
    from smelt.compiler.report import format_rows, report
    from smelt.compiler.runner import import_graph
    from smelt.compiler.stats import kernel_count

    path = resolve_model(args.model)
    shapes, constants = parse_shapes(args.input_shape), parse_constants(args.constant)
    check_input_names(path, shapes, constants)

    def source():  # a crash re-imports the model: no copy of it held meanwhile
        return import_graph(path, shapes, constants=constants, check_model=False)

    module = import_graph(
        path, shapes, constants=constants, check_model=not args.no_check_model
    )
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
    from smelt.quantize import quantize

    result = quantize(
        resolve_model(args.model), args.calibration, args.output, method=args.method,
        percentile=args.percentile, activations=args.activations,
        op_types=args.op_types, exclude=args.exclude, report=args.report,
        accuracy_budget=args.accuracy_budget, reduce_range=args.reduce_range,
    )
    print(result.format())
    print(f"wrote {args.output}")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand (with `command`, the one that will run: the
    others may leave out arguments that are slow to define)."""
    parser = argparse.ArgumentParser(prog="smelt", description=__doc__)
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="compile a model (or load FILE.smelt), run "
                         "it, print its outputs")
    add_run_arguments(run)
    run.set_defaults(func=cmd_run)
    tgt = sub.add_parser("target", help="what smelt knows of a CPU (default: this one)")
    tgt.add_argument("--cpu", default="host", help=CPU_HELP)
    tgt.set_defaults(func=cmd_target)
    rep = sub.add_parser("report", help="op / kernel counts and traffic after each pass")
    rep.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                     help=f"an .onnx path or a light_* model name (default "
                     f"{DEFAULT_MODEL})")
    add_compile_options(rep, INSPECT)
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
    ahead.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                       help=f"an .onnx path or a light_* model name (default "
                       f"{DEFAULT_MODEL})")
    ahead.add_argument("--arch", default="sm_90",
                       help="GPU architecture to compile for (default sm_90)")
    add_compile_options(ahead, ("input_shape", "level", "target"), target={
        "default": "gpu", "choices": ["gpu"],
        "help": "aot compiles the gpu target's Triton kernels (the only choice)"})
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
    for name, command in sub.choices.items():
        if name != "run":  # add_run_arguments has it
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
    q.add_argument("--method", default="minmax", choices=METHODS,
                   help="how calibration picks each activation's range: minmax "
                   "(the extremes seen; default), percentile (--percentile of the "
                   "values) or entropy (the KL-divergence threshold, as TensorRT)")
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
