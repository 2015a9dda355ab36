"""`smelt explore`: the candidate space, one candidate's evaluation, the local and
Ray executors end to end on a tiny encoder layer, replaying a record's pipeline,
and the driver's progress hook."""

import io
import json
import os
import sys

import onnx
import pytest

import smelt
from smelt.compiler import cli, explore_space
from smelt.compiler.explore import make_job
from smelt.compiler.explore_eval import evaluate
from smelt.compiler.explore_exec import LocalExecutor, physical_cores
from smelt.compiler.explore_plot import pareto
from smelt.compiler.explore_space import Candidate, candidates, parse_option_grid
from smelt.compiler.progress import Progress, TerminalProgress, terminal_progress
from smelt.errors import SmeltError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
import models  # noqa: E402  (the benchmarks' encoder layer builder)

BASE = (
    "target-attach-cpu{cpu=\"x86-64-v3\"},graph-fold-constants,graph-simplify,"
    "graph-fuse,convert-graph-to-loop,loop-schedule,loop-vectorize,buffer-plan"
)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> str:
    """A tiny BERT encoder layer (seq 4, hidden 16) as an .onnx file."""
    path = tmp_path_factory.mktemp("explore") / "encoder.onnx"
    onnx.save(models.encoder_layer_model(seq=4, hidden=16, heads=2, ffn=32), path)
    return str(path)


# -- the space ----------------------------------------------------------------------


def test_given_order_first_then_each_pass_left_out():
    cands = candidates(BASE, "graph-simplify,graph-fuse", 3)
    assert [c.order for c in cands] == [(1, 2), (2,), (1,)]
    # the explored passes replace the base's graph section
    assert cands[0].pipeline == BASE.replace("graph-fold-constants,", "")
    assert "graph-simplify" not in cands[1].pipeline
    assert all(c.pipeline.startswith("target-attach-cpu") for c in cands)


def test_only_reorders_without_subsets_and_dedups():
    cands = candidates(BASE, "graph-simplify,graph-fuse", 10, subsets=False)
    assert sorted(c.order for c in cands) == [(1, 2), (2, 1)]
    assert len({c.pipeline for c in cands}) == 2


def test_loop_passes_replace_the_loop_section_and_buffer_plan_stays_last():
    cands = candidates(BASE, "loop-vectorize,loop-schedule", 2, subsets=False)
    loop = [c.pipeline.split("convert-graph-to-loop,")[1] for c in cands]
    assert loop == [
        "loop-vectorize,loop-schedule,buffer-plan",
        "loop-schedule,loop-vectorize,buffer-plan",
    ]
    assert cands[0].pipeline.startswith(BASE.split("convert-graph-to-loop")[0])


def test_option_grid_sets_every_occurrence_and_dedups_moot_points():
    grid = parse_option_grid(["loop-schedule.mr=4,6", "graph-fuse.max_ops=8"])
    cands = candidates(BASE, "loop-schedule,loop-vectorize", 2, grid=grid)
    assert [c.options for c in cands] == [
        (("loop-schedule.mr", "4"), ("graph-fuse.max_ops", "8")),
        (("loop-schedule.mr", "6"), ("graph-fuse.max_ops", "8")),
        (("graph-fuse.max_ops", "8"),),  # (2,): no loop-schedule, mr is moot
    ]
    assert "loop-schedule{mr=6}" in cands[1].pipeline
    assert "graph-fuse{max_ops=8}" in cands[2].pipeline


@pytest.mark.parametrize(
    "passes, grid, message",
    [
        ("graph-fuse,no-such-pass", [], "unknown pass 'no-such-pass'"),
        ("convert-graph-to-loop", [], "in every candidate"),
        ("graph-fuse", ["graph-fuse.nope=1"], "has no option 'nope'"),
        ("graph-fuse", ["graph-fuse=1"], "write PASS.OPTION=V1,V2"),
    ],
)
def test_bad_requests_are_refused(passes, grid, message):
    with pytest.raises(SmeltError, match=message):
        candidates(BASE, passes, 2, grid=parse_option_grid(grid))


def test_large_spaces_are_sampled_distinct():
    orders = list(explore_space.orders(9, 40, True, seed=1))
    assert len(orders) == len(set(orders)) == 40
    assert orders[0] == tuple(range(1, 10))


def test_pareto_front():
    points = [(1, 5.0, 1), (2, 3.0, 2), (2, 4.0, 3), (3, 3.5, 4), (4, 1.0, 5)]
    assert [p[2] for p in pareto(points)] == [1, 2, 5]


# -- one candidate ------------------------------------------------------------------


def test_a_failing_pipeline_is_recorded_not_raised(encoder):
    job = make_job(encoder, repeat=1)
    bad = evaluate(job, Candidate(1, (1,), (), "graph-fuse,no-such-pass"))
    assert bad["status"] == "compile-error" and "no-such-pass" in bad["error"]
    good = evaluate(job, Candidate(2, (1,), (), "graph-fuse,convert-graph-to-loop"))
    assert good["status"] == "ok", good["error"]
    assert good["metrics"]["kernels"] > 0 and good["metrics"]["latency_ms"] > 0
    assert good["metrics"]["max_rel_error"] <= 1e-4


