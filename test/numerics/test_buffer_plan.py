"""buffer-plan on whole models: the arena stays within 5% of the lower bound (the
largest total of simultaneously live bytes), and a compiled run allocates nothing."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest
from models import LIGHT_MODELS, light_inputs, light_model_path

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower, main_func


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_arena_is_within_5_percent_of_the_lower_bound(name):
    module = import_graph(onnx.load(light_model_path(name)))
    lower(module, pipelines.preset("cpu", "O1"))  # loop schedules move no buffer
    attrs = main_func(module).attributes
    arena, bound, naive = (
        attrs[f"smelt.{key}"].value.data
        for key in ("arena_bytes", "arena_lower_bound", "naive_bytes")
    )
    assert bound <= arena <= 1.05 * bound, (arena, bound)
    assert arena < naive


def test_a_run_allocates_nothing():
    model = onnx.load(light_model_path("light_squeezenet"))
    compiled = smelt.compile(model, "cpu")
    ir = compiled.program.llvm_ir
    assert not any(f"@{fn}(" in ir for fn in ("malloc", "calloc", "realloc", "free"))
    feeds = light_inputs(model)
    args = compiled.check_inputs(feeds) + [
        np.empty(o.shape, o.dtype) for o in compiled.outputs
    ]
    compiled.program.run(args)  # warm up
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    compiled.program.run(args)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "lineno"))
    assert grown < 4096, f"a run allocated {grown} bytes"
