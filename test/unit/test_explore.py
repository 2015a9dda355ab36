"""`smelt explore`: the candidate space, one candidate's evaluation, its oracle
(onnxruntime, or the reference executor where onnxruntime cannot run the model),
a deliberately broken pipeline caught, kernels compared with the base's, the
passes' remarks, the local and Ray executors end to end on a tiny encoder layer,
replaying a record's pipeline, and the driver's progress hook."""

import io
import json
import os
import sys
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from xdsl.passes import ModulePass

import smelt
from smelt.compiler import cli, explore_space
from smelt.compiler.explore import make_job
from smelt.compiler.explore_eval import evaluate
from smelt.compiler.explore_exec import LocalExecutor, physical_cores
from smelt.compiler.explore_plot import pareto
from smelt.compiler.explore_report import compare_kernels
from smelt.compiler.explore_space import Candidate, candidates, parse_option_grid
from smelt.compiler.progress import Progress, TerminalProgress, terminal_progress
from smelt.dialects import graph as g
from smelt.errors import SmeltError
from smelt.universe import SMELT_UNIVERSE

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "numerics"))
import models  # (the benchmarks' encoder layer builder)

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


# -- the oracle ---------------------------------------------------------------------


def test_the_oracle_is_onnxruntime_on_the_original_model(encoder):
    import onnxruntime as ort

    job = make_job(encoder, repeat=1)
    assert job.oracle == f"onnxruntime {ort.__version__}"
    session = ort.InferenceSession(encoder, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()],
                    session.run(None, job.feeds)))  # fmt: skip
    assert job.expected.keys() == want.keys()
    for name, value in want.items():
        assert np.array_equal(job.expected[name], value)  # the same feeds, as is
    record = evaluate(job, Candidate(1, (1,), (), BASE))
    assert record["status"] == "ok" and record["oracle"] == job.oracle


def test_the_reference_executor_judges_only_where_onnxruntime_cannot(
    encoder, monkeypatch
):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # not installed
    job = make_job(encoder, repeat=1)
    assert job.oracle == (
        "reference executor (onnxruntime is not installed (pip install "
        "'smelt[test]'))"
    )
    record = evaluate(job, Candidate(1, (1,), (), BASE))
    assert record["status"] == "ok" and record["oracle"] == job.oracle
    with pytest.raises(SmeltError, match="--oracle onnxruntime: onnxruntime is not"):
        make_job(encoder, oracle="onnxruntime")


