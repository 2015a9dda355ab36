"""quant.qgemm (quant-pack-gemm + lowering/llvm/int8_gemm.py) against a numpy
integer reference, bit for bit: odd M / K / N (tails of every tile), u8 and s8
activations, per-tensor and per-channel weight scales, relu, and each micro-kernel
variant (vpdpbusd 512 / 256, vpmaddwd 512 / 256) on CPUs this host can run."""

from __future__ import annotations

import re

import numpy as np
import pytest
from int8_oracle import ORT_INT8_EXACT, ort_outputs
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import StringAttr

import smelt
from smelt.compiler.driver import import_graph, lower
from smelt.compiler.pipelines import preset, split
from smelt.dialects import locations
from smelt.dialects.quant_gemm import (
    VARIANTS,
    QGemmOp,
    choose_variant,
    pack_weights,
    pairs_fit,
    units,
    unpack_weights,
)
from smelt.targets.cpu_spec import CpuSpec, host

QDQ = "quant-fold-qdq,quant-pack-gemm"

# cpu → the variant quant-pack-gemm picks for s8-representable weights
CPUS = {
    "x86-64-v3": "pmaddwd256",
    "x86-64-v3,+avxvnni": "vnni256",
    "skylake-avx512": "pmaddwd512",
    "host": choose_variant(host().has),
}


def _expected_variant(model, cpu: str) -> str | None:
    """CPUS[cpu], but without VNNI the maddubs variant of the same width where the
    (random) weights happen to fit it (small K)."""
    name = CPUS[cpu]
    w = next(numpy_helper.to_array(t) for t in model.graph.initializer
             if t.name == "w_q")  # fmt: skip
    if name and name.startswith("pmaddwd") and w.dtype == np.int8 and pairs_fit(w):
        return name.replace("pmaddwd", "maddubs")
    return name


def _runs_here(cpu: str) -> bool:
    spec = CpuSpec.parse(cpu)
    return spec.features <= host().features


