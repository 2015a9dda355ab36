"""`smelt explore`: search pass orders, subsets and pass options on one model.

    P=graph-fold-batchnorm,graph-convert-layout{layout=nhwc},graph-simplify,graph-fuse
    smelt explore light_resnet50 --passes $P --orders 6
    smelt explore model.onnx --passes loop-schedule,loop-vectorize \\
        --option loop-schedule.mr=4,6 --executor ray

Candidate 0 is the base pipeline itself; each candidate (explore_space) is
compiled, checked against the oracle (explore_oracle: onnxruntime on the original
model and the same feeds, or the reference executor where onnxruntime cannot run
it) and timed by an executor (explore_exec: local processes or Ray). Written to
the output folder: `candidates.jsonl` (one replayable record per candidate: model
hash, full pipeline string, options, the oracle that judged it, metrics with the
seconds of each compile stage, its kernels' hashes and those that differ from the
base's, the passes' remarks), `table.txt` and `tradeoffs.png` (explore_report,
explore_plot).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Self

from smelt.errors import SmeltError

if TYPE_CHECKING:  # imported when used: `smelt --help` / `smelt run` stay light
    from smelt.compiler.explore_eval import Job
    from smelt.compiler.explore_exec import Executor
    from smelt.compiler.explore_space import Candidate


def base_pipeline(base: str, target: str, cpu: str) -> str:
    """`base`: a preset level (O0…O3) or a pipeline string, for `target`."""
    from smelt.compiler import pipelines

    if base in pipelines.PRESETS.get(target, {}):
        return pipelines.preset(target, base, 1, cpu)
    return pipelines.with_cpu(base, cpu) if target == "cpu" else base


def make_job(
    path: str,
    target: str = "cpu",
    *,
    input_shapes: dict | None = None,
    constants: dict | None = None,
    check_model: bool = True,
    tolerance: float = 1e-4,
    repeat: int = 10,
    seed: int = 0,
    oracle: str = "auto",
) -> Job:
    """The shared part of a search on the model at `path`: its bytes and hash,
    seeded random inputs and the oracle's outputs for them (`oracle`: "auto",
    "onnxruntime" or "reference", see explore_oracle)."""
    from smelt.compiler.cli_inputs import random_inputs
    from smelt.compiler.explore_eval import Job
    from smelt.compiler.explore_oracle import oracle_outputs
    from smelt.compiler.runner import import_graph, io_specs

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SmeltError(f"cannot read the model '{path}': {e}") from None
    base_dir = os.path.dirname(os.path.abspath(path))
    shapes = {k: tuple(v) for k, v in (input_shapes or {}).items()}
    constants = dict(constants or {})
    module = import_graph(data, shapes, base_dir, constants, check_model)
    feeds = random_inputs(SimpleNamespace(inputs=io_specs(module)[0]), seed)
    answer = oracle_outputs(path, module, feeds, constants, oracle)
    oracle_name = answer.oracle + (f" ({answer.why})" if answer.why else "")
    return Job(
        data, os.path.basename(path), hashlib.sha256(data).hexdigest(), target,
        base_dir, shapes, constants, check_model, feeds, answer.outputs, tolerance,
        repeat, oracle_name,
    )  # fmt: skip


def explore(
    job: Job,
    cands: Sequence[Candidate],
    executor: Executor,
    *,
    quiet: bool = False,
    header: dict[str, Any] | None = None,
) -> list[dict]:
    """Runs every candidate on `executor` with a progress bar (on a terminal,
    unless `quiet`); the records, by candidate number, each with `header`'s
    fields and a `replay` command (of header["model_path"])."""
    from smelt.compiler.explore_report import compare_kernels

    try:
        from tqdm import tqdm
    except ImportError:  # no bar (pip install 'smelt[explore]')
        quiet, tqdm = True, None
    records = []
    bar = tqdm(
        total=len(cands), desc="explore", unit="candidate", file=sys.stderr,
        disable=True if quiet else None, dynamic_ncols=True,
    ) if tqdm else _NoBar()  # fmt: skip
    with bar:
        for result in executor.results(job, cands):
            records.append({**(header or {}), **result})
            done = [r for r in records if "latency_ms" in r["metrics"]]
            best = min((r["metrics"]["latency_ms"] for r in done), default=None)
            bar.set_postfix_str(
                f"#{result['candidate']} {result['status']}"
                + (f", best {best:.2f} ms" if best is not None else "")
            )
            bar.update()
    model = (header or {}).get("model_path", job.name)
    for r in records:
        out = f"candidate-{r['candidate']}.smelt"
        r["replay"] = f"smelt compile {model} -p '{r['pipeline']}' -o {out}"
    records.sort(key=lambda r: r["candidate"])
    compare_kernels(records)
    return records


class _NoBar:
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def update(self) -> None:
        pass


def cmd_explore(args: argparse.Namespace) -> int:
    from smelt.compiler.cli_inputs import parse_constants, parse_shapes, resolve_model
    from smelt.compiler.explore_exec import make_executor
    from smelt.compiler.explore_report import (
        format_remarks,
        format_table,
        write_outputs,
    )
    from smelt.compiler.explore_space import (
        Candidate,
        candidates,
        explored_passes,
        parse_option_grid,
        pass_options,
        split_specs,
    )

    if args.list_options:
        for spec in explored_passes(args.passes):
            options = pass_options(spec.name)
            text = ", ".join(f"{o}: {t} = {d}" for o, t, d in options) or "(none)"
            print(f"{spec.name}: {text}")
        return 0
    path = resolve_model(args.model)
    folder = args.output or f"explore-{os.path.splitext(os.path.basename(path))[0]}"
    if args.random_weights is not None:
        path = _with_random_weights(path, args.random_weights, folder)
    base = base_pipeline(args.base, args.target, args.cpu)
    grid = parse_option_grid(args.option)
    cands = candidates(
        base, args.passes, args.orders, subsets=not args.no_subsets, grid=grid,
        seed=args.seed,
    )  # fmt: skip
    # candidate 0: the base pipeline, whose kernels the others are compared with
    cands.insert(0, Candidate(0, (), (), ",".join(map(str, split_specs(base)))))
    job = make_job(
        path, args.target, input_shapes=parse_shapes(args.input_shape),
        constants=parse_constants(args.constant), tolerance=args.tolerance,
        repeat=args.repeat, seed=args.seed, oracle=args.oracle,
    )  # fmt: skip
    explored = [str(p) for p in split_specs(args.passes)]
    executor = make_executor(args.executor, args.workers, args.ray_address)
    try:
        print(f"{job.name} (sha256 {job.sha256[:12]}): {len(cands) - 1} candidates "
              f"and the base, {executor.describe()}")
        print(f"oracle: {job.oracle}")
        model_path = args.model if args.random_weights is None else path
        header = {"model": job.name, "model_path": model_path,
                  "model_sha256": job.sha256, "oracle": job.oracle,
                  "target": args.target, "base": base, "explored": explored,
                  "smelt_version": _version(), "seed": args.seed}
        records = explore(job, cands, executor, quiet=args.quiet, header=header)
    finally:
        executor.close()
    table = format_table(records, explored)
    print(table)
    if args.remarks:
        print(format_remarks(records))
    title = f"{job.name}: {len(records)} candidates"
    print("wrote " + ", ".join(write_outputs(records, table, folder, title)))
    return 0


def _with_random_weights(path: str, seed: int, folder: str) -> str:
    """A copy of the model at `path` with seeded random weights and its logits as
    outputs (smelt.frontend.random_weights), saved in `folder`: its path, which
    the oracle, the candidates and the records' replay commands all use."""
    import onnx

    from smelt.frontend.random_weights import random_weights

    stem = os.path.splitext(os.path.basename(path))[0]
    out = os.path.join(folder, f"{stem}-random-weights-{seed}.onnx")
    try:
        os.makedirs(folder, exist_ok=True)
        onnx.save(random_weights(onnx.load(path), seed), out)
    except OSError as e:
        raise SmeltError(f"cannot write the model with random weights: {e}") from None
    return out


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("smelt")
    except PackageNotFoundError:
        return "unknown"


