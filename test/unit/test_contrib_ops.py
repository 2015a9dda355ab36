"""onnxruntime's com.microsoft contrib ops (the ones its optimizer writes),
imported as graph ops, compiled for the CPU and checked against onnxruntime's
own contrib kernels. Fixed seeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import smelt
from smelt.errors import InvalidModel, UnsupportedModel

MS = "com.microsoft"
RNG = np.random.default_rng(0)
TOL = dict(rtol=1e-5, atol=1e-5)


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def contrib_model(
    op: str,
    inputs: dict[str, np.ndarray],
    initializers: dict[str, np.ndarray] | None = None,
    outputs: int | list[str] = 1,
    order: list[str] | None = None,
    **attrs,
) -> onnx.ModelProto:
    """One com.microsoft node: `inputs` are graph inputs, `initializers`
    constants, its inputs named by `order` (default: both, in that order; ""
    for an absent one); `outputs` counts its outputs or names them ("" absent)."""
    initializers = initializers or {}
    names = order if order is not None else [*inputs, *initializers]
    outs = [f"y{i}" for i in range(outputs)] if isinstance(outputs, int) else outputs
    node = helper.make_node(op, names, outs, domain=MS, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(
                k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape
            )
            for k, v in inputs.items()
        ],
        [onnx.ValueInfoProto(name=o) for o in outs if o],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
    )


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def check(model: onnx.ModelProto, feeds: dict, tol=TOL) -> dict:
    want = ort_run(model, feeds)
    compiled = smelt.compile(model, "cpu")
    got = compiled.run(feeds)
    for name, expected in zip(compiled.output_names, want, strict=True):
        assert got[name].shape == expected.shape, name
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_allclose(got[name], expected, err_msg=name, **tol)
    return got


# ----- FusedMatMul -----------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, attrs",
    [
        ((3, 4), (4, 5), dict(alpha=0.5)),
        ((2, 4, 3), (2, 5, 4), dict(transA=1, transB=1, alpha=2.0)),
        ((2, 3, 4), (4, 5), dict(transA=0)),
        ((3, 2, 4), (2, 4, 5), dict(transBatchA=1)),  # A: [M, batch, K]
        ((2, 3, 4), (5, 2, 4), dict(transBatchB=1, transB=1)),  # B: [N, batch, K]
        ((4, 2, 3), (4, 2, 5), dict(transBatchA=1, transA=1, transBatchB=1)),
        ((3, 2, 6, 4), (2, 6, 4, 5), dict(transBatchA=1, alpha=-1.5)),
    ],
)
def test_fused_matmul(a, b, attrs):
    m = contrib_model("FusedMatMul", {"a": rand(*a), "b": rand(*b)}, **attrs)
    check(m, {"a": rand(*a), "b": rand(*b)})


def test_fused_matmul_batch_transpose_needs_one_rank_as_in_onnxruntime():
    m = contrib_model("FusedMatMul", {"a": rand(3, 2, 4), "b": rand(4, 5)},
                      transBatchA=1)  # fmt: skip
    feeds = {"a": rand(3, 2, 4), "b": rand(4, 5)}
    with pytest.raises(Exception, match="same rank"):
        ort_run(m, feeds)
    with pytest.raises(InvalidModel, match="FusedMatMul#0: transBatchA"):
        smelt.compile(m, "cpu")


# ----- Gelu family -----------------------------------------------------------


@pytest.mark.parametrize("op", ["Gelu", "FastGelu"])
def test_gelu_without_bias(op):
    x = rand(2, 5, 16, scale=3.0)
    check(contrib_model(op, {"x": x}), {"x": x})


@pytest.mark.parametrize("op", ["BiasGelu", "FastGelu"])
def test_gelu_with_bias(op):
    x = rand(2, 5, 16, scale=3.0)
    m = contrib_model(op, {"x": x}, {"bias": rand(16)})
    check(m, {"x": x})


def test_bias_gelu_with_a_computed_bias():
    x, bias = rand(3, 8, scale=2.0), rand(8)
    check(contrib_model("BiasGelu", {"x": x, "bias": bias}), {"x": x, "bias": bias})


# ----- SkipLayerNormalization ------------------------------------------------


@pytest.mark.parametrize(
    "skip_shape, with_beta, with_bias, outputs",
    [
        ((2, 5, 16), True, False, 1),
        ((2, 5, 16), True, True, 1),
        ((2, 5, 16), False, False, 1),
        ((5, 16), True, True, 1),  # a skip broadcast over the batch
        ((2, 5, 16), True, True, ["y0", "", "", "sum"]),  # the sum as output 3
        ((2, 5, 16), True, False, 4),  # mean and 1 / std too
    ],
)
def test_skip_layer_norm(skip_shape, with_beta, with_bias, outputs):
    x, skip = rand(2, 5, 16), rand(*skip_shape)
    weights = {"gamma": rand(16)}
    order = ["x", "skip", "gamma"]
    if with_beta:
        weights["beta"] = rand(16)
    if with_bias:
        weights["bias"] = rand(16)
        order += ["beta" if with_beta else "", "bias"]
    elif with_beta:
        order.append("beta")
    m = contrib_model("SkipLayerNormalization", {"x": x, "skip": skip}, weights,
                      outputs=outputs, order=order, epsilon=1e-5)  # fmt: skip
    check(m, {"x": x, "skip": skip})


@pytest.mark.parametrize("op", ["SkipLayerNormalization",
                                "SkipSimplifiedLayerNormalization"])  # fmt: skip
def test_skip_layer_norms_of_2d_tokens(op):
    x, skip = rand(7, 16), rand(7, 16)
    m = contrib_model(op, {"x": x, "skip": skip}, {"gamma": rand(16)}, epsilon=1e-5)
    check(m, {"x": x, "skip": skip})


def test_skip_simplified_layer_norm():
    x, skip = rand(2, 5, 16), rand(2, 5, 16)
    m = contrib_model("SkipSimplifiedLayerNormalization", {"x": x, "skip": skip},
                      {"gamma": rand(16), "bias": rand(16)},
                      outputs=["y0", "", "inv_rms", "sum"], epsilon=1e-6)  # fmt: skip
    check(m, {"x": x, "skip": skip})


# ----- EmbedLayerNormalization -------------------------------------------


@pytest.mark.parametrize(
    "segments, mask, position_ids, outputs",
    [(True, True, False, 2), (False, False, False, 2), (True, False, True, 3),
     (False, True, True, 3), (True, False, False, 2)],
)  # fmt: skip
def test_embed_layer_norm(segments, mask, position_ids, outputs):
    batch, seq, hidden = 2, 5, 16
    inputs = {"ids": RNG.integers(0, 30, (batch, seq)).astype(np.int32)}
    weights = {"words": rand(30, hidden), "positions": rand(8, hidden)}
    order = ["ids", "", "words", "positions", "", "gamma", "beta", "", ""]
    if segments:
        inputs["segments"] = RNG.integers(0, 2, (batch, seq)).astype(np.int32)
        weights["segment_table"] = rand(2, hidden)
        order[1], order[4] = "segments", "segment_table"
    weights |= {"gamma": rand(hidden), "beta": rand(hidden)}
    if mask:
        inputs["mask"] = np.array([[1, 1, 1, 0, 0], [1, 2, 1, 1, 0]], np.int32)
        order[7] = "mask"
    if position_ids:
        inputs["position_ids"] = RNG.integers(0, 8, (batch, seq)).astype(np.int32)
        order[8] = "position_ids"
    m = contrib_model("EmbedLayerNormalization", inputs, weights, outputs=outputs,
                      order=order, epsilon=1e-5)  # fmt: skip
    check(m, inputs)


# ----- Attention -------------------------------------------------------------


def _attention(batch=2, seq=6, hidden=16, heads=4, mask=None, sizes=None, **attrs):
    x = rand(batch, seq, hidden)
    width = sum(sizes) if sizes else 3 * hidden
    weights = {"w": rand(hidden, width, scale=0.3), "bias": rand(width)}
    inputs = {"x": x}
    order = ["x", "w", "bias"]
    if mask is not None:
        inputs["mask"] = mask
        order.append("mask")
    if sizes:
        attrs["qkv_hidden_sizes"] = sizes
    m = contrib_model("Attention", inputs, weights, order=order, num_heads=heads,
                      **attrs)  # fmt: skip
    return m, inputs


LENGTHS = np.array([6, 3], np.int32)


@pytest.mark.parametrize(
    "mask, attrs",
    [
        (None, {}),
        (LENGTHS, {}),  # key lengths
        (np.array([5, 4, 1, 0], np.int32), {}),  # ends, then starts
        (np.array([[1, 1, 1, 1, 0, 0], [1, 0, 1, 1, 1, 1]], np.int32), {}),
        (RNG.integers(0, 2, (2, 6, 6)).astype(np.int32), {}),  # (B, S, T)
        (LENGTHS, dict(unidirectional=1)),
        (None, dict(unidirectional=1, scale=0.3)),
        (LENGTHS, dict(mask_filter_value=-1e4 * 3)),
    ],
)
def test_attention(mask, attrs):
    m, feeds = _attention(mask=mask, **attrs)
    check(m, feeds)


@pytest.mark.parametrize("bias_batch", [1, 2])
def test_attention_with_an_attention_bias(bias_batch):
    m, feeds = _attention(mask=LENGTHS)
    bias = rand(bias_batch, 4, 6, 6)
    feeds["attention_bias"] = bias
    m.graph.input.append(
        helper.make_tensor_value_info("attention_bias", TensorProto.FLOAT, bias.shape)
    )
    m.graph.node[0].input.extend(["", "attention_bias"])
    check(m, feeds)


@pytest.mark.parametrize(
    "keys, mask, bias, attrs",
    [(6, None, False, {}), (9, "lengths", True, {}), (9, "raw", True, dict(scale=0.2)),
     (6, "raw", False, dict(unidirectional=1)), (7, None, True, {})],
)  # fmt: skip
def test_multi_head_attention(keys, mask, bias, attrs):
    batch, queries, hidden, v_hidden = 2, 6, 16, 8
    inputs = {"q": rand(batch, queries, hidden), "k": rand(batch, keys, hidden),
              "v": rand(batch, keys, v_hidden)}  # fmt: skip
    weights, order = {}, ["q", "k", "v", "", "", ""]
    if bias:
        weights["bias"] = rand(2 * hidden + v_hidden)
        order[3] = "bias"
    if mask == "lengths":
        inputs["mask"] = np.array([keys, 4], np.int32)
    elif mask == "raw":
        inputs["mask"] = RNG.integers(0, 2, (batch, keys)).astype(np.int32)
        inputs["mask"][:, 0] = 1
    if mask:
        order[4] = "mask"
    if keys == 7:
        inputs["attention_bias"] = rand(1, 4, queries, keys)
        order[5] = "attention_bias"
    m = contrib_model("MultiHeadAttention", inputs, weights, order=order, num_heads=4,
                      **attrs)  # fmt: skip
    check(m, inputs)


def test_attention_with_qkv_hidden_sizes():
    m, feeds = _attention(sizes=[16, 16, 8])
    check(m, feeds)


def test_attention_refuses_a_key_value_cache_naming_the_node():
    m, feeds = _attention()
    past = helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, 2, 4, 0, 4])
    m.graph.input.append(past)
    node = m.graph.node[0]
    node.name = "self_attn"
    node.input.extend(["", "past"])
    with pytest.raises(UnsupportedModel, match=r"Attention 'self_attn'.*past"):
        smelt.compile(m, "cpu")


def test_unsupported_attribute_is_refused_naming_node_and_attribute():
    m, _ = _attention(do_rotary=1)
    m.graph.node[0].name = "rot"
    with pytest.raises(UnsupportedModel, match=r"Attention 'rot'.*'do_rotary' = 1"):
        smelt.compile(m, "cpu")


# ----- MatMulNBits, QGemm ----------------------------------------------------


def _matmul_model(k: int, n: int, m: int = 3) -> onnx.ModelProto:
    w = numpy_helper.from_array(rand(k, n), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, m, n])], [w],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "k, n, block, symmetric",
    [(64, 8, 32, False), (80, 5, 16, True), (40, 6, 32, False)],
)
def test_matmul_nbits_from_onnxruntimes_quantizer(k, n, block, symmetric):
    """onnxruntime's own 4-bit weight quantizer writes the model (K = 40 leaves
    a part block; accuracy level 2 computes in float for float32 A)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        _matmul_model(k, n), block_size=block, is_symmetric=symmetric,
        accuracy_level=None if symmetric else 2,
    )  # fmt: skip
    quantizer.process()
    model = quantizer.model.model
    assert [node.op_type for node in model.graph.node] == ["MatMulNBits"]
    check(model, {"x": rand(2, 3, k)})


