"""An onnxruntime-optimized BERT (onnxruntime.transformers.optimizer's output:
Attention, SkipLayerNormalization, BiasGelu / FastGelu, EmbedLayerNormalization
from com.microsoft)
compiles with smelt and matches onnxruntime on the same file. The model is a
2-layer transformers BertModel built from its config (no hub download), its
weights perturbed so no LayerNorm is the identity and no bias is zero."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

import smelt

HIDDEN, HEADS, BATCH, SEQ = 64, 4, 2, 16


def _bert(path, hidden_act: str, dynamic: bool) -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=2,
        num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
        max_position_embeddings=4 * SEQ, hidden_act=hidden_act,
    )  # fmt: skip
    config._attn_implementation = "eager"  # the pattern the optimizer fuses
    bert = BertModel(config).eval()
    with torch.no_grad():
        for p in bert.parameters():
            p.add_(0.1 * torch.randn_like(p))

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask, types):
            out = self.bert(input_ids=ids, attention_mask=mask,
                            token_type_ids=types, return_dict=False)  # fmt: skip
            return out[0], out[1]

    ids = torch.randint(0, 100, (BATCH, SEQ))
    ones = torch.ones((BATCH, SEQ), dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(
        Outputs(), (ids, ones, torch.zeros_like(ones)), str(path), dynamo=False,
        opset_version=17, input_names=names,
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_axes={n: {0: "batch", 1: "seq"} for n in names} if dynamic else None,
    )  # fmt: skip


@pytest.mark.parametrize(
    "hidden_act, gelu, dynamic",
    [("gelu", "BiasGelu", False), ("gelu_new", "FastGelu", False),
     ("gelu", "BiasGelu", True)],
)  # fmt: skip
def test_onnxruntime_optimized_bert_matches_onnxruntime(
    tmp_path, hidden_act, gelu, dynamic
):
    """Exported at fixed shapes, or with batch and sequence dims named (the
    optimizer then fuses the embeddings into EmbedLayerNormalization; smelt
    compiles it at the feeds' shapes)."""
    from onnxruntime.transformers.optimizer import optimize_model

    _bert(tmp_path / "bert.onnx", hidden_act, dynamic)
    optimize_model(
        str(tmp_path / "bert.onnx"), model_type="bert", num_heads=HEADS,
        hidden_size=HIDDEN, opt_level=0,
    ).save_model_to_file(str(tmp_path / "optimized.onnx"))  # fmt: skip
    optimized = onnx.load(tmp_path / "optimized.onnx")
    ops = collections.Counter(
        n.op_type for n in optimized.graph.node if n.domain == "com.microsoft"
    )
    assert ops["Attention"] == 2 and ops["SkipLayerNormalization"] == 4, ops
    assert ops[gelu] == 2, ops
    assert ops["EmbedLayerNormalization"] == int(dynamic), ops
    feeds = _feeds()
    shapes = {name: v.shape for name, v in feeds.items()} if dynamic else None
    _check(optimized, feeds, shapes)


def _feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(0, 100, (BATCH, SEQ)).astype(np.int64),
        "attention_mask": (np.arange(SEQ) < np.array([[SEQ], [9]])).astype(np.int64),
        "token_type_ids": (np.arange(SEQ) >= np.array([[8], [5]])).astype(np.int64),
    }


def _check(model: onnx.ModelProto, feeds: dict, shapes: dict | None) -> None:
    data = model.SerializeToString()
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    compiled = smelt.compile(onnx.load_from_string(data), "cpu", input_shapes=shapes)
    got = compiled.run(feeds)
    for name, expected in zip(compiled.output_names, want, strict=True):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5,
                                   err_msg=name)  # fmt: skip


def test_quantize_dynamic_of_the_optimized_bert_matches_onnxruntime(tmp_path):
    """onnxruntime's quantize_dynamic of the optimized file (uint8 weights):
    QAttention, DynamicQuantizeLinear + MatMulInteger."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    _bert(tmp_path / "bert.onnx", "gelu", False)
    optimize_model(
        str(tmp_path / "bert.onnx"), model_type="bert", num_heads=HEADS,
        hidden_size=HIDDEN, opt_level=0,
    ).save_model_to_file(str(tmp_path / "optimized.onnx"))  # fmt: skip
    quantize_dynamic(
        str(tmp_path / "optimized.onnx"), str(tmp_path / "q.onnx"),
        weight_type=QuantType.QUInt8,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )  # fmt: skip
    model = onnx.load(tmp_path / "q.onnx")
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["QAttention"] == 2 and ops["MatMulInteger"] > 0, ops
    _check(model, _feeds(), None)
