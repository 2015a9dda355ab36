"""The CPU TargetSpec: named CPUs and feature edits, the host, `#target.cpu` in the
IR, schedules derived from it, and both ISA paths compiled and run (AVX2 on any
x86-64-v3 host, AVX-512 where the host has it; its assembly checked anywhere)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.printer import Printer

import smelt
from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.dialects.target import cpu_target
from smelt.errors import SmeltError
from smelt.lowering.llvm.jit import assembly
from smelt.passes.target_attach_cpu import attach_pass
from smelt.targets.cpu import CpuSchedule
from smelt.targets.cpu_spec import (
    KNOWN_FEATURES,
    NAMED,
    CpuSpec,
    host,
    host_caches,
    host_lacks,
    of_module,
)
from smelt.universe import make_context

RNG = np.random.default_rng(0)


def test_named_cpus_and_levels():
    v3, v4 = CpuSpec.parse("x86-64-v3"), CpuSpec.parse("x86-64-v4")
    assert (v3.lanes(), v3.vector_registers, v3.mask_registers) == (8, 16, 0)
    assert (v4.lanes(), v4.vector_registers, v4.mask_registers) == (16, 32, 7)
    assert v4.lanes(16) == 32 and v4.lanes(8) == 64 and v3.lanes(8) == 32
    assert v3.fma and v3.int8_dot == "none"
    zen5 = CpuSpec.parse("znver5")
    assert zen5.has("avx512bf16") and zen5.int8_dot == "vnni512"
    assert CpuSpec.parse("alderlake").int8_dot == "vnni256"
    assert CpuSpec.parse("x86-64").lanes() == 4
    assert hash(zen5) == hash(CpuSpec.parse("znver5"))


def test_feature_edits_follow_llvm_implications():
    no512 = CpuSpec.parse("znver5,-avx512f")
    assert not any(f.startswith("avx512") for f in no512.features)
    assert no512.has("avx2") and no512.has("avxvnni") and no512.lanes() == 8
    more = CpuSpec.parse("x86-64-v3,+avx512bw")
    assert more.has("avx512f") and more.lanes() == 16
    assert CpuSpec.parse("x86-64-v3,-avx").features == frozenset({"sse4.2", "bmi2"})


@pytest.mark.parametrize(
    "text,words",
    [
        ("pentium9", "unknown CPU 'pentium9'"),
        ("znver5,avx512f", "bad CPU feature edit 'avx512f'"),
        ("znver5,+sse9", "bad CPU feature edit '+sse9'"),
    ],
)
def test_bad_cpu_names_say_what_to_write(text, words):
    with pytest.raises(SmeltError, match=re.escape(words)):
        CpuSpec.parse(text)


def test_host_caches_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
         (3, "Unified", "32768K")]  # fmt: skip
    ):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert host_caches(str(tmp_path)) == {"L1d": 48 << 10, "L2": 1 << 20, "L3": 32 << 20}
    assert host_caches(str(tmp_path / "missing")) == {}


def test_host_spec_is_readable_and_printable():
    spec = host()
    assert spec.cores >= 1 and spec.l1d > 0 and spec.l2 > spec.l1d
    assert spec.name in str(spec) and f"{spec.lanes()} f32 lanes" in str(spec)
    assert host_lacks(spec) == []


def _parse(text: str) -> ModuleOp:
    return Parser(make_context(), text).parse_module()


def _attached(spec_text: str) -> CpuSpec:
    module = _parse("builtin.module {}")
    lower(module, spec_text)
    return of_module(module)


@pytest.mark.parametrize(
    "cpu", ["host", "x86-64-v3", "x86-64-v4", "znver5,-avx512vnni", "haswell,+avx512f"]
)
def test_the_printed_pass_replays_the_spec(cpu):
    spec = CpuSpec.parse(cpu)
    text = attach_pass(spec)
    assert _attached(text) == spec
    # ... through the IR too: print, parse, read back
    module = _parse("builtin.module {}")
    lower(module, text)
    printed = _print(module)
    assert "#target.cpu<" in printed
    again = _parse(printed)
    assert cpu_target(again) == cpu_target(module) and of_module(again) == spec


def _print(module: ModuleOp) -> str:
    import io

    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


def test_attach_pass_options_edit_the_named_cpu():
    spec = _attached('target-attach-cpu{cpu="znver5" features="-avx512f" l2=2097152}')
    assert spec.lanes() == 8 and spec.l2 == 2 << 20 and spec.l1d == 48 << 10
    with pytest.raises(Exception, match="unknown CPU"):
        _attached('target-attach-cpu{cpu="pentium9"}')


def test_a_preset_names_the_cpu_and_an_explicit_pipeline_gets_one():
    text = pipelines.preset("cpu", "O2", 1, "x86-64-v3")
    assert text.startswith('target-attach-cpu{cpu="x86-64-v3"},')
    assert pipelines.with_cpu(text, "znver5") == text  # it names its own
    assert pipelines.with_cpu("loop-vectorize", "x86-64-v4").startswith(
        'target-attach-cpu{cpu="x86-64-v4"},'
    )
    assert "target-attach-cpu" not in pipelines.preset("gpu", "O2")


@pytest.mark.parametrize("name", sorted(NAMED))
def test_schedule_fits_the_registers_and_l1(name):
    spec = CpuSpec.named(name)
    s = CpuSchedule.for_spec(spec)
    columns = s.nr // s.width
    assert s.width == spec.lanes() and s.nr % s.width == 0
    assert s.mr * columns + columns + 1 <= spec.vector_registers
    assert s.kc * s.nr * 4 <= spec.l1d and s.mc * s.kc * 4 <= spec.l2
    assert s.mc % s.mr == 0 and s.nc % s.nr == 0


def test_schedule_shapes_of_the_two_isas():
    v3 = CpuSchedule.for_spec(CpuSpec.named("x86-64-v3"))
    v4 = CpuSchedule.for_spec(CpuSpec.named("x86-64-v4"))
    assert (v3.mr, v3.nr, v3.width) == (6, 16, 8)
    assert (v4.mr, v4.nr, v4.width) == (6, 64, 16)


def matmul_model(m: int, k: int, n: int, constant_b: bool) -> onnx.ModelProto:
    """c = a @ b + bias, then relu (b a weight when `constant_b`)."""
    b = RNG.standard_normal((k, n)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    inits = [numpy_helper.from_array(bias, "bias")]
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])]
    if constant_b:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [k, n]))
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["t"]),
        helper.make_node("Add", ["t", "bias"], ["u"]),
        helper.make_node("Relu", ["u"], ["c"]),
    ]
    out = helper.make_tensor_value_info("c", TensorProto.FLOAT, [m, n])
    graph = helper.make_graph(nodes, "mm", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model


def _runnable_cpus() -> list[str]:
    """The AVX2 path on any host that has it, AVX-512 where the host has it."""
    cpus = ["host"]
    for name in ("x86-64-v3", "x86-64-v4"):
        if not host_lacks(CpuSpec.named(name)):
            cpus.append(name)
    return cpus


@pytest.mark.parametrize("cpu", _runnable_cpus())
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("constant_b", [True, False])
@pytest.mark.parametrize("m", [70, 71])
def test_gemm_on_each_isa_path_matches_numpy(cpu, threads, constant_b, m):
    # tails in every blocked dim of both micro-kernels; 70 rows take 5-row
    # tiles on AVX-512 (`_rows`), 71 (prime) keeps 6 and a tail of 5
    k, n = 300, 100
    model = matmul_model(m, k, n, constant_b)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    feeds = {"a": a}
    b = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}.get("b")
    if b is None:
        b = feeds["b"] = RNG.standard_normal((k, n)).astype(np.float32)
    bias = numpy_helper.to_array(model.graph.initializer[0])
    compiled = smelt.compile(model, "cpu", cpu=cpu, threads=threads)
    got = compiled.run(feeds)["c"]
    want = np.maximum(a.astype(np.float64) @ b + bias, 0)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) <= 1e-5
    assert compiled.info["cpu"].startswith(CpuSpec.parse(cpu).name)


def test_code_for_a_cpu_the_host_lacks_compiles_and_refuses_to_run():
    lacking = [f for f in KNOWN_FEATURES if f not in host().features]
    if not lacking:
        pytest.skip("this host has every feature smelt knows")
    cpu = f"x86-64-v3,+{lacking[-1]}"
    compiled = smelt.compile(matmul_model(8, 16, 32, True), "cpu", cpu=cpu)
    with pytest.raises(SmeltError, match="lacks: compile it with cpu='host'"):
        compiled.run({"a": np.zeros((8, 16), np.float32)})


def _innermost_loops(asm: str) -> list[list[str]]:
    """Bodies of the innermost loops of an assembly listing: from a label to a
    jump back to it (a back edge) with no other back edge in between."""
    lines = asm.splitlines()
    labels = {ln.split(":")[0]: i for i, ln in enumerate(lines) if ln.startswith(".LBB")}
    edges = []
    for i, line in enumerate(lines):
        jump = re.match(r"\s+j\w+\s+(\.LBB\w+)", line)
        if jump and labels.get(jump.group(1), i) < i:
            edges.append((labels[jump.group(1)], i))
    return [
        lines[start : end + 1]
        for start, end in edges
        if not any(start <= s and e < end for s, e in edges if (s, e) != (start, end))
    ]


STACK = re.compile(r"-?\d*\(%r[sb]p\)")
"""A stack slot with a constant offset: what a register spill or reload reads."""


@pytest.mark.parametrize(
    "cpu,register,accumulators",
    [("x86-64-v4", "zmm", 24), ("x86-64-v3", "ymm", 12), ("znver5", "zmm", 24)],
)
def test_micro_kernel_assembly_uses_the_registers_and_never_spills(
    cpu, register, accumulators
):
    module = import_graph(matmul_model(168, 256, 256, True))  # whole micro-tiles
    lower(module, pipelines.preset("cpu", "O2", 1, cpu))
    asm = assembly(module)  # compiles whether or not this host runs it

    def accumulators_of(body: list[str]) -> set[str]:
        return {ln.split("%")[-1].strip() for ln in body if "vfmadd" in ln}

    k_loop = max(_innermost_loops(asm), key=lambda body: len(accumulators_of(body)))
    fmas = [ln for ln in k_loop if "vfmadd" in ln]
    assert fmas and all(f"%{register}" in ln for ln in fmas)
    # mr · nr / lanes FMAs per k step (k unrolled), each into a register
    assert len(fmas) % accumulators == 0
    assert len(accumulators_of(k_loop)) >= accumulators
    vector_stack = [
        ln for ln in k_loop if STACK.search(ln) and re.search(r"%[xyz]mm", ln)
    ]
    assert vector_stack == [], "the k loop spills or reloads vector registers"


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("channels", [3, 64, 96, 192, 256, 480, 512, 832, 1000])
def test_conv_channel_blocks_divide_the_channels(cpu, channels):
    """A channel block that leaves a tail makes the nest imperfect and the
    interchange refuse it (a 3x3 conv of 256 channels ran at half speed). An
    L2 of 4 KiB keeps every conv of more than kc channels blocked."""
    from smelt.targets import cpu as schedules

    s = replace(CpuSchedule.for_spec(CpuSpec.named(cpu)), l2=4096)
    steps = schedules.conv2d(196, 256, channels, s, window=9)
    tiles = [st.sizes[0] for st in steps if st.kind == "tile" and st.role == "k"]
    order = next(st.order for st in steps if st.kind == "interchange")
    if channels <= s.kc:
        assert tiles == [] and order == schedules.CONV_ORDER
    else:
        assert len(tiles) == 1 and channels % tiles[0] == 0 and tiles[0] <= s.kc
        assert order == schedules.CONV_ORDER_BLOCKED


@pytest.mark.parametrize(
    "cpu,m,rows",
    [
        ("x86-64-v4", 64, 4),  # the MLP's batch: 4 x 64 tiles, no 4-row tail nest
        ("x86-64-v4", 128, 4),
        ("x86-64-v4", 70, 5),
        ("x86-64-v4", 71, 6),  # nothing from 6 down to 4 divides: a tail nest
        ("x86-64-v4", 60, 6),
        ("x86-64-v3", 64, 6),  # 16 ymm: a 4 x 16 tile has too few accumulators
    ],
)
def test_gemm_rows_divide_m_where_the_tile_keeps_its_accumulators(cpu, m, rows):
    from smelt.targets import cpu as schedules

    s = CpuSchedule.for_spec(CpuSpec.named(cpu))
    steps = schedules.matmul(m, 4096, 1024, s, constant_b=True)
    m_tile = next(st.sizes for st in steps if st.kind == "tile" and st.role == "m")
    assert m_tile[1] == rows
    columns = s.nr // s.width
    assert rows == s.mr or (m % rows == 0 and rows * columns >= 16)


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize(
    "m,n", [(169, 320), (3136, 64), (784, 256), (49, 512), (196, 1000), (64, 4096)]
)
def test_thread_blocks_split_evenly_where_they_can(cpu, threads, m, n):
    """Blocks for threads (GEMM / conv, the `_parallel` split): enough blocks
    for the threads, and where some even split of the whole micro-tiles gets
    there, no tail block (one more copy of the micro-kernel nest: 320 channels
    in blocks of 128 + 128 + 64 made inception's convs compile three nests)."""
    from smelt.targets import cpu as schedules

    s = CpuSchedule.for_spec(CpuSpec.named(cpu), threads * schedules.BLOCKS_PER_THREAD)
    mr, nr = min(s.mr, m), s.nr if n >= s.nr else max(s.width, n // s.width * s.width)
    mc0, nc0 = schedules._block(m, s.mc, mr), schedules._block(n, s.nc, nr)
    mc, nc = schedules._parallel(m, n, mc0, nc0, mr, nr, s.min_blocks)
    blocks = -(-m // mc) * -(-n // nc)
    assert mc % mr == 0 and nc % nr == 0 and mc <= mc0 and nc <= nc0
    m_units, n_units = m // mr, n // nr
    even = [
        (a, b)
        for a in range(1, m_units + 1)
        for b in range(1, n_units + 1)
        if m_units % a == 0 and n_units % b == 0 and a * b >= s.min_blocks
    ]
    if even:  # reachable without tails: none taken
        assert (m_units % (mc // mr), n_units % (nc // nr)) == (0, 0), (mc, nc)
        assert blocks >= s.min_blocks
    assert blocks >= min(s.min_blocks, m_units * n_units)


@pytest.mark.parametrize("cpu", ["x86-64-v3", "x86-64-v4"])
def test_conv_runs_its_whole_reduction_in_the_micro_kernel(cpu):
    """light_resnet50's convs (up to 3x3 x 512 channels, 1x1 x 2048) keep the
    window and all channels inside the micro-tile: their B slivers are at most
    WHOLE_K_SLIVER x L2; a 3x3 conv with more channels than that is blocked
    (2048 with AVX-512's 64 columns, 8192 with AVX2's 16)."""
    from smelt.targets import cpu as schedules

    s = replace(CpuSchedule.for_spec(CpuSpec.named(cpu)), l2=1 << 20)
    for channels, window in [(512, 9), (2048, 1), (256, 9), (128, 9)]:
        steps = schedules.conv2d(49, 512, channels, s, window=window)
        order = next(st.order for st in steps if st.kind == "interchange")
        assert order == schedules.CONV_ORDER, (channels, window)
    wide = 2048 * 64 // s.nr
    steps = schedules.conv2d(49, 512, wide, s, window=9)
    order = next(st.order for st in steps if st.kind == "interchange")
    assert order == schedules.CONV_ORDER_BLOCKED


def test_blocked_conv_gets_its_loop_order():
    """The IR after loop-schedule has the blocked order (with an L2 of 64 KiB
    the whole-K sliver does not fit): window and channel blocks outside the
    micro-tile, k.1 inside m.2."""
    w = RNG.standard_normal((256, 256, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256, 14, 14])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = import_graph(model)
    text = pipelines.preset("cpu", "O2", 1, "x86-64-v4")
    text = text.replace("loop-schedule-plan", "loop-schedule-plan{l2=65536}")
    lower(module, text[: text.index(",loop-vectorize")])
    roles = re.findall(r'loop.role = "([\w.]+)"', str(module))
    # printed innermost first: the micro-tile's k.1 closes before m.2, m.2 before
    # k.0, k.0 before the window loops
    roles = roles[roles.index("k.1") :]
    blocked = [r for r in roles if r in ("k.1", "m.2", "k.0", "kw", "kh")]
    assert blocked[:5] == ["k.1", "m.2", "k.0", "kw", "kh"]