def qdq_matmul(m, k, n, act, per_channel, relu, weight="s8", seed=0, lead=(),
               w_q=None, x_q=None):  # fmt: skip
    """x_q → DequantizeLinear → MatMul(DQ(w_q)) → Add(b) → [Relu] →
    QuantizeLinear, and the numpy reference of what quant-fold-qdq computes for it
    (w_q [k, n] and x_q [*lead, m, k] random unless given)."""
    rng = np.random.default_rng(seed)
    x_t = np.uint8 if act == "u8" else np.int8
    w_t = np.int8 if weight == "s8" else np.uint8
    z_x = x_t(117 if act == "u8" else -9)
    z_y = x_t(100 if act == "u8" else 5)
    lo, hi = np.iinfo(w_t).min, np.iinfo(w_t).max
    w_q = rng.integers(lo, hi + 1, (k, n)).astype(w_t) if w_q is None else w_q
    z_w = w_t(0 if weight == "s8" else 3)
    s_w = (rng.random(n if per_channel else 1) * 0.02 + 0.005).astype(np.float32)
    s_x, s_y = np.float32(0.05), np.float32(0.5 if k > 64 else 0.08)
    b = (rng.standard_normal(n) * 0.3).astype(np.float32)
    inits = {
        "s_x": np.array(s_x), "z_x": np.array(z_x), "w_q": w_q,
        "s_w": s_w if per_channel else s_w.reshape(()),
        "z_w": np.full(n, z_w) if per_channel else np.array(z_w),
        "b": b, "s_y": np.array(s_y), "z_y": np.array(z_y),
    }  # fmt: skip
    last = "r" if relu else "a"
    nodes = [
        helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x"]),
        helper.make_node("DequantizeLinear", ["w_q", "s_w", "z_w"], ["w"], axis=1),
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["a"]),
        *([helper.make_node("Relu", ["a"], ["r"])] if relu else []),
        helper.make_node("QuantizeLinear", [last, "s_y", "z_y"], ["y"]),
    ]
    elem = TensorProto.UINT8 if act == "u8" else TensorProto.INT8
    g = helper.make_graph(
        nodes, "qmm",
        [helper.make_tensor_value_info("x_q", elem, [*lead, m, k])],
        [helper.make_tensor_value_info("y", elem, [*lead, m, n])],
        [numpy_helper.from_array(a, name) for name, a in inits.items()],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    if x_q is None:
        x_q = rng.integers(np.iinfo(x_t).min, np.iinfo(x_t).max + 1, (*lead, m, k))
        x_q = x_q.astype(x_t)
    # the reference: integer accumulation, the f32 requantization
    s_wn = np.broadcast_to(s_w, (n,)).astype(np.float64)
    acc = (x_q.astype(np.int64) - int(z_x)) @ (w_q.astype(np.int64) - int(z_w))
    acc = acc + np.rint(b / (float(s_x) * s_wn)).astype(np.int64)
    mult = (s_x * np.broadcast_to(s_w, (n,))) / s_y
    scaled = acc.astype(np.float32) * mult.astype(np.float32)
    y = np.rint(scaled.astype(np.float64)) + int(z_y)
    info = np.iinfo(x_t)
    y = np.clip(y, max(info.min, int(z_y)) if relu else info.min, info.max)
    return model, x_q, y.astype(x_t).reshape(*lead, m, n)


def _compile(model, cpu: str, pack: bool = True):
    """The CPU preset (which packs QDQ matmuls), or it without quant-pack-gemm."""
    if pack:
        return smelt.compile(model, "cpu", cpu=cpu)
    pipeline = preset("cpu", cpu=cpu).replace(",quant-pack-gemm", "")
    return smelt.compile(model, "cpu", pipeline=pipeline, cpu=cpu)


def _variants(model, cpu: str) -> list[str]:
    module = import_graph(model)
    spec = split(preset("cpu", cpu=cpu))[0]
    lower(module, f"{spec},graph-fold-constants,graph-simplify,{QDQ}")
    return [op.attr("variant") for op in module.walk() if isinstance(op, QGemmOp)]


def _run(program, x_q):
    out = program.run({"x_q": x_q})
    return list(out.values())[0] if isinstance(out, dict) else out[0]


# (300, 40, 200): 8 row blocks of 40 rows (the last 20) × 2 column chunks (the
# last 3 panels, one a tail of 8 columns): every branch of a unit
SHAPES = [(5, 13, 37), (17, 130, 50), (1, 3, 1), (300, 40, 200)]


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("act", ["u8", "s8"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_exact(cpu, act, shape):
    if not _runs_here(cpu) or CPUS[cpu] is None:
        pytest.skip(f"this host cannot run {cpu}, or it has no int8 GEMM")
    m, k, n = shape
    relu = m % 2 == 1
    model, x_q, expected = qdq_matmul(m, k, n, act, per_channel=m != 17, relu=relu)
    assert _variants(model, cpu) == [_expected_variant(model, cpu)]
    got = _run(_compile(model, cpu), x_q)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def _seven_bit_pairs(k: int, n: int, seed: int = 3) -> np.ndarray:
    """s8 weights whose k pairs reach vpmaddubsw's limit (|w0| + |w1| = 128 in
    most columns: (64, 64), (-64, -64), (127, 1), (-128, 0), ...), random below."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-64, 65, (k, n))
    edge = [(64, 64), (-64, -64), (127, 1), (-128, 0), (1, -127), (0, 0)]
    for j in range(n):
        for i in range(0, k - 1, 2):
            if (i + j) % 3:
                w[i : i + 2, j] = edge[(i // 2 + j) % len(edge)]
    return w.astype(np.int8)


@pytest.mark.parametrize("cpu", ["x86-64-v3", "skylake-avx512"])
@pytest.mark.parametrize("act", ["u8", "s8"])
def test_vpmaddubsw_for_weights_whose_pairs_cannot_saturate(cpu, act):
    """Without VNNI, 7-bit-pair weights take vpmaddubsw + vpmaddwd (maddubs*): exact
    at the limit of its i16 pair sums, with every x at its extreme (255 · 128)."""
    w = _seven_bit_pairs(131, 45)
    assert pairs_fit(w)
    assert pairs_fit(np.array([[64, -127], [-64, 1]]))
    assert not pairs_fit(np.array([[64, 0], [-65, 0]]))
    assert not pairs_fit(np.array([[0], [0], [-128], [1]]))
    x_t = np.uint8 if act == "u8" else np.int8
    rng = np.random.default_rng(4)
    x_q = rng.choice([np.iinfo(x_t).min, np.iinfo(x_t).max], (9, 131)).astype(x_t)
    model, x_q, expected = qdq_matmul(9, 131, 45, act, True, False, w_q=w, x_q=x_q)
    wide = "512" if "avx512" in cpu else "256"
    assert _variants(model, cpu) == [f"maddubs{wide}"]
    if not _runs_here(cpu):
        pytest.skip(f"this host cannot run {cpu}")
    np.testing.assert_array_equal(_run(_compile(model, cpu), x_q), expected)


def test_full_range_weights_keep_vpmaddwd_without_vnni():
    model, x_q, expected = qdq_matmul(5, 13, 37, "u8", True, False)
    assert _variants(model, "x86-64-v3") == ["pmaddwd256"]


def test_u8_weights_fall_back_to_vpmaddwd():
    """w_q − z_w outside s8 (u8 weights): vpdpbusd cannot take it; vpmaddwd can."""
    cpu = "x86-64-v3,+avxvnni"
    if not _runs_here(cpu):
        pytest.skip(f"this host cannot run {cpu}")
    model, x_q, expected = qdq_matmul(7, 21, 19, "s8", True, False, weight="u8")
    assert _variants(model, cpu) == ["pmaddwd256"]
    np.testing.assert_array_equal(_run(_compile(model, cpu), x_q), expected)


def test_batched_input_and_threads():
    """x [B, S, K] (M = B · S rows) in a program that runs on two threads."""
    model, x_q, expected = qdq_matmul(4, 33, 70, "s8", True, True, lead=(3,))
    assert _variants(model, "host") == ([CPUS["host"]] if CPUS["host"] else [])
    program = smelt.compile(model, "cpu", threads=2)
    np.testing.assert_array_equal(_run(program, x_q), expected)


def test_generic_path_agrees():
    """Without quant-pack-gemm (the i32 loop nest) the answer is the same."""
    model, x_q, expected = qdq_matmul(6, 40, 24, "u8", True, True)
    np.testing.assert_array_equal(
        _run(_compile(model, "host", pack=False), x_q), expected
    )


def test_no_packing_without_avx2():
    model, x_q, expected = qdq_matmul(4, 8, 8, "u8", False, False)
    assert _variants(model, "x86-64") == []
    assert "quant-fold-qdq" not in preset("cpu", cpu="x86-64")
    assert "quant-pack-gemm" in preset("cpu", cpu="x86-64-v3")
    np.testing.assert_array_equal(_run(_compile(model, "x86-64"), x_q), expected)


@pytest.mark.parametrize("cpu", ["x86-64-v3", "skylake-avx512"])
def test_vpmaddwd_kernel_broadcasts_widened_pairs(cpu):
    """The pmaddwd micro-kernels read x widened to i16 by a kernel of its own: each
    row's k pair is one vpbroadcastd from memory, with no byte loads or inserts
    in the kernel (checked in assembly: runs on any host)."""
    model, _, _ = qdq_matmul(17, 130, 50, "u8", True, True)
    asm = smelt.compile(model, "cpu", cpu=cpu).program.asm
    assert "smelt.kernel.qgemm_widen_0:" in asm
    found = re.search(r"^smelt\.kernel\.quant_qgemm_\d+:\n(.*?)\.Lfunc_end", asm,
                      re.S | re.M)  # fmt: skip
    assert found, "no qgemm kernel in the assembly"
    body = found.group(1)
    assert "vpmaddwd" in body
    assert re.search(r"vpbroadcastd\s+-?\d*\(", body)
    assert not re.search(r"\bmov[sz]b|vpinsr|vmovd\s+%e", body)


@pytest.mark.parametrize("variant", ["vnni512", "pmaddwd256"])
def test_pack_round_trip(variant):
    w = np.random.default_rng(1).integers(-128, 128, (11, 35))
    np.testing.assert_array_equal(unpack_weights(pack_weights(w, variant), 11, 35), w)


def qdq_linear(m, k, n, act, tail: str, seed=0):
    """x_q → DQ → MatMul(DQ(w_q)) then `tail`: "q_add" (→ Q → DQ → Add(DQ(b_q))
    → Q, onnxruntime's bias pattern), "q_add_relu" (the same with a Relu before
    the last Q) or "float" (→ Add(b) → Tanh, a float output: no Q after the
    MatMul)."""
    rng = np.random.default_rng(seed)
    x_t = np.uint8 if act == "u8" else np.int8
    elem = TensorProto.UINT8 if act == "u8" else TensorProto.INT8
    z = {"u8": (120, 97, 131), "s8": (-7, 3, -11)}[act]
    inits = {
        "s_x": np.array(0.04, np.float32), "z_x": np.array(z[0], x_t),
        "w_q": rng.integers(-127, 128, (k, n)).astype(np.int8),
        "s_w": (rng.random(n) * 0.02 + 0.004).astype(np.float32),
        "z_w": np.zeros(n, np.int8),
        "s_h": np.array(0.3, np.float32), "z_h": np.array(z[1], x_t),
        "b_q": rng.integers(0, 256, n).astype(np.uint8),
        "s_b": np.array(0.01, np.float32), "z_b": np.array(128, np.uint8),
        "b": (rng.standard_normal(n) * 0.5).astype(np.float32),
        "s_y": np.array(0.35, np.float32), "z_y": np.array(z[2], x_t),
    }  # fmt: skip
    node = helper.make_node
    nodes = [
        node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x"]),
        node("DequantizeLinear", ["w_q", "s_w", "z_w"], ["w"], axis=1),
        node("MatMul", ["x", "w"], ["mm"]),
    ]
    out_elem = elem
    if tail == "float":
        nodes += [node("Add", ["mm", "b"], ["a"]), node("Tanh", ["a"], ["y"])]
        out_elem = TensorProto.FLOAT
    else:
        last = "r" if tail == "q_add_relu" else "a"
        nodes += [
            node("QuantizeLinear", ["mm", "s_h", "z_h"], ["h_q"]),
            node("DequantizeLinear", ["h_q", "s_h", "z_h"], ["h"]),
            node("DequantizeLinear", ["b_q", "s_b", "z_b"], ["bd"]),
            node("Add", ["h", "bd"], ["a"]),
            *([node("Relu", ["a"], ["r"])] if tail == "q_add_relu" else []),
            node("QuantizeLinear", [last, "s_y", "z_y"], ["y"]),
        ]
    g = helper.make_graph(
        nodes, "qlinear",
        [helper.make_tensor_value_info("x_q", elem, [m, k])],
        [helper.make_tensor_value_info("y", out_elem, [m, n])],
        [numpy_helper.from_array(a, name) for name, a in inits.items()],
    )  # fmt: skip
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    info = np.iinfo(x_t)
    x_q = rng.integers(info.min, info.max + 1, (m, k)).astype(x_t)
    return model, x_q


def _epilogues(model, cpu: str) -> list[str]:
    module = import_graph(model)
    spec = split(preset("cpu", cpu=cpu))[0]
    lower(module, f"{spec},graph-fold-constants,graph-simplify,{QDQ}")
    return [
        op.attr("epilogue", "requantize")
        for op in module.walk()
        if isinstance(op, QGemmOp)
    ]


EPILOGUE = {"q_add": "affine_requantize", "q_add_relu": "affine_requantize",
            "float": "dequantize"}  # fmt: skip


@pytest.mark.parametrize("tail", list(EPILOGUE))
def test_a_qgemm_names_the_nodes_it_replaces(tail):
    """Each fold that makes or rewrites a qgemm (the float-output fold, the bias
    epilogue's) keeps the ONNX nodes' names: profiles and errors map the kernel
    back to its MatMul (built for x86-64-v3: the passes run on any host)."""
    model, _ = qdq_linear(9, 70, 37, "u8", tail)
    module = import_graph(model)
    lower(module, preset("cpu", cpu="x86-64-v3"))
    kernels = [op for op in module.ops if "quant_qgemm" in getattr(op, "sym_name",
               StringAttr("")).data]  # fmt: skip
    assert len(kernels) == 1
    names = locations.names(kernels[0])
    assert "MatMul#2" in names, names


@pytest.mark.parametrize("cpu", list(CPUS))
@pytest.mark.parametrize("act", ["u8", "s8"])
@pytest.mark.parametrize("tail", list(EPILOGUE))
def test_epilogues_match_the_unpacked_chain(cpu, act, tail):
    """The bias-add and float epilogues compute each f32 step of the ops they
    replace: the packed kernel equals the generic i32 loops bit for bit (float:
    within an ulp, the generic kernel may contract mul + add into an fma), and
    onnxruntime within one output step (float: within f32 rounding)."""
    if not _runs_here(cpu) or CPUS[cpu] is None:
        pytest.skip(f"this host cannot run {cpu}, or it has no int8 GEMM")
    model, x_q = qdq_linear(9, 70, 37, act, tail)
    assert _epilogues(model, cpu) == [EPILOGUE[tail]]
    got = _run(_compile(model, cpu), x_q)
    generic = _run(_compile(model, cpu, pack=False), x_q)
    if tail == "float":
        np.testing.assert_allclose(got, generic, rtol=1e-6, atol=1e-7)
    else:
        np.testing.assert_array_equal(got, generic)
    # the weights are 8-bit: onnxruntime's int8 kernels are exact for them only
    # with VNNI, elsewhere its QDQ graph as written is the oracle (int8_oracle.py)
    theirs = ort_outputs(model, {"x_q": x_q}, optimized=ORT_INT8_EXACT)[0]
    assert got.dtype == theirs.dtype
    if tail == "float":
        np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)
    else:
        diff = np.abs(got.astype(np.int32) - theirs.astype(np.int32))
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.99


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize(
    "m,k,n", [(1, 3, 1), (300, 40, 200), (64, 1024, 4096), (12544, 147, 64)]
)
def test_units_cover_the_gemm(variant, m, k, n):
    """Row blocks and column chunks cover every row and panel once, the last of
    each possibly shorter."""
    u = units(m, k, n, variant)
    v = VARIANTS[variant]
    panels = -(-n // v.nr)
    assert (u.row_blocks - 1) * u.block_rows < m <= u.row_blocks * u.block_rows
    assert (u.chunks - 1) * u.chunk_panels < panels <= u.chunks * u.chunk_panels
    assert u.block_rows % v.mr == 0
