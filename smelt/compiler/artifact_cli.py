"""`smelt compile MODEL -o FILE.smelt` and `smelt run FILE.smelt`: compile once,
run many times without compiling (the run path imports neither xdsl nor onnx)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence


def add_compile_parser(sub) -> None:
    """The `smelt compile` subcommand (the flags of `smelt run` that decide a build)."""
    from smelt.compiler.cli import (
        CONSTANT_HELP,
        CPU_HELP,
        DEFAULT_MODEL,
        MEMORY_LIMIT_HELP,
        add_dump_arguments,
        memory_size,
    )

    c = sub.add_parser("compile", help="compile a model (cpu) into an artifact that "
                       "`smelt run FILE` and smelt.load(FILE) run without compiling")
    c.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help="an .onnx path or a light_* model name (default "
                   f"{DEFAULT_MODEL})")
    c.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the artifact to write (by convention FILE.smelt)")
    c.add_argument("--input-shape", action="append", default=[],
                   metavar="NAME=DxD…", help="fix the dims of an input")
    c.add_argument("--constant", action="append", default=[], metavar="NAME=VALUE",
                   help=CONSTANT_HELP)
    c.add_argument("--level", default="O2", help="preset pipeline O0…O3")
    c.add_argument("--threads", type=int, default=1, help="CPU threads (presets)")
    c.add_argument("--cpu", default="host", help=CPU_HELP)
    c.add_argument("-p", "--pipeline", help="explicit pass pipeline")
    c.add_argument("--precision", default="f32", choices=["f32", "bf16", "f16"],
                   help="store weights and activations as bf16 / f16 (quant-cast)")
    c.add_argument("--opt-level", type=int, default=3, choices=[0, 1, 2, 3],
                   help="LLVM's optimization level (default 3)")
    c.add_argument("--fast-math", action="store_true",
                   help="let LLVM reassociate float ops (reductions vectorize)")
    c.add_argument("--no-check-model", action="store_true",
                   help="skip onnx's full checker (it refuses a few valid models)")
    c.add_argument("--cache", nargs="?", const=True, default=None, metavar="DIR",
                   help="take the build from the compile cache, or put it there "
                   "(default DIR ~/.cache/smelt)")
    c.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line while compiling (none without a terminal)")
    c.add_argument("--memory-limit", type=memory_size, default=0, metavar="SIZE",
                   help=MEMORY_LIMIT_HELP)
    c.add_argument("--sign", metavar="KEY.pem",
                   help="sign the artifact with this Ed25519 private key (openssl "
                   "genpkey -algorithm ed25519 -out KEY.pem); smelt run --trust-key "
                   "KEY.pub then runs it")
    add_dump_arguments(c)
    c.set_defaults(func=cmd_compile)


def cmd_compile(args: argparse.Namespace) -> int:
    import smelt
    from smelt.compiler.cli import (
        dump_options,
        parse_constants,
        parse_shapes,
        progress_quiet,
        resolve_model,
    )
    from smelt.compiler.progress import shown
    from smelt.compiler.report import format_summary
    from smelt.runtime import artifact

    path = resolve_model(args.model)
    t0 = time.perf_counter()
    with shown(os.path.basename(path), progress_quiet(args)) as progress:
        model = smelt.compile(
            path, "cpu", input_shapes=parse_shapes(args.input_shape),
            level=args.level, constants=parse_constants(args.constant),
            threads=args.threads, cpu=args.cpu,
            check_model=not args.no_check_model, precision=args.precision,
            opt_level=args.opt_level, fast_math=args.fast_math, cache=args.cache,
            memory_limit=args.memory_limit, dump=dump_options(args), progress=progress,
            **({"pipeline": args.pipeline} if args.pipeline else {}),
        )  # fmt: skip
    seconds = time.perf_counter() - t0
    written = artifact.save(model, args.output, sign=args.sign)
    cached = f" (cache {model.info['cache']})" if "cache" in model.info else ""
    print(f"compiled {os.path.basename(path)} in {seconds:.2f} s{cached} → "
          f"{written} ({os.path.getsize(written) / 2**20:.1f} MiB)")
    if model.info.get("stats"):
        print(f"  {format_summary(model.info['stats'])}")
    print(f"  cpu {model.info['cpu']}")
    print(f"  pipeline: {model.info['pipeline']}")
    return 0


def artifact_run_args(argv: Sequence[str] | None) -> argparse.Namespace | None:
    """The parsed arguments of `smelt run FILE` when FILE is an artifact (then
    nothing else needs parsing: the full parser imports onnx), else None."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["run"]:
        return None
    from smelt.runtime.artifact import SUFFIX, is_artifact

    words = [a for a in argv[1:] if not a.startswith("-")]
    named = any(w.endswith(SUFFIX) for w in words)
    if not named and not (words and os.path.isfile(words[0]) and is_artifact(words[0])):
        return None
    parser = argparse.ArgumentParser(
        prog="smelt run", description="run a compiled artifact (smelt compile -o)"
    )
    parser.add_argument("artifact", help=f"a FILE{SUFFIX} written by smelt compile")
    parser.add_argument("--inputs",
                        help=".npz file of inputs by name (default: random)")
    parser.add_argument("-o", "--output", help="write the outputs to this .npz")
    trust = parser.add_mutually_exclusive_group()
    trust.add_argument("--trust", action="store_true",
                       help="run the artifact's native code though it is unsigned "
                       "or signed by a key not named (you trust where it came from)")
    trust.add_argument("--trust-key", action="append", metavar="KEY.pub",
                       help="run it only if this Ed25519 public key signed it "
                       "(repeatable)")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an internal error")
    args = parser.parse_args(argv[1:])
    args.command, args.func = "run", cmd_run_artifact
    return args


def cmd_run_artifact(args: argparse.Namespace) -> int:
    import smelt
    from smelt.compiler.cli_inputs import load_inputs, random_inputs
    from smelt.compiler.cli_output import run_and_show

    t0 = time.perf_counter()
    model = smelt.load(args.artifact, trust=args.trust or args.trust_key)
    print(f"loaded {os.path.basename(args.artifact)} in "
          f"{time.perf_counter() - t0:.3f} s  [pipeline: {model.info['pipeline']}]")
    print(f"  cpu {model.info['cpu']}")
    print(f"  signer {model.info['signer']}")
    feeds = load_inputs(args.inputs) if args.inputs else random_inputs(model)
    run_and_show(model, feeds, args.output)
    return 0