def add_explore_parser(sub: Any) -> None:
    from smelt.compiler.explore_eval import STATUSES
    from smelt.compiler.explore_oracle import ORACLES

    e = sub.add_parser(
        "explore", help="search pass orders, subsets and options: metrics, table, plot",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    e.add_argument("model", help="an .onnx path or a light_* model name")
    e.add_argument("--passes", required=True, metavar="P,P,…",
                   help="the passes to order and leave out (graph or loop passes)")
    e.add_argument("--orders", type=int, default=8, metavar="N",
                   help="how many orders / subsets to try (default 8): the given "
                   "order, each pass left out, then a seeded sample")
    e.add_argument("--no-subsets", action="store_true",
                   help="only reorder: every candidate runs every pass")
    e.add_argument("--option", action="append", default=[],
                   metavar="PASS.OPT=V1,V2", help="a grid of a pass option "
                   "(repeatable; each order is tried with every combination)")
    e.add_argument("--list-options", action="store_true",
                   help="print the options of the --passes and stop")
    e.add_argument("--base", default="O2", help="the pipeline around the explored "
                   "passes: a preset level (default O2) or a pipeline string")
    e.add_argument("--target", default="cpu", choices=["cpu", "gpu"])
    e.add_argument("--cpu", default="host", help="the CPU to compile for (cpu)")
    e.add_argument("--executor", default="local", choices=["local", "ray"],
                   help="local worker processes (default) or Ray")
    e.add_argument("--workers", type=int, help="timing workers (default: one per "
                   "physical core but one, never two on one core)")
    e.add_argument("--ray-address", metavar="ADDR",
                   help="an existing Ray cluster (default: a local ray.init())")
    e.add_argument("--repeat", type=int, default=10, help="timed runs per candidate")
    e.add_argument("--tolerance", type=float, default=1e-4, help="max relative "
                   "error against the oracle")
    e.add_argument("--oracle", default="auto", choices=ORACLES,
                   help="who says what the outputs should be: onnxruntime on the "
                   "original model (auto: where it runs the model) or smelt's "
                   "reference executor (auto: where onnxruntime cannot)")
    e.add_argument("--remarks", action="store_true", help="print why passes "
                   "declined rewrites, per candidate against the base (always "
                   "kept in candidates.jsonl)")
    e.add_argument("--seed", type=int, default=0, help="inputs and order sample")
    e.add_argument("--random-weights", type=int, metavar="SEED",
                   help="replace the float weights by seeded random ones and add "
                   "the logits as outputs (as smelt run does); the model is saved "
                   "in the results folder")
    e.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD…")
    e.add_argument("--constant", action="append", default=[], metavar="NAME=VALUE")
    e.add_argument("-o", "--output", metavar="DIR", help="results folder "
                   "(default explore-MODEL)")
    e.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    e.epilog = "statuses: " + ", ".join(STATUSES)
    e.set_defaults(func=cmd_explore)
