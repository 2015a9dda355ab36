"""The options of the `smelt` subcommands, declared once: what decides a build
(`add_compile_options`, read back by `compile_kwargs` / `pipeline_of`), what a
run does with the result (`add_run_options`: `smelt run MODEL` and `smelt run
FILE.smelt` alike), the pass instrumentation flags (`add_dump_arguments`) and
`--version`. Only argparse here: `smelt run FILE.smelt` parses with these
without importing onnx or xdsl."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

DEFAULT_MODEL = "light_resnet50"

CPU_HELP = ("CPU to compile for: host (default) or an LLVM CPU name (x86-64-v3, "
            "x86-64-v4, znver5, skylake-avx512, …), feature edits may follow: "
            "znver5,-avx512f")
CONSTANT_HELP = ("fix an input to a value (a number or V1,V2,…): its If conditions "
                 "and shapes fold at compile time (repeat per input)")
MEMORY_LIMIT_HELP = ("refuse a model whose arena, weights, inputs and outputs need "
                     "more than SIZE (8G, 512M, …; binary units; default: this "
                     "machine's memory)")
LEVELS = ("O0", "O1", "O2", "O3")


def memory_size(text: str) -> int:
    """`--memory-limit`'s value: bytes from 8G, 512M, 1.5G, 4096 (binary units)."""
    from smelt.errors import SmeltError
    from smelt.targets.memory import parse_size

    try:
        return parse_size(text)
    except SmeltError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _option(*flags: str, **kwargs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, kwargs


COMPILE_OPTIONS = {
    "input_shape": _option(
        "--input-shape", action="append", default=[], metavar="NAME=DxD…",
        help="fix the dims of an input, e.g. data_0=1x3x224x224 (repeat per input)"),
    "constant": _option(
        "--constant", action="append", default=[], metavar="NAME=VALUE",
        help=CONSTANT_HELP),
    "target": _option(
        "--target", default="cpu", choices=["cpu", "gpu"],
        help="where the model runs: cpu (LLVM, this machine) or gpu (Triton, a CUDA "
        "GPU) (default cpu)"),
    "level": _option(
        "--level", default="O2", choices=LEVELS,
        help="the preset pipeline (default O2; `smelt pipelines` prints them)"),
    "threads": _option(
        "--threads", type=int, default=1, metavar="N",
        help="CPU threads the preset pipelines parallelize over (default 1)"),
    "cpu": _option("--cpu", default="host", help=CPU_HELP),
    "pipeline": _option(
        "-p", "--pipeline", metavar="PIPELINE",
        help="explicit pass pipeline ('pass1,pass2{opt=v},…'), or a preset name "
        "(O0…O3) as --level takes it (default: the --level preset for --cpu, "
        "--threads and --precision)"),
    "precision": _option(
        "--precision", default="f32", choices=["f32", "bf16", "f16"],
        help="store weights and activations as bf16 / f16 (quant-cast; f32 inputs, "
        "outputs and accumulation; contractions compute in f32, except matmuls "
        "with constant weights and group-1 convs as vdpbf16ps GEMMs where the "
        "CPU's bf16 dot beats f32: Zen 4 / 5)"),
    "random_weights": _option(
        "--random-weights", type=int, metavar="SEED",
        help="replace the float weights by seeded random ones (He init; the light_* "
        "models ship constant fills, whose outputs say little), and add the logits "
        "as an output"),
    "opt_level": _option(
        "--opt-level", type=int, default=3, choices=[0, 1, 2, 3],
        help="LLVM's optimization level (cpu; default 3)"),
    "fast_math": _option(
        "--fast-math", action="store_true",
        help="let LLVM reassociate float ops (cpu; reductions vectorize, results "
        "may differ in the last bits)"),
    "cache": _option(
        "--cache", nargs="?", const=True, default=None, metavar="DIR",
        help="take the build from the compile cache, or put it there (cpu; default "
        "DIR ~/.cache/smelt)"),
    "no_check_model": _option(
        "--no-check-model", action="store_true",
        help="skip onnx's full checker (it refuses a few valid models)"),
    "memory_limit": _option(
        "--memory-limit", type=memory_size, default=0, metavar="SIZE",
        help=MEMORY_LIMIT_HELP),
    "no_tf32": _option(
        "--no-tf32", action="store_true",
        help="gpu: f32 matmuls and convs multiply in f32, not as tf32"),
}  # fmt: skip
"""Every flag that decides a build, by its argparse dest."""

PIPELINE_OPTIONS = ("level", "threads", "cpu", "pipeline", "precision")
"""The flags that choose the CPU pipeline (`pipeline_of`)."""

BUILD = (
    "input_shape", "constant", *PIPELINE_OPTIONS, "random_weights", "opt_level",
    "fast_math", "cache", "no_check_model", "memory_limit",
)  # fmt: skip
"""The flags of a cpu build: `smelt compile`'s; `smelt run` adds --target and
--no-tf32."""

INSPECT = ("input_shape", "constant", *PIPELINE_OPTIONS, "no_check_model")
"""The flags of `smelt report` and `smelt show`: they run the CPU pipeline that
`smelt run` would for the same flags, without generating code."""


def add_compile_options(
    parser: argparse.ArgumentParser, names: Sequence[str] = BUILD, **defaults: Any
) -> argparse._ArgumentGroup:
    """Adds the compile options `names` (keys of COMPILE_OPTIONS) to `parser` as
    one group; `defaults` overrides their declared default / choices by dest
    (`target={"choices": ["gpu"], "default": "gpu"}`)."""
    group = parser.add_argument_group("compile options")
    for name in names:
        flags, kwargs = COMPILE_OPTIONS[name]
        group.add_argument(*flags, **{**kwargs, **defaults.get(name, {})})
    return group


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """What a run does with a model, compiled now or loaded from FILE.smelt:
    `smelt run`'s flags that are not compile options."""
    group = parser.add_argument_group("run options (an .onnx model or a FILE.smelt)")
    group.add_argument("--inputs", metavar="FILE.npz",
                       help=".npz file of inputs by name (default: random)")
    group.add_argument("--dim", action="append", default=[], type=run_time_dim,
                       metavar="NAME=MIN:MAX[:OPT]",
                       help="compile once for a run-time leading dim (the inputs' "
                       "ONNX dim_param NAME, e.g. batch=1:64:8): any value in "
                       "[MIN, MAX] runs without a recompile, kernels tuned for "
                       "blocks of OPT rows (default min(MAX, 8)); --inputs may "
                       "then have any NAME in range (random inputs: OPT)")
    group.add_argument("-o", "--output", metavar="FILE.npz",
                       help="write the outputs to this .npz")
    group.add_argument("--check", action="store_true",
                       help="compare the outputs with onnxruntime's (FILE.smelt: "
                       "with the model that smelt compile recorded)")
    group.add_argument("--tolerance", type=float, metavar="BOUND",
                       help="--check's bound on max |smelt - onnxruntime| / max "
                       "|onnxruntime| (default by --precision: f32 1e-4, bf16 2^-4 "
                       "= 0.0625, f16 2^-7 = 0.0078); on a quantized (QDQ) model, "
                       "in output quantization steps (default 1)")
    group.add_argument("--profile", type=non_negative, default=0, metavar="RUNS",
                       help="time every kernel over RUNS more runs (cpu; FILE.smelt: "
                       "one that smelt compile --profile wrote)")
    group.add_argument("-q", "--quiet", action="store_true",
                       help="no progress line while compiling (none without a "
                       "terminal)")
    trust = group.add_mutually_exclusive_group()
    trust.add_argument("--trust", action="store_true",
                       help="FILE.smelt: run its native code though it is unsigned "
                       "or signed by a key not named (you trust where it came from)")
    trust.add_argument("--trust-key", action="append", metavar="KEY.pub",
                       help="FILE.smelt: run it only if this Ed25519 public key "
                       "signed it (repeatable)")


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


def level_and_pipeline(args: argparse.Namespace) -> tuple[str, str | None]:
    """--level and -p, with `-p O2` read as the preset it names (as `smelt explore
    --base O2`)."""
    pipeline = getattr(args, "pipeline", None)
    if pipeline is not None and pipeline.strip() in LEVELS:
        return pipeline.strip(), None
    return getattr(args, "level", "O2"), pipeline


def run_time_dim(text: str) -> tuple[str, int, int, int | None]:
    """--dim NAME=MIN:MAX[:OPT] -> (NAME, MIN, MAX, OPT or None)."""
    name, _, bounds = text.partition("=")
    parts = bounds.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if not name or len(numbers) not in (2, 3) or not 1 <= numbers[0] <= numbers[1]:
        raise argparse.ArgumentTypeError(
            f"--dim {text!r}: expected NAME=MIN:MAX[:OPT] with 1 <= MIN <= MAX "
            "(e.g. batch=1:64:8)"
        )
    opt = numbers[2] if len(numbers) == 3 else None
    return name, numbers[0], numbers[1], opt


def compile_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """smelt.compile's keyword arguments of the compile options in `args` (all but
    --input-shape, --constant and --random-weights, which say what is compiled)."""
    level, pipeline = level_and_pipeline(args)
    kwargs: dict[str, Any] = {"level": level}
    if pipeline:
        kwargs["pipeline"] = pipeline
    for name in ("threads", "cpu", "precision", "opt_level", "fast_math", "cache",
                 "memory_limit"):  # fmt: skip
        if hasattr(args, name):
            kwargs[name] = getattr(args, name)
    if hasattr(args, "no_check_model"):
        kwargs["check_model"] = not args.no_check_model
    if getattr(args, "no_tf32", False):
        kwargs["tf32"] = False
    if getattr(args, "dim", None):  # smelt run --dim: the run-time dims path
        kwargs["dims"] = {name: (lo, hi) for name, lo, hi, _ in args.dim}
        kwargs["opt_dims"] = {
            name: opt for name, _, _, opt in args.dim if opt is not None
        }
    return kwargs


def pipeline_of(args: argparse.Namespace) -> str:
    """The CPU pipeline the PIPELINE_OPTIONS flags choose: what `smelt run`
    compiles with for the same flags (`smelt report`, `smelt show`)."""
    from smelt.compiler.options import CompileOptions

    level, pipeline = level_and_pipeline(args)
    options = CompileOptions(
        target="cpu", pipeline=pipeline, level=level,
        threads=args.threads, cpu=args.cpu, precision=args.precision,
    )  # fmt: skip
    return options.resolved_pipeline()


def given_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, titles: Sequence[str]
) -> list[str]:
    """The flags of `parser`'s argument groups titled `titles` that `args` sets to
    something other than their default (as the user wrote them)."""
    flags = []
    for group in parser._action_groups:
        if group.title not in titles:
            continue
        for action in group._group_actions:
            if getattr(args, action.dest, action.default) != action.default:
                flags.append(action.option_strings[-1])
    return flags


