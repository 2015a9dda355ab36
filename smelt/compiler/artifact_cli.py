"""`smelt compile MODEL -o FILE.smelt` and `smelt run FILE.smelt`: compile once,
run many times without compiling (the run path imports neither xdsl nor onnx,
unless --check asks onnxruntime)."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Sequence

from smelt.compiler.cli_options import (
    BUILD,
    DEFAULT_MODEL,
    add_compile_options,
    add_dump_arguments,
    add_remarks_argument,
    add_run_arguments,
    given_options,
)


def add_compile_parser(sub) -> None:
    """The `smelt compile` subcommand (the compile options of `smelt run`)."""
    c = sub.add_parser("compile", help="compile a model (cpu) into an artifact that "
                       "`smelt run FILE` and smelt.load(FILE) run without compiling")
    c.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help="an .onnx path or a light_* model name (default "
                   f"{DEFAULT_MODEL})")
    c.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the artifact to write (by convention FILE.smelt)")
    c.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line while compiling (none without a terminal)")
    c.add_argument("--profile", action="store_true",
                   help="keep kernel timers in the code: smelt run FILE --profile "
                   "RUNS then times every kernel")
    c.add_argument("--sign", metavar="KEY.pem",
                   help="sign the artifact with this Ed25519 private key (openssl "
                   "genpkey -algorithm ed25519 -out KEY.pem); smelt run --trust-key "
                   "KEY.pub then runs it")
    add_compile_options(c, BUILD)
    add_dump_arguments(c)
    add_remarks_argument(c)
    c.set_defaults(func=cmd_compile)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_record(path: str, args: argparse.Namespace) -> dict:
    """What `smelt run FILE.smelt --check` needs to ask onnxruntime: the model's
    path and sha256, its --random-weights seed and --constant items."""
    return {"model": os.path.abspath(path), "sha256": file_sha256(path),
            "random_weights": args.random_weights, "constants": list(args.constant)}


def cmd_compile(args: argparse.Namespace) -> int:
    from smelt.compiler import entry
    from smelt.compiler.cli_inputs import compile_inputs, resolve_model
    from smelt.compiler.cli_options import compile_kwargs, dump_options, progress_quiet
    from smelt.compiler.progress import shown
    from smelt.compiler.stats import format_summary
    from smelt.runtime import artifact

    path = resolve_model(args.model)
    source, shapes, constants = compile_inputs(args, path)
    t0 = time.perf_counter()
    with shown(os.path.basename(path), progress_quiet(args)) as progress:
        model = entry.compile(
            source, "cpu", input_shapes=shapes, constants=constants,
            base_dir=os.path.dirname(os.path.abspath(path)), profile=args.profile,
            dump=dump_options(args), progress=progress, **compile_kwargs(args),
        )  # fmt: skip
    seconds = time.perf_counter() - t0
    extra = {"source": source_record(path, args)}
    written = artifact.save(model, args.output, extra, sign=args.sign)
    cached = f" (cache {model.info['cache']})" if "cache" in model.info else ""
    print(f"compiled {os.path.basename(path)} in {seconds:.2f} s{cached} → "
          f"{written} ({os.path.getsize(written) / 2**20:.1f} MiB)")
    if model.info.get("stats"):
        print(f"  {format_summary(model.info['stats'])}")
    print(f"  cpu {model.info['cpu']}")
    print(f"  pipeline: {model.info['pipeline']}")
    return 0


def run_parser() -> argparse.ArgumentParser:
    """`smelt run`'s parser on its own (the subcommand of the full one is made by
    the same `add_run_arguments`)."""
    parser = argparse.ArgumentParser(prog="smelt run")
    add_run_arguments(parser)
    return parser


def artifact_run_args(argv: Sequence[str] | None) -> argparse.Namespace | None:
    """The parsed arguments of `smelt run FILE` when FILE is an artifact (then
    nothing else needs parsing: the full parser imports xdsl), else None."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["run"]:
        return None
    from smelt.runtime.artifact import SUFFIX

    words = [a for a in argv[1:] if not a.startswith("-")]
    if not any(w.endswith(SUFFIX) or _is_artifact(w) for w in words):
        return None
    args = run_parser().parse_args(argv[1:])
    if not _is_artifact(args.model) and not args.model.endswith(SUFFIX):
        return None  # an .smelt word was an option's value: the full parser's
    args.command, args.func = "run", cmd_run_artifact
    return args