def test_a_model_onnxruntime_refuses_falls_back_and_says_why(tmp_path):
    import math

    from onnx import TensorProto, helper

    # valid ONNX that onnxruntime 1.x has no kernel for: Erf on float64
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [6])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [6])
    graph = helper.make_graph([helper.make_node("Erf", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "erf64.onnx"
    onnx.save(model, path)
    job = make_job(str(path), repeat=1)
    if job.oracle.startswith("onnxruntime"):
        pytest.skip(f"{job.oracle} runs Erf on float64: no refusal to fall back from")
    assert job.oracle.startswith(
        "reference executor (onnxruntime cannot run the model: "
    ), job.oracle
    want = [math.erf(v) for v in job.feeds["x"]]
    assert np.allclose(job.expected["y"], want, rtol=1e-15, atol=0)
    record = evaluate(job, Candidate(1, (1,), (), BASE))
    assert record["status"] == "ok" and record["oracle"] == job.oracle


def test_inputs_fixed_by_constant_are_fed_to_onnxruntime(tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])
    k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g",
                              [x, k], [y])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "scale.onnx"
    onnx.save(model, path)
    job = make_job(str(path), repeat=1, constants={"k": np.asarray(3)})
    assert job.oracle.startswith("onnxruntime "), job.oracle
    assert list(job.feeds) == ["x"]
    assert np.array_equal(job.expected["y"], job.feeds["x"] * np.float32(3))


@dataclass(frozen=True)
class DoubleAWeightPass(ModulePass):
    """A deliberately wrong graph pass: doubles @main's largest float constant."""

    name = "test-double-a-weight"

    def apply(self, ctx, op):
        consts = [c for c in op.walk() if isinstance(c, g.ConstantOp)
                  and c.to_array().dtype == np.float32]  # fmt: skip
        const = max(consts, key=lambda c: c.to_array().size)
        doubled = g.ConstantOp.from_array(const.to_array() * np.float32(2))
        const.parent_block().insert_op_before(doubled, const)
        const.results[0].replace_all_uses_with(doubled.results[0])
        const.parent_block().erase_op(const)


def test_a_deliberately_broken_pipeline_is_caught(encoder, monkeypatch):
    monkeypatch.setitem(
        SMELT_UNIVERSE.all_passes, DoubleAWeightPass.name, lambda: DoubleAWeightPass
    )
    job = make_job(encoder, repeat=1)
    broken = BASE.replace("graph-fuse,", "graph-fuse,test-double-a-weight,")
    record = evaluate(job, Candidate(1, (1,), (), broken))
    assert record["status"] == "wrong", record
    assert record["error"].startswith(f"outputs differ from {job.oracle}'s")
    assert evaluate(job, Candidate(2, (1,), (), BASE))["status"] == "ok"


# -- kernels against the base's, stages, remarks ------------------------------------


def test_kernels_are_compared_with_the_base_by_hash(encoder):
    job = make_job(encoder, repeat=1)
    unfused = BASE.replace("graph-fuse,", "")
    records = [
        evaluate(job, Candidate(0, (), (), BASE)),
        evaluate(job, Candidate(1, (1,), (), BASE)),  # the same pipeline
        evaluate(job, Candidate(2, (2,), (), unfused)),
    ]
    compare_kernels(records)
    base, same, unfused = records
    assert "kernels_vs_base" not in base
    assert same["kernel_hashes"] == base["kernel_hashes"]  # hashing is stable
    assert same["kernels_vs_base"] == {
        "differ": [], "same": len(base["kernel_hashes"]), "base_only": 0,
        "calls_differ": {},
    }  # fmt: skip
    assert sum(base["kernel_calls"].values()) == base["metrics"]["kernels"]
    changed = unfused["kernels_vs_base"]
    assert changed["differ"] and set(changed["differ"]) <= set(unfused["kernel_hashes"])
    assert unfused["metrics"]["kernels_new"] == len(changed["differ"])
    assert changed["base_only"] > 0  # the base's fused kernels are not made here
    stages = base["metrics"]["stage_s"]
    assert {"graph", "loop", "target", "runtime"} <= stages.keys()
    assert all(seconds >= 0 for seconds in stages.values())


def test_kernels_compared_by_hash_whatever_their_names_and_calls_counted():
    def rec(number, hashes, calls):
        return {"candidate": number, "kernel_hashes": hashes, "kernel_calls": calls,
                "metrics": {}}  # fmt: skip

    records = [
        rec(0, {"conv_1": "h1", "add_2": "h2"}, {"conv_1": 1, "add_2": 2}),
        rec(1, {"conv_7": "h1", "add_8": "h3"}, {"conv_7": 3, "add_8": 1}),
        rec(2, {"conv_1": "h1", "add_2": "h2"}, {"conv_1": 1, "add_2": 2}),
    ]
    compare_kernels(records)
    assert records[1]["kernels_vs_base"] == {
        "differ": ["add_8"], "same": 1, "base_only": 1,
        "calls_differ": {"conv_7": [3, 1]},
    }  # fmt: skip
    assert records[1]["metrics"]["kernels_new"] == 1
    assert records[2]["kernels_vs_base"]["differ"] == []
    assert records[2]["kernels_vs_base"]["calls_differ"] == {}


def test_records_keep_the_remarks_of_declining_passes(encoder):
    job = make_job(encoder, repeat=1)
    record = evaluate(job, Candidate(1, (1,), (), BASE))
    said = record["remarks"]
    assert said and record["metrics"]["remarks"] == len(said)
    assert {"pass_name", "function", "op", "reason", "nodes"} == said[0].keys()
    assert "loop-vectorize" in {r["pass_name"] for r in said}
    assert all(r["function"] in record["kernel_hashes"] for r in said
               if r["pass_name"] == "loop-vectorize" and r["op"] != "builtin.module")


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
    records, printed = _explore(encoder, tmp_path, capsys, "--remarks")
    assert [r["candidate"] for r in records] == [0, 1, 2]  # 0: the base pipeline
    assert all(r["status"] == "ok" for r in records)
    assert records[0]["pipeline"] == BASE
    assert records[1]["metrics"]["kernels"] < records[2]["metrics"]["kernels"]
    assert records[2]["kernels_vs_base"]["differ"]  # graph-fuse left out
    assert all(r["oracle"].startswith("onnxruntime ") for r in records)
    assert f"oracle: {records[0]['oracle']}" in printed
    assert "remarks (why a pass left an op alone)" in printed
    assert "loop-vectorize: fewer iterations than lanes" in printed
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
    assert smelt.load(out, trust=True).info["stats"]["kernels"] == kernels  # manifest


def test_explore_on_ray(encoder, tmp_path, capsys):
    pytest.importorskip("ray", reason="ray is not installed (pip install ray)")
    records, printed = _explore(encoder, tmp_path, capsys, "--executor", "ray")
    assert "ray: local ray.init()" in printed
    assert [r["status"] for r in records] == ["ok", "ok", "ok"]


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