def one_line(error: Exception) -> str:
    """A multi-line error (a list of problems) as one line for the terminal."""
    lines = [line.strip().removeprefix("- ") for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    text = lines[0] if lines else ""
    for before, line in zip(lines, lines[1:]):  # "problems (2):" heads a list
        text += (" " if before.endswith(":") else "; ") + line
    return text


def version_text(prog: str) -> str:
    """smelt's version and those of the packages it builds on (read from their
    metadata: nothing is imported)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from smelt.version import __version__

    def of(package: str) -> str:
        try:
            return f"{package} {version(package)}"
        except PackageNotFoundError:
            return f"{package} (not installed)"

    parts = ", ".join(of(p) for p in ("xdsl", "llvmlite", "onnx"))
    return f"{prog} {__version__} ({parts}; python {platform.python_version()})"


class VersionAction(argparse.Action):
    """`--version`: prints `version_text` and exits (computed only when asked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        kwargs.setdefault("help", "print smelt's version and those of xdsl, "
                          "llvmlite and onnx, and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text(parser.prog.split()[0]))
        parser.exit()


RUN_DESCRIPTION = """Compile a model and run it once on random inputs (or --inputs),
printing its outputs; or run FILE.smelt, an artifact that `smelt compile -o
FILE.smelt` wrote, without compiling. Both take the run options; the compile
options and pass instrumentation apply to a model that is compiled here."""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Every argument of `smelt run`: the full parser's subcommand and the parser
    `smelt run FILE.smelt` uses alone (without importing onnx) are the same."""
    parser.description = RUN_DESCRIPTION
    parser.add_argument(
        "model", nargs="?", default=DEFAULT_MODEL,
        help=f"an .onnx path, a light_* model name (default {DEFAULT_MODEL}) or a "
        "FILE.smelt artifact (smelt compile -o)",
    )  # fmt: skip
    add_run_options(parser)
    add_compile_options(parser, (*BUILD, "target", "no_tf32"))
    add_dump_arguments(parser)
    add_remarks_argument(parser)
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an internal error")


def add_remarks_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--remarks", action="store_true",
        help="print why passes left ops alone (missed-optimization remarks, as "
        "MLIR's -Rpass-missed), by pass and reason, with kernels and ONNX nodes "
        "(none from a build loaded from the cache: no pass ran)",
    )  # fmt: skip
