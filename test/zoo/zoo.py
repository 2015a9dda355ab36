"""A zoo of real architectures built by code: `transformers` models made from their
configuration classes with random weights (no hub access) and plain torch modules,
exported by torch.onnx (the dynamo exporter and the TorchScript one) at static shapes.

`build(name, size, exporter)` returns the path of the exported model, cached under
`$SMELT_ZOO_CACHE` (default ~/.cache/smelt/zoo) in a folder keyed by the versions of
torch, transformers and onnx, so nothing large enters git. `size` is "small" (tests)
or "real" (benchmarks). `inputs(name, size)` gives the feeds, seeded.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXPORTERS = ("dynamo", "torchscript")


@dataclass(frozen=True)
class Spec:
    family: str
    make: Callable[[str], object]  # size -> torch.nn.Module (eval mode)
    feeds: Callable[[str, np.random.Generator], dict[str, np.ndarray]]


def _hf(config_cls: str, model_cls: str, small: dict, real: dict):
    def make(size: str):
        import transformers

        config = getattr(transformers, config_cls)(**(small if size == "small" else real))
        config._attn_implementation = "eager"
        model = getattr(transformers, model_cls)(config)
        return _Outputs(model.eval())

    return make


class _Outputs:
    """Wraps a transformers model so that forward returns a tuple of tensors."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                out = self.model(*args, return_dict=False)
                return tuple(o for o in out if isinstance(o, torch.Tensor))

        return Wrapped().eval()


def _tokens(batch: int, seq: int, vocab: int, mask: bool):
    def feeds(size: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
        b, s = (batch, seq) if size == "small" else (1, 128)
        ids = rng.integers(0, vocab, (b, s)).astype(np.int64)
        out = {"input_ids": ids}
        if mask:
            m = np.ones((b, s), np.int64)
            m[0, s - s // 4 :] = 0  # padding at the end of the first sequence
            out["attention_mask"] = m
        return out

    return feeds


def _image(channels: int, small: int, real: int):
    def feeds(size: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
        side = small if size == "small" else real
        x = rng.standard_normal((1, channels, side, side)).astype(np.float32)
        return {"pixel_values": x}

    return feeds


class _Recurrent:
    def __new__(cls, size: str):
        import torch

        hidden = 32 if size == "small" else 256

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = torch.nn.LSTM(16, hidden, batch_first=True,
                                          bidirectional=True)
                self.gru = torch.nn.GRU(2 * hidden, hidden, batch_first=True)
                self.head = torch.nn.Linear(hidden, 10)

            def forward(self, x):
                h, _ = self.lstm(x)
                h, _ = self.gru(h)
                return self.head(h)

        return Model().eval()


def _sequence(steps_small: int, steps_real: int):
    def feeds(size: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
        t = steps_small if size == "small" else steps_real
        return {"x": rng.standard_normal((2, t, 16)).astype(np.float32)}

    return feeds


_BERT_SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=128,
                   max_position_embeddings=64)
_BERT_REAL = dict()  # bert-base
_GPT_SMALL = dict(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=64)
_LLAMA_SMALL = dict(vocab_size=512, hidden_size=64, intermediate_size=128,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    max_position_embeddings=64)
_VIT_SMALL = dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128)
_SWIN_SMALL = dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                   num_heads=[2, 4], window_size=4)
_CONVNEXT_SMALL = dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)
_MOBILENET_SMALL = dict(image_size=32, depth_multiplier=0.35)
_SEGFORMER_SMALL = dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                        hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                        decoder_hidden_size=32, num_labels=4, patch_sizes=[7, 3],
                        strides=[4, 2])

MODELS: dict[str, Spec] = {
    "bert": Spec("encoder transformer, padding mask",
                 _hf("BertConfig", "BertModel", _BERT_SMALL, _BERT_REAL),
                 _tokens(2, 16, 512, mask=True)),
    "gpt2": Spec("decoder transformer, causal mask",
                 _hf("GPT2Config", "GPT2Model", _GPT_SMALL, {}),
                 _tokens(2, 16, 512, mask=False)),
    "llama": Spec("decoder transformer (RoPE, GQA, RMSNorm), causal mask",
                  _hf("LlamaConfig", "LlamaModel", _LLAMA_SMALL,
                      dict(hidden_size=512, intermediate_size=1408,
                           num_hidden_layers=4, num_attention_heads=8,
                           num_key_value_heads=4)),
                  _tokens(2, 16, 512, mask=False)),
    "vit": Spec("vision transformer",
                _hf("ViTConfig", "ViTModel", _VIT_SMALL, {}),
                _image(3, 32, 224)),
    "swin": Spec("window-attention transformer",
                 _hf("SwinConfig", "SwinModel", _SWIN_SMALL, {}),
                 _image(3, 32, 224)),
    "convnext": Spec("modern convnet",
                     _hf("ConvNextConfig", "ConvNextModel", _CONVNEXT_SMALL, {}),
                     _image(3, 32, 224)),
    "mobilenet_v2": Spec("mobile convnet",
                         _hf("MobileNetV2Config", "MobileNetV2Model",
                             _MOBILENET_SMALL, {}),
                         _image(3, 32, 224)),
    "segformer": Spec("segmentation with an upsampling head",
                      _hf("SegformerConfig", "SegformerForSemanticSegmentation",
                          _SEGFORMER_SMALL, {}),
                      _image(3, 32, 512)),
    "lstm_gru": Spec("recurrent (bidirectional LSTM, GRU)", _Recurrent,
                     _sequence(12, 100)),
}


def cache_dir() -> Path:
    import onnx
    import torch

    try:
        import transformers

        tf = transformers.__version__
    except ImportError:
        tf = "none"
    root = Path(os.environ.get("SMELT_ZOO_CACHE", Path.home() / ".cache/smelt/zoo"))
    return root / f"torch{torch.__version__}-transformers{tf}-onnx{onnx.__version__}"


def spec(name: str) -> Spec:
    """The zoo model `name`: one of MODELS or of the real-architecture set
    (arch.py's ARCH)."""
    if name in MODELS:
        return MODELS[name]
    from arch import ARCH

    return ARCH[name]


def inputs(name: str, size: str, seed: int = 0) -> dict[str, np.ndarray]:
    return spec(name).feeds(size, np.random.default_rng(seed))


def build(name: str, size: str = "small", exporter: str = "dynamo") -> Path:
    """The exported ONNX file of zoo model `name` (built once, then cached)."""
    path = cache_dir() / f"{name}-{size}-{exporter}.onnx"
    if path.exists():
        return path
    import torch

    torch.manual_seed(0)
    model = spec(name).make(size)
    feeds = inputs(name, size)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, args, str(tmp), input_names=list(feeds), dynamo=exporter == "dynamo",
            opset_version=18 if exporter == "dynamo" else 17, external_data=False,
        )
    tmp.replace(path)
    return path
