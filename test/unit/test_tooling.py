"""mlir-opt's pass instrumentation on smelt: IR dumps, pass timing and statistics,
the crash reproducer that smelt-opt replays, and `smelt pipelines`."""

import json
import re
import shlex

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli, opt, pipelines
from smelt.compiler.instrument import pass_specs
from smelt.passes.buffer_plan import BufferPlanPass
from smelt.passes.graph_fuse import GraphFusePass

HEADER = re.compile(r"^// -----// IR Dump (Before|After) (\S+) //----- //$", re.M)


def _model() -> onnx.ModelProto:
    """MatMul → Relu → Identity: graph-simplify drops the Identity, graph-fuse
    fuses the rest, graph-fold-batchnorm has nothing to do."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["r"], name="act"),
        helper.make_node("Identity", ["r"], ["y"], name="id"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    return str(path)


def _names(spec: str) -> list[str]:
    return [s.split("{")[0] for s in pass_specs(spec)]


def test_dump_dir_writes_one_numbered_file_per_pass(model_path, tmp_path):
    out = tmp_path / "dumps"
    model = smelt.compile(model_path, dump=smelt.DumpOptions(dump_dir=str(out)))
    names = ["import", *_names(model.info["pipeline"])]
    files = sorted(p.name for p in out.iterdir())
    numbered = [f"{i:03d}-{n}.mlir" for i, n in enumerate(names)]
    assert files == [*numbered, "target.ll"]  # and the target stage's code
    assert "define " in (out / "target.ll").read_text()
    assert "graph.matmul" in (out / files[0]).read_text()
    (fuse,) = [f for f in files if f.endswith("-graph-fuse.mlir")]
    assert "graph.fused" in (out / fuse).read_text()


def test_print_after_all_before_and_after(model_path, capsys):
    spec = pipelines.preset("cpu", "O1")
    dump = smelt.DumpOptions(print_after_all=True)
    smelt.compile(model_path, pipeline=spec, dump=dump)
    headers = HEADER.findall(capsys.readouterr().err)
    assert headers == [("After", n) for n in _names(spec)]
    smelt.compile(
        model_path, pipeline=spec,
        dump=smelt.DumpOptions(
            print_before=("graph-fuse",), print_after=("graph-simplify",)
        ),
    )
    headers = HEADER.findall(capsys.readouterr().err)
    assert headers == [
        ("After", "graph-simplify"),
        ("After", "graph-simplify"),
        ("Before", "graph-fuse"),
    ]


def test_print_after_change_skips_passes_that_did_nothing(model_path, capsys):
    spec = ("graph-fold-batchnorm,graph-simplify,graph-simplify,graph-fuse,"
            "convert-graph-to-loop,buffer-plan")
    dump = smelt.DumpOptions(print_after_change=True)
    smelt.compile(model_path, pipeline=spec, dump=dump)
    headers = [n for _, n in HEADER.findall(capsys.readouterr().err)]
    # target-attach-cpu (added by the cpu target) sets the target: a change
    assert headers == ["target-attach-cpu", "graph-simplify", "graph-fuse",
                       "convert-graph-to-loop", "buffer-plan"]


def test_time_passes_table_and_json(model_path, tmp_path, capsys):
    path = tmp_path / "times.json"
    model = smelt.compile(
        model_path,
        dump=smelt.DumpOptions(time_passes=True, time_json=str(path), statistics=True),
    )
    err = capsys.readouterr().err
    assert "Pass execution time report" in err and "Pass statistics" in err
    data = json.loads(path.read_text())
    assert [r["spec"] for r in data["passes"]] == pass_specs(model.info["pipeline"])
    assert all(r["seconds"] >= 0 for r in data["passes"])
    assert set(data["stages"]) == {"import", "target", "runtime"}
    fuse = next(r for r in data["passes"] if r["name"] == "graph-fuse")
    assert fuse["before"]["kernels"] == 2 and fuse["after"]["kernels"] == 1
    simplify = next(r for r in data["passes"] if r["name"] == "graph-simplify")
    assert simplify["before"]["ops"] == 3 and simplify["after"]["ops"] == 2


def test_cli_flags(model_path, tmp_path, capsys):
    out = tmp_path / "d"
    argv = ["run", model_path, "--level", "O1", "--dump-dir", str(out),
            "--print-ir-after", "graph-fuse,buffer-plan", "--time-passes",
            "--pass-statistics"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert [n for _, n in HEADER.findall(err)] == ["graph-fuse", "buffer-plan"]
    assert "Pass execution time report" in err and "(target)" in err
    assert (out / "000-import.mlir").exists()
    assert cli.main(["report", model_path, "--print-ir-before", "graph-fuse"]) == 0
    captured = capsys.readouterr()
    assert HEADER.findall(captured.err) == [("Before", "graph-fuse")]
    assert "graph-fuse" in captured.out  # the report's own table


def test_smelt_opt_flags(model_path, tmp_path, capsys):
    out = tmp_path / "d"
    argv = [model_path, "-p", "graph-simplify,graph-fuse", "--dump-dir", str(out),
            "--print-ir-after-change", "--time-passes", "--time-passes-json",
            str(tmp_path / "t.json")]
    assert opt.main(argv) == 0
    captured = capsys.readouterr()
    assert "graph.fused" in captured.out
    assert [n for _, n in HEADER.findall(captured.err)] == ["graph-simplify",
                                                           "graph-fuse"]
    assert sorted(p.name for p in out.iterdir()) == [
        "000-input.mlir", "001-graph-simplify.mlir", "002-graph-fuse.mlir"]
    assert len(json.loads((tmp_path / "t.json").read_text())["passes"]) == 2


def test_unknown_pass_name_is_one_clear_error(model_path, capsys):
    assert cli.main(["run", model_path, "--print-ir-after", "graph-fusion"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "graph-fusion" in err


@pytest.mark.parametrize("argv,words", [
    (["{model}", "-p", "canonicalize"], ["bad pipeline", "canonicalize"]),
    (["{model}", "-p", "loop-vectorize{{widt=3}}"], ["bad pipeline", "widt"]),
    (["{tmp}/nosuch.mlir", "-p", "graph-fuse"], ["cannot read", "nosuch.mlir"]),
    (["{tmp}", "-p", "graph-fuse"], ["cannot read", "directory"]),
    (["{model}", "-p", "target-attach-cpu{{cpu=nosuchcpu}}"], ["unknown CPU"]),
])
def test_smelt_opt_user_errors_are_one_line(model_path, tmp_path, capsys, argv,
                                            words):
    argv = [a.format(model=model_path, tmp=tmp_path) for a in argv]
    assert opt.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err
    assert all(w in err for w in words), err


def _broken(self, ctx, module):
    raise ZeroDivisionError("a bug")


def _replay_command(message: str) -> list[str]:
    command = message.split("reproduce with: ", 1)[1]
    words = shlex.split(command)
    assert words[0] == "smelt-opt"
    return words[1:]


@pytest.mark.parametrize("cls,name", [(GraphFusePass, "graph-fuse"),
                                      (BufferPlanPass, "buffer-plan")])
def test_reproducer_replays_the_crash(model_path, tmp_path, monkeypatch, capsys,
                                      cls, name):
    monkeypatch.setattr(cls, "apply", _broken)
    path = tmp_path / "repro.mlir"
    with pytest.raises(smelt.InternalError) as e:
        smelt.compile(model_path, dump=smelt.DumpOptions(reproducer_path=str(path)))
    message = str(e.value)
    assert f"internal error in pass {name}: ZeroDivisionError: a bug" in message
    argv = _replay_command(message)
    assert argv[0] == str(path) and argv[1] == "-p" and argv[2].startswith(name)
    text = path.read_text()
    assert text.startswith(f"// smelt crash reproducer: pass {name} failed")
    assert "__elided__" not in text  # the weights are there: it parses back
    # the reproducer holds the failing pass's input: earlier passes have run
    assert ("graph.matmul" in text) == (name == "graph-fuse")
    assert opt.main(argv) == 1
    err = capsys.readouterr().err
    assert f"smelt-opt: error: internal error in pass {name}: ZeroDivisionError" in err
    monkeypatch.undo()  # without the bug, the same command compiles
    assert opt.main(argv) == 0


def test_cli_prints_the_replay_command_on_one_line(
    model_path, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(GraphFusePass, "apply", _broken)
    assert cli.main(["run", model_path]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reproduce with: smelt-opt " in err
    path = _replay_command(err.strip())[0]
    assert "graph.matmul" in open(path).read()
    chosen = tmp_path / "crash.mlir"
    assert cli.main(["report", model_path, "--reproducer", str(chosen)]) == 1
    argv = _replay_command(capsys.readouterr().err.strip())
    # report runs `smelt run`'s pipeline: the replay is the rest of it from the pass
    assert argv[:2] == [str(chosen), "-p"]
    assert argv[2].startswith("graph-fuse,convert-graph-to-loop,")
    assert opt.main([*argv, "--reproducer", str(tmp_path / "again.mlir")]) == 1
    assert (tmp_path / "again.mlir").read_text().splitlines()[2:] == (
        chosen.read_text().splitlines()[2:]
    )  # smelt-opt's own reproducer holds the same IR


def test_smelt_pipelines_strings_run_in_smelt_opt(model_path, capsys):
    assert cli.main(["pipelines", "--cpu", "x86-64-v3", "--threads", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    presets = pipelines.all_presets(2, "x86-64-v3")
    assert len(lines) == len(presets) == sum(len(v) for v in pipelines.PRESETS.values())
    for line, (target, level, spec) in zip(lines, presets, strict=True):
        assert line == f"{target} {level}: {spec}"
        assert opt.main([model_path, "-p", line.split(": ", 1)[1]]) == 0, line
        assert "func.func @main" in capsys.readouterr().out