def _pack(values: np.ndarray, bits: int) -> np.ndarray:
    """bits-wide values, lowest bits first, into bytes along the last dim."""
    per = 8 // bits
    grouped = values.reshape(*values.shape[:-1], -1, per).astype(np.uint8)
    shifts = np.arange(per, dtype=np.uint8) * bits
    return np.bitwise_or.reduce(grouped << shifts, axis=-1).astype(np.uint8)


@pytest.mark.parametrize(
    "bits, zero_points, g_idx, bias",
    [(8, "packed", False, True), (2, "packed", False, False), (4, "float", False, True),
     (4, None, False, False), (4, "float", True, False), (4, None, True, True)],
)  # fmt: skip
def test_matmul_nbits_layouts(bits, zero_points, g_idx, bias):
    k, n, block = 64, 6, 16
    blocks = k // block
    q = RNG.integers(0, 1 << bits, (n, blocks, block))
    weights = {
        "b": _pack(q, bits).reshape(n, blocks, block * bits // 8),
        "scales": (RNG.random(n * blocks) * 0.1 + 0.01).astype(np.float32),
    }
    order = ["x", "b", "scales", "", "", ""]
    if zero_points == "packed":
        zp = RNG.integers(0, 1 << bits, (n, blocks))
        weights["zp"] = _pack(zp, bits).reshape(-1) if bits < 8 else zp.astype(np.uint8)
        order[3] = "zp"
    elif zero_points == "float":
        weights["zp"] = rand(n * blocks)
        order[3] = "zp"
    if g_idx:
        weights["g_idx"] = RNG.permutation(np.arange(k) // block).astype(np.int32)
        order[4] = "g_idx"
    if bias:
        weights["bias"] = rand(n)
        order[5] = "bias"
    x = rand(2, 3, k)
    m = contrib_model("MatMulNBits", {"x": x}, weights, order=order, K=k, N=n,
                      bits=bits, block_size=block)  # fmt: skip
    check(m, {"x": x})


@pytest.mark.parametrize(
    "trans, per_column, with_c, quantized",
    [(False, False, False, False), (True, True, True, False),
     (False, True, True, True), (True, False, False, True)],
)  # fmt: skip
def test_qgemm(trans, per_column, with_c, quantized):
    m_, k, n = 4, 24, 7
    a = RNG.integers(0, 256, (k, m_) if trans else (m_, k)).astype(np.uint8)
    b = RNG.integers(-128, 128, (n, k) if trans else (k, n)).astype(np.int8)
    weights = {
        "a_scale": np.array(0.02, np.float32), "a_zp": np.array(128, np.uint8),
        "b": b,
        "b_scale": (RNG.random(n) * 0.01 + 0.005).astype(np.float32)
        if per_column else np.array(0.01, np.float32),
        "b_zp": np.zeros(n, np.int8) if per_column else np.array(0, np.int8),
    }  # fmt: skip
    order = ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp"]
    if with_c or quantized:
        order.append("c" if with_c else "")
    if with_c:
        weights["c"] = RNG.integers(-5000, 5000, n).astype(np.int32)
    if quantized:
        weights["y_scale"] = np.array(0.15, np.float32)
        weights["y_zp"] = np.array(100, np.uint8)
        order += ["y_scale", "y_zp"]
    attrs = dict(transA=1, transB=1) if trans else {}
    model = contrib_model("QGemm", {"a": a}, weights, order=order, alpha=0.5, **attrs)
    check(model, {"a": a})


def test_matmul_nbits_refuses_packed_zero_points_with_g_idx():
    """onnxruntime subtracts 8 there, whatever the zero points say: refused."""
    k, n, block = 32, 2, 16
    weights = {
        "b": _pack(RNG.integers(0, 16, (n, 2, block)), 4).reshape(n, 2, block // 2),
        "scales": np.full(n * 2, 0.1, np.float32),
        "zp": _pack(np.full((n, 2), 3), 4).reshape(-1),
        "g_idx": (np.arange(k) // block).astype(np.int32),
    }
    x = rand(1, k)
    m = contrib_model("MatMulNBits", {"x": x}, weights, K=k, N=n, bits=4,
                      block_size=block)  # fmt: skip
    with pytest.raises(UnsupportedModel, match="MatMulNBits#0: packed uint8 zero_po"):
        smelt.compile(m, "cpu")


def test_matmul_nbits_refuses_accuracy_level_4():
    """onnxruntime quantizes A to int8 there: not the float product."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(_matmul_model(64, 8), block_size=32,
                                     accuracy_level=4)  # fmt: skip
    quantizer.process()
    with pytest.raises(UnsupportedModel, match="'accuracy_level' = 4"):
        smelt.compile(quantizer.model.model, "cpu")
