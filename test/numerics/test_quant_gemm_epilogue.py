"""The float chain after an int8 pointwise conv (a quant.qgemm) fused into the
GEMM's store step (#32): conv 1x1 → Q → DQ → BatchNorm → HardSwish /
HardSigmoid / Relu / Clip [→ + DQ(r)] → Q, against onnxruntime's unoptimized
run (the QDQ graph in float: exact on every host), integers within one step;
no elementwise kernel left after the GEMM; the reference executor on the fused
graph; and a micro-kernel that skips the epilogue fails the same check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from int8_oracle import ort_outputs
from onnx import TensorProto, helper, numpy_helper
from test_quant_epilogue import ACTIVATIONS, feeds_of

import smelt
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.pipelines import preset
from smelt.dialects.quant_gemm import QGemmOp, choose_variant
from smelt.targets.cpu_spec import CpuSpec, host

pytestmark = pytest.mark.skipif(
    choose_variant(host().has) is None,
    reason="no qgemm micro-kernel on this CPU (needs AVX2)",
)


def qdq_pointwise(
    c_in: int, c_out: int, hw: int, act: str, residual: bool, dtype, seed: int,
    float_out: bool = False, w_max: int = 127,
) -> onnx.ModelProto:  # fmt: skip
    """x_q → DQ → Conv 1x1 → Q → DQ → BN → act [→ Add DQ(x_q)] → Q; with the
    residual, x_q is made by a plain QDQ pointwise conv before (the block inside
    the network, its tensors NHWC). With `float_out`, no last Q: the f32 sum
    is the output (a chain that ends in float, as before a global pool)."""
    rng = np.random.default_rng(seed)
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    z = (lambda u, s: np.array(u if dtype == np.uint8 else s, dtype))
    f = (lambda a: np.asarray(a, np.float32))
    inits = {
        "sx": f(0.02), "zx": z(131, -5),
        "wq": rng.integers(-w_max, w_max + 1, (c_out, c_in, 1, 1)).astype(np.int8),
        "sw": f(rng.uniform(0.0005, 0.002, c_out)), "zw": np.zeros(c_out, np.int8),
        "bq": rng.integers(-3000, 3000, c_out).astype(np.int32),
        "zb": np.zeros(c_out, np.int32),
        "sm": f(0.04), "zm": z(128, 0),
        "g": f(rng.uniform(-1.5, 1.5, c_out)), "be": f(rng.normal(0, 0.3, c_out)),
        "mu": f(rng.normal(0, 0.2, c_out)), "var": f(rng.uniform(0.5, 1.5, c_out)),
        "lo": f(-0.5), "hi": f(1.5),
        "sy": f(0.025), "zy": z(60, -70),
    }  # fmt: skip
    inits["sb"] = (inits["sx"] * inits["sw"]).astype(np.float32)
    nodes = [
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["w"], axis=0),
        helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["b"], axis=0),
        helper.make_node("Conv", ["x", "w", "b"], ["cv"], kernel_shape=[1, 1]),
        helper.make_node("QuantizeLinear", ["cv", "sm", "zm"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "sm", "zm"], ["md"]),
        helper.make_node("BatchNormalization", ["md", "g", "be", "mu", "var"],
                         ["n"]),
        *ACTIVATIONS[act],
    ]  # fmt: skip
    inputs = [helper.make_tensor_value_info("xq", t, [1, c_in, hw, hw])]
    last = "a"
    if residual:
        assert c_in == c_out
        inputs = [helper.make_tensor_value_info("x0q", t, [1, c_in, hw, hw])]
        inits["w0q"] = rng.integers(-127, 128, (c_in, c_in, 1, 1)).astype(np.int8)
        inits["s0"] = f(rng.uniform(0.0005, 0.002, c_in))
        inits["z0"] = np.zeros(c_in, np.int8)
        nodes[:0] = [
            helper.make_node("DequantizeLinear", ["x0q", "sx", "zx"], ["x0"]),
            helper.make_node("DequantizeLinear", ["w0q", "s0", "z0"], ["w0"], axis=0),
            helper.make_node("Conv", ["x0", "w0"], ["c0"], kernel_shape=[1, 1]),
            helper.make_node("QuantizeLinear", ["c0", "sx", "zx"], ["xq"]),
        ]  # fmt: skip
        nodes.append(helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["r"]))
        nodes.append(helper.make_node("Add", ["a", "r"], ["s"]))
        last = "s"
    if float_out:
        nodes.append(helper.make_node("Identity", [last], ["yq"]))
        t = TensorProto.FLOAT
    else:
        nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]))
    graph = helper.make_graph(
        nodes, "qdq_pointwise", inputs,
        [helper.make_tensor_value_info("yq", t, [1, c_out, hw, hw])],  # fmt: skip
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


CASES = [
    pytest.param(24, 40, 9, "hardswish", False, np.uint8, id="hardswish-u8"),
    pytest.param(32, 32, 7, "hardswish", True, np.uint8, id="hardswish-residual"),
    pytest.param(16, 21, 6, "hardsigmoid", False, np.int8, id="hardsigmoid-s8-odd-n"),
    pytest.param(19, 19, 5, "relu", True, np.int8, id="relu-residual-s8-odd-c"),
    pytest.param(40, 72, 4, "clip", False, np.uint8, id="clip-tail-panel"),
]


def _check(m: onnx.ModelProto, feeds: dict, **options) -> list[str]:
    compiled = smelt.compile(m, profile=True, **options)
    (ours,) = compiled.run(feeds).values()
    (want,) = ort_outputs(m, feeds, optimized=False)
    assert ours.shape == want.shape and ours.dtype == want.dtype
    diff = np.abs(ours.astype(np.int64) - want.astype(np.int64))
    assert diff.max() <= 1, (diff.max(), np.count_nonzero(diff))
    # a step off only on a rounding tie of the float conv
    assert np.count_nonzero(diff) <= diff.size // 50, np.count_nonzero(diff)
    return [row.kernel for row in compiled.profile()]


@pytest.mark.parametrize("c_in, c_out, hw, act, residual, dtype", CASES)
def test_fused_gemm_epilogue(c_in, c_out, hw, act, residual, dtype):
    m = qdq_pointwise(c_in, c_out, hw, act, residual, dtype, seed=c_out)
    kernels = _check(m, feeds_of(m, seed=hw))
    assert any(k.startswith("quant_qgemm") for k in kernels), kernels
    # NCHW ↔ NHWC at the edges, a pmaddwd variant's widening, the GEMM: nothing
    # else (BN, the activation, the add: in the GEMM's store step)
    others = [
        k for k in kernels
        if not k.startswith(("quant_qgemm", "qgemm_widen", "transpose"))
    ]  # fmt: skip
    assert not others, kernels


@pytest.mark.parametrize(
    "cpu, w_max, variant",
    [
        pytest.param("x86-64-v3", 127, "pmaddwd256", id="avx2-pmaddwd"),
        pytest.param("x86-64-v3", 63, "maddubs256", id="avx2-maddubs-7bit"),
        pytest.param("x86-64-v3,+avxvnni", 127, "vnni256", id="avxvnni"),
        pytest.param("skylake-avx512", 127, "pmaddwd512", id="avx512-pmaddwd"),
    ],
)
@pytest.mark.parametrize("c, dtype", [(32, np.uint8), (19, np.int8)])
def test_gemm_epilogue_variants(cpu, w_max, variant, c, dtype):
    """Each micro-kernel family (8 and 16 lanes; the residual's masked tail
    loads at 19 columns) runs the program: within one step of onnxruntime."""
    m = qdq_pointwise(c, c, 5, "hardswish", True, dtype, seed=c, w_max=w_max)
    module = import_graph(m)
    lower(module, preset("cpu", "O2", cpu=cpu).split(",convert-graph-to-loop")[0])
    gemms = [op for op in module.walk() if isinstance(op, QGemmOp)]
    assert [op.attr("variant") for op in gemms][-1:] == [variant]
    assert str(gemms[-1].attr("epilogue")).startswith("deq y ")
    missing = CpuSpec.parse(cpu).features - host().features
    if missing:  # the IR above is checked on every host; the run needs the ISA
        pytest.skip(f"this CPU lacks {', '.join(sorted(missing))} to run {cpu}'s code")
    kernels = _check(m, feeds_of(m, seed=c + 1), cpu=cpu)
    assert not [k for k in kernels if k.startswith("fused")], kernels


def test_mutant_without_the_epilogue_fails(monkeypatch):
    """The micro-kernel storing the requantized value without its program: the
    check above must catch it."""
    from smelt.lowering.llvm import int8_gemm

    monkeypatch.setattr(int8_gemm, "emit_program", lambda b, p, y, post: b.fptosi(
        y, int8_gemm.ir.VectorType(int8_gemm.I32, y.type.count)))
    m = qdq_pointwise(32, 32, 7, "hardswish", True, np.uint8, seed=5)
    with pytest.raises(AssertionError):
        _check(m, feeds_of(m, seed=7))


def test_reference_executor_runs_the_gemm_epilogue():
    """The graph after O2's graph passes (one quant.qgemm with an epilogue
    program reading the residual in 8 bits), evaluated by the reference
    executor, is within a step of onnxruntime."""
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.pipelines import preset
    from smelt.reference.executor import run_graph

    m = qdq_pointwise(24, 24, 6, "hardswish", True, np.uint8, seed=3)
    feeds = feeds_of(m, seed=4)
    module = import_graph(m)
    lower(module, preset("cpu", "O2").split(",convert-graph-to-loop")[0])
    gemms = [op for op in module.walk() if op.name == "quant.qgemm"]
    assert len(gemms) == 2, [op.name for op in module.walk()]
    program = str(gemms[1].attrs().get("epilogue", ""))
    assert program.startswith("deq y ") and "; deq p" in program, program
    assert not any(op.name.startswith("graph.") and op.name not in (
        "graph.constant", "graph.transpose") for op in module.walk())
    (ours,) = run_graph(module, feeds).values()
    (want,) = ort_outputs(m, feeds, optimized=False)
    assert np.abs(ours.astype(np.int64) - want.astype(np.int64)).max() <= 1


@pytest.mark.parametrize(
    "c, dtype",
    [pytest.param(32, np.uint8, id="u8"), pytest.param(19, np.int8, id="s8-odd")],
)
def test_chain_that_ends_in_float(c, dtype, monkeypatch):
    """conv → Q → DQ → BN → HardSwish → + DQ(r), read as f32 (no quantize
    after it): the GEMM writes the f32 sum, bit for bit the graph's f32 ops in
    order (the reference executor on the unfused graph), and within f32
    rounding of onnxruntime's unoptimized run (its BatchNorm rounds otherwise)."""
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.pipelines import preset
    from smelt.passes.quant_epilogue import FuseDwEpilogue
    from smelt.reference.executor import run_graph

    m = qdq_pointwise(c, c, 6, "hardswish", True, dtype, seed=11, float_out=True)
    feeds = feeds_of(m, seed=12)
    compiled = smelt.compile(m, profile=True)
    (ours,) = compiled.run(feeds).values()
    kernels = [row.kernel for row in compiled.profile()]
    assert not [k for k in kernels if k.startswith("fused")], kernels
    (want,) = ort_outputs(m, feeds, optimized=False)
    assert ours.shape == want.shape and ours.dtype == want.dtype == np.float32
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(FuseDwEpilogue, "match_and_rewrite", lambda *a: None)
    module = import_graph(m)
    lower(module, preset("cpu", "O2").split(",convert-graph-to-loop")[0])
    assert any(op.name == "graph.fused" for op in module.walk())  # unfused
    (exact,) = run_graph(module, feeds).values()
    np.testing.assert_array_equal(ours, exact)


