"""What a new user meets (#36, #31): bf16 on a CPU without AVX512-BF16 keeps its
convs scheduled, `--check` takes its tolerance from `--precision`, `smelt run`,
`report` and `show` print one kernel count for one pipeline, and `--remarks`
prints why passes declined."""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.compiler import cli
from smelt.compiler.cli_output import CHECK_TOLERANCE, check_tolerance
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.options import CompileOptions
from smelt.dialects import loop
from smelt.passes.loop_nest import kernels

AVX2 = "x86-64-v3"  # no avx512bf16: quant-cast keeps contractions f32


def _conv_model(seed: int = 0) -> onnx.ModelProto:
    """x[1,8,10,10] → Conv 3x3 (16, pad 1) → Relu → Conv 1x1 (16) → Add(the
    first) → Relu → y: convs whose bf16 outputs the epilogue rounds."""
    rng = np.random.default_rng(seed)

    def init(name: str, *shape: int) -> TensorProto:
        scale = np.sqrt(2.0 / np.prod(shape[1:])) if len(shape) > 1 else 0.1
        array = (rng.standard_normal(shape) * scale).astype(np.float32)
        return numpy_helper.from_array(array, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                         name="conv3x3"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv1x1"),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 10, 10])],
        [init("w1", 16, 8, 3, 3), init("b1", 16), init("w2", 16, 16, 1, 1),
         init("b2", 16)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def conv_path(tmp_path):
    path = tmp_path / "convs.onnx"
    onnx.save(_conv_model(), path)
    return str(path)


# --- bf16 where the CPU has no bf16 math -----------------------------------------


@pytest.mark.parametrize("cpu", [AVX2, "sapphirerapids"])  # without / with avx512bf16
def test_bf16_convs_are_scheduled_as_in_f32(conv_path, cpu):
    """An f32 conv whose fused epilogue stores bf16 accumulates in a scratch and
    gets the conv2d schedule (before: the unscheduled register form, ~30x
    slower on light_resnet50); with avx512bf16 but a bf16 dot slower than f32
    (Intel's: bf16_path.FAST_DOT), quant-cast keeps convs f32 too (it once
    crashed reading a conv's lhs). Zen 4 / 5 convs: test_conv_bf16.py."""
    for precision in ("f32", "bf16"):
        spec = CompileOptions(cpu=cpu, precision=precision).resolved_pipeline()
        cut = spec.index("loop-schedule-apply")
        module = lower(import_graph(conv_path), spec[:cut].rstrip(","))
        convs = [k for k in kernels(module, "*") if "conv2d" in k.sym_name.data
                 and "pad" not in k.sym_name.data]  # fmt: skip
        assert len(convs) == 2, precision
        for k in convs:
            assert loop.SCHEDULE_ATTR in k.attributes, (precision, k.sym_name.data)


def test_bf16_convs_on_avx2_compute_what_f32_does(conv_path):
    x = np.random.default_rng(1).standard_normal((1, 8, 10, 10)).astype(np.float32)
    f32 = smelt.compile(conv_path, cpu=AVX2).run({"x": x})["y"]
    bf16 = smelt.compile(conv_path, cpu=AVX2, precision="bf16").run({"x": x})["y"]
    error = np.max(np.abs(bf16 - f32)) / np.max(np.abs(f32))
    assert 0 < error <= 2.0**-6  # rounded (so bf16 happened), a few roundings off


def test_check_tolerance_follows_the_precision():
    assert check_tolerance(None, "f32") == (1e-4, "f32")
    tolerance, why = check_tolerance(None, "bf16")
    assert tolerance == CHECK_TOLERANCE["bf16"] == 2.0**-4
    assert "8 significant bits" in why
    assert check_tolerance(None, "f16")[0] == 2.0**-7
    assert check_tolerance(0.5, "bf16") == (0.5, "--tolerance")


def test_run_check_with_bf16_prints_its_tolerance(conv_path, capsys):
    pytest.importorskip("onnxruntime")
    argv = ["run", conv_path, "-q", "--cpu", AVX2, "--precision", "bf16", "--check"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "check PASSED (tolerance 0.0625 for bf16: 8 significant bits" in out
    # an explicit tolerance wins, and can fail: bf16 is not f32-exact
    assert cli.main([*argv, "--tolerance", "1e-6"]) == 2
    assert "check FAILED (tolerance 1e-06 for --tolerance)" in capsys.readouterr().out


# --- one kernel count ------------------------------------------------------------


def _kernels(text: str) -> int:
    found = re.findall(r"(\d+) kernels[ ,]", text)
    assert found, text
    return int(found[-1])


@pytest.mark.parametrize("flags", [[], ["--cpu", AVX2, "--precision", "bf16"]])
def test_run_report_and_show_count_the_same_kernels(conv_path, tmp_path, capsys,
                                                   flags):  # fmt: skip
    assert cli.main(["run", conv_path, "-q", *flags]) == 0
    run = capsys.readouterr().out
    assert cli.main(["report", conv_path, *flags]) == 0
    report = capsys.readouterr().out
    assert cli.main(["show", conv_path, "-o", str(tmp_path / "g.svg"), *flags]) == 0
    show = capsys.readouterr().out
    counts = {_kernels(run), _kernels(report), _kernels(show)}
    assert len(counts) == 1, (run, report, show)
    for text in (run, report, show):
        assert "calls in @main after the whole pipeline" in text
    # report and show name the pipeline they ran: run's
    spec = re.search(r"\[pipeline: (.*)\]", run).group(1)
    assert f"[pipeline: {spec}]" in report and f"[pipeline: {spec}]" in show


def test_report_says_when_its_pipeline_does_not_lower(conv_path, capsys):
    assert cli.main(["report", conv_path, "-p", "graph-fuse"]) == 0
    assert (
        "graph-level kernels [graph ops that make a kernel" in capsys.readouterr().out
    )


# --- remarks ---------------------------------------------------------------------


def test_run_remarks_print_why_passes_declined(conv_path, capsys):
    assert cli.main(["run", conv_path, "-q", "--cpu", AVX2]) == 0
    assert "remarks:" not in capsys.readouterr().out
    assert cli.main(["run", conv_path, "-q", "--cpu", AVX2, "--remarks"]) == 0
    out = capsys.readouterr().out
    head = out[out.index("remarks: ") :]
    count = int(re.match(r"remarks: (\d+) ", head).group(1))
    groups = re.findall(r"^  (loop-[a-z-]+): (.+) \((\d+)\)$", head, re.MULTILINE)
    assert count > 0 and groups
    assert sum(int(n) for *_, n in groups) == count  # every remark in one group
