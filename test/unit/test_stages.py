"""The staged driver: named stages (timed, dumpable), complete frozen hashable
CompileOptions, presets assembled from pass lists with loop-schedule's steps
visible, and nothing read from the environment or module globals mid-pipeline."""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli, pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.instrument import DumpOptions, module_text, pass_specs
from smelt.compiler.options import CompileOptions, FrozenArray
from smelt.compiler.stages import STAGE_NAMES, Build
from smelt.errors import SmeltError
from smelt.passes.loop_schedule_plan import STEP_KINDS
from smelt.targets import cpu as schedules

SMELT = pathlib.Path(smelt.__file__).parent


def _model():
    w = np.random.default_rng(0).standard_normal((24, 32)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- CompileOptions -----------------------------------------------------------------


def test_options_are_frozen_hashable_and_equal_by_content():
    a = CompileOptions(
        input_shapes={"x": [1, 3], "a": (2,)},
        constants={"sr": 16000, "v": np.arange(3, dtype=np.int64)},
    )
    b = CompileOptions(
        input_shapes={"a": [2], "x": (1, 3)},
        constants={"v": [0, 1, 2], "sr": np.int64(16000)},
    )
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a.input_shapes == (("a", (2,)), ("x", (1, 3)))
    assert a.shape_map() == {"a": (2,), "x": (1, 3)}
    assert a.constant_map()["v"].tolist() == [0, 1, 2]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.threads = 2  # type: ignore[misc]
    # a constant's value, dtype or shape decides the build
    assert a != dataclasses.replace(a, constants={"sr": 16001, "v": [0, 1, 2]})
    assert FrozenArray.of(np.int32(1)) != FrozenArray.of(np.int64(1))
    assert FrozenArray.of([[1, 2]]) != FrozenArray.of([1, 2])
    for field in ("threads", "opt_level", "fast_math", "precision", "cpu", "level"):
        value = {"threads": 2, "opt_level": 1, "fast_math": True,
                 "precision": "bf16", "cpu": "x86-64-v3", "level": "O1"}[field]
        other = dataclasses.replace(a, **{field: value})
        assert other != a and hash(other) != hash(a), field
        assert other.record() != a.record(), field  # so the cache key differs


def test_options_record_is_json_and_replays_the_pipeline():
    import json

    options = CompileOptions(cpu="x86-64-v3", constants={"k": np.ones(2000)})
    record = options.record()
    json.dumps(record)
    assert record["constants"]["k"]["shape"] == [2000] and "sha256" in (
        record["constants"]["k"]
    )
    assert record["resolved_pipeline"] == pipelines.preset("cpu", "O2", 1, "x86-64-v3")
    assert record["device"] is None


def test_options_refuse_bad_values_when_made():
    with pytest.raises(SmeltError, match="unknown target"):
        CompileOptions(target="tpu")
    with pytest.raises(SmeltError, match="cpu target only"):
        CompileOptions(target="gpu", device="cpu", profile=True)
    with pytest.raises(SmeltError, match="gpu target"):
        CompileOptions(device="cuda")
    with pytest.raises(SmeltError, match="unknown device"):
        CompileOptions(target="gpu", device="tpu")
    with pytest.raises(SmeltError, match="sequence of ints"):
        CompileOptions(input_shapes={"x": ["a"]})


def test_the_gpu_device_is_read_from_the_environment_once(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device decides the default")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    options = CompileOptions(target="gpu")
    assert options.device == "cpu"
    monkeypatch.delenv("TRITON_INTERPRET")
    assert options.device == "cpu"  # decided when the options were made
    with pytest.raises(SmeltError, match="no CUDA device"):
        CompileOptions(target="gpu")
    assert CompileOptions(target="gpu", device="cpu").device == "cpu"


def test_triton_loads_interpreted_or_compiled_as_told_not_by_environment(monkeypatch):
    pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    from smelt.lowering.triton.runtime import load_source

    source = (
        "import triton\n\n\n@triton.jit\ndef k(x):\n    pass\n"
        f"# {np.random.default_rng().integers(1 << 60)}\n"  # a fresh module
    )
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    compiled = load_source(source, interpret=False).k
    assert isinstance(compiled, triton.runtime.JITFunction)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    interpreted = load_source(source, interpret=True).k
    assert not isinstance(interpreted, triton.runtime.JITFunction)
    assert (compiled, interpreted) == (load_source(source).k,
                                       load_source(source, interpret=True).k)
    assert triton.knobs.runtime.interpret is False  # the knob's scope ended


def test_no_environment_variable_is_read_below_the_api_edge():
    """os.environ / os.getenv appear only where options are made (the edge)."""
    allowed = {"compiler/options.py"}
    readers = []
    for path in SMELT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                readers.append(str(path.relative_to(SMELT)))
    assert sorted(set(readers) - allowed) == []


def test_no_printer_flag_is_a_module_global():
    from smelt.dialects import graph

    assert not hasattr(graph, "PRINT_LARGE_CONSTANTS")
    module = import_graph(_model())
    assert "dense_resource<__elided__>" in module_text(module)
    assert "dense_resource<__elided__>" not in module_text(module, full_constants=True)
    assert "dense_resource<__elided__>" in str(module)  # nothing left switched on


# -- stages -------------------------------------------------------------------------


def test_stages_are_named_timed_and_keep_the_old_names():
    model = smelt.compile(_model(), cpu="x86-64-v3")
    seconds = model.info["seconds"]
    assert STAGE_NAMES == ("import", "graph", "loop", "target", "runtime")
    assert set(seconds) == {*STAGE_NAMES, "passes", "codegen"}
    assert seconds["passes"] == seconds["graph"] + seconds["loop"]
    assert seconds["codegen"] == seconds["target"]
    assert model.info["stats"]["arena_bytes"] >= 0


def test_the_pipeline_splits_at_convert_graph_to_loop():
    build = Build(_model(), CompileOptions(cpu="x86-64-v3"))
    names = [p.name for p in build.passes]
    assert names[build.graph_passes] == "convert-graph-to-loop"
    assert all(not n.startswith("loop-") for n in names[: build.graph_passes])
    bad = CompileOptions(pipeline="graph-simplify,no-such-pass")
    with pytest.raises(SmeltError, match="bad pipeline"):
        Build(_model(), bad)  # before the import


def test_dump_stage_prints_each_stage(capsys, tmp_path):
    dump = DumpOptions(print_stages=STAGE_NAMES, dump_dir=str(tmp_path))
    smelt.compile(_model(), cpu="x86-64-v3", dump=dump)
    err = capsys.readouterr().err
    parts = err.split("// -----// Stage ")[1:]
    assert [p.split(" ", 1)[0] for p in parts] == list(STAGE_NAMES)
    text = dict(p.split(" //----- //\n", 1) for p in parts)
    assert "graph.matmul" in text["import"] and "graph.fused" in text["graph"]
    assert "loop.for" in text["loop"] and "define " in text["target"]
    assert text["runtime"].startswith("input x: 8x24 float32\noutput y: 8x32 float32")
    assert (tmp_path / "target.ll").read_text() == text["target"]
    with pytest.raises(SmeltError, match="unknown stages"):
        smelt.compile(_model(), dump=DumpOptions(print_stages=("codegen",)))


def test_cli_dump_stage(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    argv = ["run", str(path), "--cpu", "x86-64-v3", "--dump-stage", "loop"]
    assert cli.main(argv) == 0
    assert "// -----// Stage loop //----- //" in capsys.readouterr().err


def test_build_is_the_same_whatever_the_environment(monkeypatch):
    """Environment variables that tools read do not change a build."""
    first = smelt.compile(_model(), cpu="x86-64-v3")
    for key in ("TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION", "SMELT_CPU"):
        monkeypatch.setenv(key, "1")
    second = smelt.compile(_model(), cpu="x86-64-v3")
    assert first.program.llvm_ir == second.program.llvm_ir
    assert first.info["pipeline"] == second.info["pipeline"]


# -- presets and loop-schedule's steps ----------------------------------------------


def test_presets_list_every_schedule_step():
    spec = pipelines.preset("cpu", "O2", 3, "x86-64-v3")
    names = [s.split("{")[0] for s in pass_specs(spec)]
    assert "loop-schedule" not in names
    start = names.index("loop-schedule-plan")
    applies = [s for s in pass_specs(spec) if s.startswith("loop-schedule-apply")]
    assert [a.split('"')[1] for a in applies] == list(STEP_KINDS)
    assert names[start + 1 : start + 1 + len(STEP_KINDS)] == ["loop-schedule-apply"] * 6
    assert 'loop-schedule-plan{min_blocks=12}' in spec
    assert ",".join(pipelines.POST_VECTORIZE) in spec
    assert not hasattr(schedules, "POST_VECTORIZE")  # one place: pipelines.py


def test_presets_place_casts_and_int8_after_the_cleanup():
    spec = pipelines.preset("cpu", "O1", 1, "x86-64-v3", "bf16")
    cleanup = ",".join(pipelines.CLEANUP)
    int8 = ",".join(pipelines.INT8)
    assert f"{cleanup},quant-cast{{to=bf16}},{int8},graph-simplify" in spec
    assert "quant-fold-qdq" not in pipelines.preset("cpu", "O1", 1, "x86-64")
    gpu = pipelines.preset("gpu", "O0", precision="f16")
    assert gpu == "quant-cast{to=f16},convert-graph-to-loop,buffer-plan"


def test_user_pipelines_get_cast_and_cpu_by_pass_not_by_text():
    spec = 'loop-tile{loop="n" sizes=8,4},graph-fold-batchnorm,graph-fuse'
    assert pipelines.split(spec) == [
        'loop-tile{loop="n" sizes=8,4}', "graph-fold-batchnorm", "graph-fuse"
    ]
    assert pipelines.with_precision(spec, "f16") == (
        'loop-tile{loop="n" sizes=8,4},graph-fold-batchnorm,quant-cast{to=f16},'
        "graph-fuse"
    )
    assert pipelines.with_precision(spec, "f32") == spec
    attached = pipelines.with_cpu(spec, "x86-64-v3")
    assert attached == f'target-attach-cpu{{cpu="x86-64-v3"}},{spec}'
    assert pipelines.with_cpu(attached, "znver5") == attached
    assert pipelines.with_cpu("", "x86-64-v3") == 'target-attach-cpu{cpu="x86-64-v3"}'


@pytest.mark.parametrize("threads", [1, 4])
def test_schedules_list_steps_in_the_order_they_are_applied(threads):
    order = {kind: i for i, kind in enumerate(STEP_KINDS)}
    for name in ("x86-64-v3", "znver5"):
        from smelt.targets.cpu_spec import CpuSpec

        t = schedules.CpuSchedule.for_spec(CpuSpec.named(name), 4 * threads)
        plans = [schedules.window(9, t), schedules.transpose(4, 2, t)]
        for m, n, k in ((1, 8, 3), (49, 64, 576), (3136, 256, 64), (7, 1000, 2048)):
            plans += [schedules.conv2d(m, n, k, t), schedules.matmul(m, n, k, t)]
            plans.append(schedules.matmul(m, n, k, t, constant_b=True))
        for steps in plans:
            ranks = [order[s.kind] for s in steps]
            assert ranks == sorted(ranks), steps


def test_loop_schedule_equals_its_listed_steps():
    module = import_graph(_model())
    lower(module, 'target-attach-cpu{cpu="x86-64-v3"},convert-graph-to-loop')
    one, steps = module.clone(), module.clone()
    lower(one, "loop-schedule{min_blocks=4}")
    listed = ",".join(pipelines.cpu_loop_opt(min_blocks=4)[: 1 + len(STEP_KINDS)])
    lower(steps, listed)
    assert module_text(one) == module_text(steps)
    assert "loop.schedule" not in module_text(steps)
    assert module_text(one) != module_text(module)  # it did schedule
