"""A fast, seeded fuzz run: 200 malformed models and bad inputs (test/fuzz/mutate.py)
go through smelt.compile and CompiledModel.run in worker processes; none may
crash (a bare traceback), hang, kill its worker or answer differently from
onnxruntime. `python test/fuzz/run_fuzz.py` runs thousands on demand."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mutate import make_case  # noqa: E402
from run_fuzz import FAILURES, fuzz, report, run_batch  # noqa: E402

SEED = 1234  # run_fuzz.py's default seed (20250) is kept for the on-demand runs
CASES = 200


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return fuzz(CASES, SEED, timeout=30.0, batch=CASES)


@pytest.mark.parametrize("outcome", FAILURES)
def test_no_failures(results, outcome):
    bad = [r for r in results if r["outcome"] == outcome]
    summary = report(bad, "test_fuzz", SEED, 0.0) if bad else ""
    assert not bad, f"{len(bad)} {outcome} case(s):\n{summary}"


def test_every_case_classified(results):
    assert len(results) == CASES
    assert sorted(r["index"] for r in results) == list(range(CASES))


def test_the_fuzzer_reaches_the_compiler(results):
    """Mutants that still compile and run must exist, or the fuzzer tests only the
    loader."""
    assert sum(r["outcome"] == "ok" for r in results) >= CASES // 10


def test_a_segfault_or_hang_costs_only_its_case():
    cases = [make_case(SEED, i) for i in range(4)]
    cases[1].kind, cases[2].kind = "selftest-segfault", "selftest-hang"
    outcomes = [r["outcome"] for r in run_batch(cases, timeout=5.0, mem_gb=6.0)]
    assert outcomes[1:3] == ["segfault", "hang"]
    assert all(o not in FAILURES for o in (outcomes[0], outcomes[3]))


def test_coverage_guided_fuzzing_finds_nothing(tmp_path):
    """A few hundred atheris executions over the import + compile path (only
    where atheris is installed: `pip install -e '.[fuzz]'`)."""
    pytest.importorskip(
        "atheris", reason="atheris is not installed or does not load (pip install "
        "-e '.[fuzz]'): coverage-guided fuzzing NOT run", exc_type=ImportError,
    )  # fmt: skip
    from atheris_import import run

    summary = run(seconds=240, runs=300, work=str(tmp_path), nice=0)
    assert summary.returncode == 0, summary.log_tail
    assert not summary.findings, summary.format()
    assert summary.executions >= 300, summary.format()
    assert summary.edges > 0 and summary.outcomes.get("ok", 0) > 0, summary.format()


def test_the_atheris_harness_judges_without_atheris():
    """The harness's verdicts (they need no atheris): a seed compiles and
    matches onnxruntime, garbage is refused, and a model whose oracles
    disagree (NaN from Log, then MaxPool, which ONNX leaves open) is no
    finding."""
    from atheris_import import Harness
    from onnx import TensorProto, helper
    from seeds import seeds

    harness = Harness(work="")
    seed = seeds(False)[0].model.SerializeToString()
    assert harness.check(seed)[0] == "ok"
    assert harness.check(b"\x08\x07garbage")[0] == "refused"
    pool = helper.make_node("MaxPool", ["l"], ["y"], kernel_shape=[2, 2])
    nodes = [helper.make_node("Log", ["x"], ["l"]), pool]
    graph = helper.make_graph(
        nodes, "nan_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 5, 5])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    outcome, detail = harness.check(model.SerializeToString())
    assert outcome in ("ok", "matches-reference", "oracles-differ"), detail
