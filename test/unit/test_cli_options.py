"""One CLI (#36): the compile options declared once, with help, shared by every
subcommand that compiles; `smelt run FILE.smelt` takes run's options; --version;
errors in the CLI's words; one kernel count for one pipeline."""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from smelt.compiler import cli, cli_options, opt
from smelt.version import __version__


def _mlp(path) -> str:
    """x[2,8] → MatMul(w) → Add(b) → Relu → y, whose weight w is also listed as a
    graph input (an overridable initializer, as old exporters wrote)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
         helper.make_node("Add", ["m", "b"], ["a"], name="add"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [w, b],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return str(path)


@pytest.fixture
def mlp(tmp_path):
    return _mlp(tmp_path / "mlp.onnx")


def _subparsers(parser):
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


MINE = ("run", "compile", "report", "show", "aot", "quantize", "target", "pipelines")


# --- declared once, with help ----------------------------------------------------


@pytest.mark.parametrize("command", MINE)
def test_every_option_has_help(command):
    sub = _subparsers(cli.build_parser(command))[command]
    bare = [a.option_strings or [a.dest] for a in sub._actions if not a.help]
    assert not bare, f"smelt {command}: no help text for {bare}"


def test_subcommands_share_one_declaration_of_each_compile_option():
    subs = _subparsers(cli.build_parser())
    run = {a.dest: a for a in subs["run"]._actions}
    for name in ("compile", "report", "show"):
        for action in subs[name]._actions:
            if action.dest in cli_options.COMPILE_OPTIONS:
                same = run[action.dest]
                assert (action.help, action.default, action.choices) == (
                    same.help, same.default, same.choices
                ), (name, action.dest)
    # run takes every option of a cpu build that compile takes
    for dest in ("opt_level", "fast_math", "cache", "random_weights", "memory_limit"):
        assert dest in run
    aot = {a.dest: a for a in subs["aot"]._actions}
    assert aot["target"].choices == ["gpu"] and aot["target"].help


def test_compile_kwargs_carry_every_build_flag():
    args = cli.build_parser("run").parse_args(
        ["run", "m.onnx", "--opt-level", "1", "--fast-math", "--cache", "D",
         "--cpu", "x86-64-v3", "--threads", "2", "--no-check-model", "--no-tf32"]
    )  # fmt: skip
    kwargs = cli_options.compile_kwargs(args)
    assert kwargs == {
        "level": "O2", "threads": 2, "cpu": "x86-64-v3", "precision": "f32",
        "opt_level": 1, "fast_math": True, "cache": "D", "memory_limit": 0,
        "check_model": False, "tf32": False,
    }  # fmt: skip


@pytest.mark.parametrize("command", ["run", "report", "show"])
def test_dash_p_takes_a_preset_name(command):
    argv = [command, "m.onnx", "-p", "O1"] + ["-o", "g.svg"] * (command == "show")
    args = cli.build_parser(command).parse_args(argv)
    level = cli.build_parser(command).parse_args(
        [command, "m.onnx", "--level", "O1"] + ["-o", "g.svg"] * (command == "show")
    )
    assert cli_options.pipeline_of(args) == cli_options.pipeline_of(level)
    assert "pipeline" not in cli_options.compile_kwargs(args)


def test_run_with_the_flags_compile_had_only(mlp, tmp_path, capsys):
    argv = ["run", mlp, "-q", "--opt-level", "1", "--fast-math",
            "--cache", str(tmp_path / "cache")]  # fmt: skip
    assert cli.main(argv) == 0
    assert "(cache miss)" in capsys.readouterr().out
    assert cli.main(argv) == 0
    assert "(cache hit)" in capsys.readouterr().out


# --- --version -------------------------------------------------------------------


@pytest.mark.parametrize("main, prog", [(cli.main, "smelt"), (opt.main, "smelt-opt")])
def test_version(main, prog, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"{prog} {__version__} (xdsl "), out
    for package in ("xdsl", "llvmlite", "onnx"):
        from importlib.metadata import version

        assert f"{package} {version(package)}" in out


# --- smelt run FILE.smelt --------------------------------------------------------


def test_run_help_mentions_artifacts(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "FILE.smelt" in out and "--trust" in out and "--check" in out


def test_artifact_takes_the_run_options(mlp, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    art = str(tmp_path / "mlp.smelt")
    argv = ["compile", mlp, "-q", "-o", art, "--random-weights", "3", "--profile"]
    assert cli.main(argv) == 0
    capsys.readouterr()
    run = ["run", art, "--trust", "-q", "--check", "--profile", "2",
           "-o", str(tmp_path / "out.npz")]  # fmt: skip
    assert cli.main(run) == 0
    out = capsys.readouterr().out
    assert "profile over 2 runs" in out
    assert "check PASSED (tolerance 0.0001 for f32)" in out
    # the weights were seed 3's (a compile of the model with that seed gives the
    # same outputs; the model's own weights, others): the check used them too
    for name, seed in (("same.npz", ["--random-weights", "3"]), ("own.npz", [])):
        assert cli.main(["run", mlp, "-q", *seed, "-o", str(tmp_path / name)]) == 0
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(got["y"], np.load(tmp_path / "same.npz")["y"])
    assert not np.array_equal(got["y"], np.load(tmp_path / "own.npz")["y"])
    capsys.readouterr()
    assert cli.main([*run, "--tolerance", "-1"]) == 2  # the check can fail
    assert "check FAILED" in capsys.readouterr().out


def test_artifact_check_refuses_a_changed_model(mlp, tmp_path, capsys):
    art = str(tmp_path / "mlp.smelt")
    assert cli.main(["compile", mlp, "-q", "-o", art]) == 0
    with open(mlp, "ab") as f:
        f.write(b"\0")  # the model changed after the compile
    assert cli.main(["run", art, "--trust", "--check"]) == 1
    assert "changed since 'mlp.smelt' was compiled" in capsys.readouterr().err


def test_artifact_profile_needs_timers(mlp, tmp_path, capsys):
    art = str(tmp_path / "mlp.smelt")
    assert cli.main(["compile", mlp, "-q", "-o", art]) == 0
    assert cli.main(["run", art, "--trust", "--profile", "3"]) == 1
    assert "smelt compile --profile" in capsys.readouterr().err


def test_artifact_refuses_compile_options_by_name(mlp, tmp_path, capsys):
    art = str(tmp_path / "mlp.smelt")
    assert cli.main(["compile", mlp, "-q", "-o", art]) == 0
    capsys.readouterr()
    argv = ["run", art, "--trust", "--cpu", "x86-64-v3", "--print-ir-after-all"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "--cpu, --print-ir-after-all decide a build" in err
    assert cli.main(["run", art, "--trust", "--dim", "batch=1:8"]) == 1
    assert "--dim decides a build" in capsys.readouterr().err  # was ignored
    assert cli.main(["run", mlp, "--trust"]) == 1
    assert "--trust and --trust-key choose which FILE.smelt" in capsys.readouterr().err


# --- errors in the CLI's words ---------------------------------------------------


def test_names_are_checked_before_compiling_in_flag_words(mlp, tmp_path, capsys):
    np.savez(tmp_path / "in.npz", nosuch=np.zeros((2, 8), np.float32))
    for argv, named in (
        (["--input-shape", "z=2x8"], "--input-shape 'z' is not an input"),
        (["--input-shape", "w=8x4"], "--input-shape 'w'"),  # an initializer
        (["--constant", "nosuch=1"], "--constant 'nosuch' is not an input"),
        (["--inputs", str(tmp_path / "in.npz")], "--inputs 'nosuch'"),
    ):
        for command in ("run", "compile", "report"):
            extra = ["-o", str(tmp_path / "a.smelt")] * (command == "compile")
            if argv[0] == "--inputs" and command != "run":
                continue
            assert cli.main([command, mlp, *argv, *extra]) == 1
            captured = capsys.readouterr()
            assert "compiled" not in captured.out  # refused before compiling
            err = captured.err.strip()
            assert named in err and err.endswith("of mlp.onnx (its inputs: x)"), err
            assert "input_shapes" not in err and "constants" not in err
    # an initializer listed as an input may still be fixed (though not listed)
    zeros = ",".join(["0"] * 32)
    out = str(tmp_path / "y.npz")
    assert cli.main(["run", mlp, "-q", "--constant", f"w={zeros}", "-o", out]) == 0
    b = numpy_helper.to_array(onnx.load(mlp).graph.initializer[1])
    relu_b = np.maximum(b, 0)[None].repeat(2, 0)
    np.testing.assert_array_equal(np.load(out)["y"], relu_b)


def test_one_line_joins_a_list_under_its_head():
    error = Exception("cannot import the ONNX model:\nother errors (2):\n  - a\n  - b")
    assert cli.one_line(error) == "cannot import the ONNX model: other errors (2): a; b"
    assert cli.one_line(Exception("one line")) == "one line"


# --- one kernel count for one pipeline ----------------------------------------------


def _counted(text: str) -> int:
    found = re.findall(r"(\d+) kernels[ ,]", text)
    assert found, text
    return int(found[-1])


@pytest.mark.parametrize("model, flags", [
    ("light_squeezenet", []), ("light_squeezenet", ["-p", "O1"]),
    pytest.param("light_resnet50", [], marks=pytest.mark.slow),  # 76 on AVX-512
])  # fmt: skip
def test_light_models_count_one_way(tmp_path, capsys, model, flags):
    outs = []
    for argv in (["run", model, "-q"], ["report", model],
                 ["show", model, "-o", str(tmp_path / "g.json")]):
        assert cli.main([*argv, *flags]) == 0
        outs.append(capsys.readouterr().out)
    assert len({_counted(out) for out in outs}) == 1, outs
    spec = re.search(r"\[pipeline: (.*)\]", outs[0]).group(1)
    assert all(f"[pipeline: {spec}]" in out for out in outs)


def test_option_errors_name_the_flag(mlp, capsys):
    assert cli.main(["run", mlp, "-q", "--no-tf32"]) == 1
    err = capsys.readouterr().err
    assert "(--no-tf32) chooses how the gpu target multiplies" in err


def test_input_shape_against_the_dims_the_model_fixes(mlp, capsys):
    assert cli.main(["run", mlp, "--input-shape", "x=3x8"]) == 1
    err = capsys.readouterr().err
    assert "--input-shape x=3x8: the model fixes dim 0 of 'x' to 2" in err
    assert cli.main(["report", mlp, "--input-shape", "x=2x8x1"]) == 1
    assert "--input-shape x=2x8x1: 'x' has 2 dims, not 3" in capsys.readouterr().err


def test_smelt_opt_takes_light_names_and_input_shapes(capsys):
    argv = ["light_squeezenet", "--input-shape", "data_0=1x3x224x224"]
    assert opt.main(argv) == 0
    assert "graph.conv" in capsys.readouterr().out
    assert opt.main(["light_squeezenet", "--constant", "nosuch=1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("smelt-opt: error: --constant 'nosuch' is not an input of "
                   "light_squeezenet.onnx (its inputs: data_0)")
