"""`smelt explore` on a light model (light_squeezenet, seeded random weights) over
the layout and fusion passes of issue 31: the given order agrees with
onnxruntime and a deliberately broken pipeline (one weight doubled after
graph-fuse) is caught, judged by onnxruntime on the original model.

With the shipped weights the same breakage goes unseen: they are constant
fills, so squeezenet's probabilities are uniform whatever the scale of a
weight (benchmarks/results/explore-verdicts-2026-12-05.md); hence the random
weights here."""

from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from xdsl.passes import ModulePass

from smelt.compiler.cli_inputs import resolve_model
from smelt.compiler.explore import base_pipeline, make_job
from smelt.compiler.explore_eval import evaluate
from smelt.compiler.explore_space import Candidate, candidates
from smelt.dialects import graph as g
from smelt.frontend.random_weights import random_weights
from smelt.universe import SMELT_UNIVERSE

PASSES = (
    "graph-simplify,graph-fold-batchnorm,graph-convert-layout{layout=nhwc},graph-fuse"
)


@dataclass(frozen=True)
class ScaleAWeightPass(ModulePass):
    """A deliberately wrong graph pass: doubles @main's largest float weight."""

    name = "test-scale-a-weight"

    def apply(self, ctx, op):
        consts = [c for c in op.walk() if isinstance(c, g.ConstantOp)
                  and c.to_array().dtype == np.float32]  # fmt: skip
        const = max(consts, key=lambda c: c.to_array().size)
        doubled = g.ConstantOp.from_array(const.to_array() * np.float32(2))
        const.parent_block().insert_op_before(doubled, const)
        const.results[0].replace_all_uses_with(doubled.results[0])
        const.parent_block().erase_op(const)


@pytest.mark.slow
def test_a_broken_pipeline_on_a_light_model_is_caught(tmp_path, monkeypatch):
    monkeypatch.setitem(
        SMELT_UNIVERSE.all_passes, ScaleAWeightPass.name, lambda: ScaleAWeightPass
    )
    path = tmp_path / "light_squeezenet-random-weights-1.onnx"
    onnx.save(random_weights(onnx.load(resolve_model("light_squeezenet")), 1), path)
    job = make_job(str(path), repeat=1)
    assert job.oracle.startswith("onnxruntime "), job.oracle
    given = candidates(base_pipeline("O2", "cpu", "host"), PASSES, 1)[0]
    assert given.order == (1, 2, 3, 4)
    broken = given.pipeline.replace("graph-fuse,", "graph-fuse,test-scale-a-weight,")
    assert broken != given.pipeline
    record = evaluate(job, Candidate(1, given.order, (), broken))
    assert record["status"] == "wrong", record
    assert record["error"].startswith(f"outputs differ from {job.oracle}'s")
    assert record["metrics"]["max_rel_error"] > 0.1
    ok = evaluate(job, given)
    assert ok["status"] == "ok", ok
    assert ok["metrics"]["max_rel_error"] <= job.tolerance