def test_local_workers_are_one_per_core():
    executor = LocalExecutor()
    cores = physical_cores()
    assert executor.workers == max(1, len(cores) - 1)
    assert len(set(executor.cores)) == executor.workers


class _Dies:
    """Unpickled in a worker, ends it at once (as a native crash would)."""

    def __reduce__(self):
        return (os._exit, (3,))


def test_a_worker_that_dies_costs_only_its_candidate(encoder):
    import dataclasses

    job = dataclasses.replace(make_job(encoder, repeat=1), feeds={"x": _Dies()})
    cands = [Candidate(i, (1,), (), "graph-fuse") for i in (1, 2)]
    records = list(LocalExecutor(workers=1).results(job, cands))
    assert [(r["candidate"], r["status"]) for r in records] == [
        (1, "crashed"), (2, "crashed")
    ]  # fmt: skip
    assert "worker process died" in records[0]["error"]


# -- end to end ---------------------------------------------------------------------


def _explore(encoder, out, capsys, *extra) -> tuple[list[dict], str]:
    passes = "graph-fuse,graph-fold-constants"  # 2nd candidate: graph-fuse left out
    code = cli.main([
        "explore", encoder, "--passes", passes, "--orders", "2", "--base", BASE,
        "--repeat", "2", "-q", "-o", str(out), *extra,
    ])  # fmt: skip
    assert code == 0
    lines = (out / "candidates.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], capsys.readouterr().out


def test_explore_local_writes_records_table_and_plot(encoder, tmp_path, capsys):
    records, printed = _explore(encoder, tmp_path, capsys)
    assert [r["candidate"] for r in records] == [1, 2]
    assert all(r["status"] == "ok" for r in records)
    assert records[0]["metrics"]["kernels"] < records[1]["metrics"]["kernels"]
    for r in records:  # the record's pipeline replays its kernel count
        assert r["model_sha256"] and r["pipeline"].startswith("target-attach-cpu")
        replayed = smelt.compile(encoder, pipeline=r["pipeline"])
        assert replayed.info["stats"]["kernels"] == r["metrics"]["kernels"]
    assert "timing worker" in printed and "pinned to its own core" in printed
    assert "kernel counts seen" in printed
    assert (tmp_path / "table.txt").read_text().startswith("  #")
    assert (tmp_path / "tradeoffs.png").read_bytes()[:4] == b"\x89PNG"


def test_replay_prints_the_kernel_count(encoder, tmp_path, capsys):
    job = make_job(encoder, repeat=1)
    pipeline = BASE.replace("graph-fuse,", "")
    record = evaluate(job, Candidate(1, (1,), (), pipeline))
    kernels = record["metrics"]["kernels"]
    assert cli.main(["run", encoder, "-q", "-p", record["pipeline"]]) == 0
    assert f"  {kernels} kernels, arena" in capsys.readouterr().out
    out = str(tmp_path / "c.smelt")
    assert cli.main(["compile", encoder, "-p", record["pipeline"], "-o", out]) == 0
    assert f"  {kernels} kernels, arena" in capsys.readouterr().out
    assert smelt.load(out).info["stats"]["kernels"] == kernels  # in the manifest


def test_explore_on_ray(encoder, tmp_path, capsys):
    pytest.importorskip("ray", reason="ray is not installed (pip install ray)")
    records, printed = _explore(encoder, tmp_path, capsys, "--executor", "ray")
    assert "ray: local ray.init()" in printed
    assert [r["status"] for r in records] == ["ok", "ok"]


# -- progress -----------------------------------------------------------------------


class Recorder(Progress):
    def __init__(self):
        self.events = []

    def stage(self, name, total=0):
        self.events.append((name, total))

    def step(self, detail):
        self.events.append(detail)


def test_driver_reports_stages_and_passes(encoder):
    progress = Recorder()
    smelt.compile(encoder, pipeline=BASE, progress=progress)
    stages = [e for e in progress.events if isinstance(e, tuple)]
    kernels = stages[3][1]
    # loop-vectorize and buffer-plan run during code generation, a kernel at a
    # time (smelt.compiler.deferred): the target stage counts the kernels
    assert stages == [
        ("import", 0), ("graph", 4), ("loop", 2), ("target", kernels), ("runtime", 0)
    ]
    steps = [e for e in progress.events if isinstance(e, str)]
    assert steps[0] == "target-attach-cpu" and steps[5] == "loop-schedule"
    assert kernels > 3 and len(steps) == 6 + kernels
    assert all(s.startswith("@") for s in steps[6:]), steps


def test_terminal_progress_draws_one_line_and_erases_it():
    stream = io.StringIO()
    progress = TerminalProgress("m.onnx", stream, tick=10)
    progress.stage("graph", 3)
    progress.step("graph-fuse")
    assert "m.onnx  [2/5 graph] 1/3 graph-fuse" in progress.line()
    progress.close()
    assert stream.getvalue().endswith("\r\033[K")
    assert terminal_progress("m", stream=io.StringIO()) is None  # not a terminal