def test_block_stack_gemm_epilogues():
    """smelt.quantize's QDQ file of the PP-LCNet-style stack: after each
    pointwise / stem conv (a qgemm) the dequantize → BN → HardSwish [→ residual
    add] runs in its quant_qgemm kernel: no fused elementwise kernel is left;
    the logits within one output step of onnxruntime's int8 kernels."""
    from int8_oracle import ort_weight_bits
    from test_quant_depthwise import block_stack

    from smelt.compiler.check_quant import output_steps

    rng = np.random.default_rng(1)
    cal = {"input": rng.normal(0, 1, (4, 1, 3, 32, 32)).astype(np.float32)}
    qm = smelt.quantize(block_stack(), cal, reduce_range=ort_weight_bits() == 7).model
    x = {"input": rng.normal(0, 1, (1, 3, 32, 32)).astype(np.float32)}
    compiled = smelt.compile(qm, profile=True)
    (ours,) = compiled.run(x).values()
    (want,) = ort_outputs(qm, x, optimized=True)
    (step,) = output_steps(qm).values()
    assert np.abs(ours - want).max() <= step, (np.abs(ours - want).max(), step)
    rows = compiled.profile()
    assert not [r.kernel for r in rows if "elementwise" in r.kernel], rows
    for tag in ("stem", "pw0", "pw1", "pw2"):
        chain = f"{tag}c_DequantizeLinear"
        owners = [r.kernel for r in rows if any(chain in n for n in r.nodes)]
        assert owners and all(k.startswith("quant_qgemm") for k in owners), (
            chain, owners)  # fmt: skip
    # the last block's residual add (read by the float pool) too
    owners = [r.kernel for r in rows if any("Add_" in n for n in r.nodes)]
    assert owners and all(k.startswith("quant_qgemm") for k in owners), owners