def _is_artifact(word: str) -> bool:
    from smelt.runtime.artifact import is_artifact

    return os.path.isfile(word) and is_artifact(word)


BUILT = ("compile options", "pass instrumentation (IR dumps go to stderr)")


def cmd_run_artifact(args: argparse.Namespace) -> int:
    from smelt.compiler.cli_inputs import load_inputs, random_inputs
    from smelt.compiler.cli_output import print_profile, run_and_show
    from smelt.errors import SmeltError
    from smelt.runtime.artifact import load

    name = os.path.basename(args.model)
    built = given_options(run_parser(), args, BUILT) + ["--remarks"] * args.remarks
    built += ["--dim"] * bool(getattr(args, "dim", None))  # an artifact is static
    if built:
        raise SmeltError(
            f"{', '.join(built)} decide{'s' * (len(built) == 1)} a build, and "
            f"'{name}' is built already: give {'it' if len(built) == 1 else 'them'} "
            "to smelt compile, or run the .onnx model"
        )
    t0 = time.perf_counter()
    model = load(args.model, trust=args.trust or args.trust_key)
    print(f"loaded {name} in {time.perf_counter() - t0:.3f} s  "
          f"[pipeline: {model.info['pipeline']}]")
    print(f"  cpu {model.info['cpu']}")
    print(f"  signer {model.info['signer']}")
    feeds = load_inputs(args.inputs) if args.inputs else random_inputs(model)
    outputs = run_and_show(model, feeds, args.output)
    if args.profile:
        if not model.info["manifest"]["program"].get("profiled_calls"):
            raise SmeltError(
                f"'{name}' has no kernel timers: compile it with smelt compile "
                "--profile to time its kernels"
            )
        print_profile(model, feeds, args.profile)
    if args.check:
        return check_artifact(model, name, feeds, outputs, args.tolerance)
    return 0


def check_artifact(model, name: str, feeds, outputs, tolerance) -> int:
    """--check of an artifact: against the model that `smelt compile` recorded
    in it (`source_record`), if that file is still what was compiled."""
    from smelt.compiler.cli_inputs import onnx_load, parse_constants
    from smelt.compiler.cli_output import check_outputs
    from smelt.errors import SmeltError

    manifest = model.info["manifest"]
    record = manifest.get("source")
    if not isinstance(record, dict) or "model" not in record:
        raise SmeltError(
            f"--check needs the ONNX model that '{name}' was compiled from, and it "
            "does not name one (smelt compile records it): run smelt run MODEL.onnx "
            "--check with the compile's flags"
        )
    path = record["model"]
    if not os.path.isfile(path):
        raise SmeltError(f"--check: '{path}', the model '{name}' was compiled from, "
                         "is gone: compile it again, or run smelt run MODEL --check")
    if file_sha256(path) != record.get("sha256"):
        raise SmeltError(f"--check: '{path}' changed since '{name}' was compiled "
                         "from it: compile it again")
    source = path
    if record.get("random_weights") is not None:
        from smelt.frontend.random_weights import random_weights

        proto = random_weights(onnx_load(path), record["random_weights"])
        source = proto.SerializeToString()
    precision = (manifest.get("options") or {}).get("precision", "f32")
    constants = parse_constants(record.get("constants") or [])
    return check_outputs(source, feeds, outputs, tolerance, precision, constants)
