"""The real-architecture set of the zoo (issue 30): the kinds of model real users
bring that the light set lacks, as plain torch modules with random weights (no
download): a PP-LCNet-style classifier (depthwise convs, HardSwish, squeeze-excite
with HardSigmoid), a DB-style text detector (FPN and a stride-2 ConvTranspose
head), a YOLOv8-style detector (SiLU convs, C2f blocks, decoupled head with DFL), a
CRNN (convs and a bidirectional LSTM) and a BERT-mini. `zoo.build` and `zoo.inputs`
take these names too; "small" shapes are for smoke tests, "real" for benchmarks.
"""

from __future__ import annotations

import numpy as np
from zoo import Spec, _hf, _tokens


def _torch():
    import torch

    return torch


def _conv(cin, cout, k=3, stride=1, groups=1, act="hardswish"):
    nn = _torch().nn
    acts = {"hardswish": nn.Hardswish, "relu": nn.ReLU, "silu": nn.SiLU}
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout), acts[act](),
    )  # fmt: skip


def _randomize_bn(model):
    """BatchNorm statistics away from (0, 1), so folding them is exercised."""
    torch = _torch()
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return model.eval()


def _pplcnet(size: str):
    torch = _torch()
    nn = torch.nn
    scale = 0.25 if size == "small" else 1.0

    def ch(c):
        return max(8, int(c * scale) // 8 * 8)

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            s = nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(self.pool(x)))))
            return x * s

    # (kernel, in, out, stride, squeeze-excite) as PP-LCNet x1.0
    blocks = [(3, 32, 64, 1, False), (3, 64, 128, 2, False), (3, 128, 128, 1, False),
              (3, 128, 256, 2, False), (3, 256, 256, 1, False), (3, 256, 512, 2, False)]
    blocks += [(5, 512, 512, 1, False)] * 5
    blocks += [(5, 512, 1024, 2, True), (5, 1024, 1024, 1, True)]
    layers = [_conv(3, ch(32), 3, 2)]
    for k, cin, cout, stride, se in blocks:
        layers.append(_conv(ch(cin), ch(cin), k, stride, groups=ch(cin)))
        if se:
            layers.append(SE(ch(cin)))
        layers.append(_conv(ch(cin), ch(cout), 1))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Conv2d(ch(1024), 1280, 1), nn.Hardswish(),
               nn.Flatten(), nn.Linear(1280, 1000)]
    return _randomize_bn(nn.Sequential(*layers))


def _dbnet(size: str):
    torch = _torch()
    nn = torch.nn
    width = 8 if size == "small" else 32

    class DB(nn.Module):
        def __init__(self):
            super().__init__()
            chans = [width, 2 * width, 4 * width, 8 * width]
            self.stem = nn.Sequential(_conv(3, width, 3, 2, act="relu"),
                                      _conv(width, width, 3, 2, act="relu"))
            self.stages = nn.ModuleList(
                [_conv(chans[max(i - 1, 0)], c, 3, 1 if i == 0 else 2, act="relu")
                 for i, c in enumerate(chans)])  # fmt: skip
            inner = 4 * width
            self.lateral = nn.ModuleList(
                [nn.Conv2d(c, inner, 1, bias=False) for c in chans])
            self.smooth = nn.ModuleList(
                [nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False) for _ in chans])
            self.head = nn.Sequential(
                _conv(inner, inner // 4, 3, act="relu"),
                nn.ConvTranspose2d(inner // 4, inner // 4, 2, 2),
                nn.BatchNorm2d(inner // 4), nn.ReLU(),
                nn.ConvTranspose2d(inner // 4, 1, 2, 2), nn.Sigmoid())

        def forward(self, x):
            feats, x = [], self.stem(x)
            for stage in self.stages:
                x = stage(x)
                feats.append(x)
            lat = [conv(f) for conv, f in zip(self.lateral, feats, strict=True)]
            for i in range(len(lat) - 1, 0, -1):
                up = nn.functional.interpolate(lat[i], scale_factor=2.0)
                lat[i - 1] = lat[i - 1] + up
            outs = [nn.functional.interpolate(conv(p), scale_factor=float(2**i))
                    for i, (conv, p) in enumerate(zip(self.smooth, lat, strict=True))]
            return self.head(torch.cat(outs, 1))

    return _randomize_bn(DB())


def _yolo(size: str):
    torch = _torch()
    nn = torch.nn
    w = 8 if size == "small" else 32  # YOLOv8n: 16; s: 32
    reg, classes = 16, 80

    def conv(cin, cout, k=3, s=1):
        return _conv(cin, cout, k, s, act="silu")

    class C2f(nn.Module):
        def __init__(self, cin, cout, n=1):
            super().__init__()
            self.c = cout // 2
            self.cv1 = conv(cin, 2 * self.c, 1)
            self.cv2 = conv((2 + n) * self.c, cout, 1)
            self.m = nn.ModuleList(
                nn.Sequential(conv(self.c, self.c), conv(self.c, self.c))
                for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).chunk(2, 1))
            for m in self.m:
                y.append(y[-1] + m(y[-1]))
            return self.cv2(torch.cat(y, 1))

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.b1 = nn.Sequential(
                conv(3, w, 3, 2), conv(w, 2 * w, 3, 2), C2f(2 * w, 2 * w),
                conv(2 * w, 4 * w, 3, 2), C2f(4 * w, 4 * w, 2))
            self.b2 = nn.Sequential(conv(4 * w, 8 * w, 3, 2), C2f(8 * w, 8 * w, 2))
            self.b3 = nn.Sequential(conv(8 * w, 16 * w, 3, 2), C2f(16 * w, 16 * w))
            self.up2, self.up1 = C2f(24 * w, 8 * w), C2f(12 * w, 4 * w)
            self.box = nn.ModuleList(
                nn.Sequential(conv(c, 4 * reg), conv(4 * reg, 4 * reg),
                              nn.Conv2d(4 * reg, 4 * reg, 1))
                for c in (4 * w, 8 * w, 16 * w))  # fmt: skip
            self.cls = nn.ModuleList(
                nn.Sequential(conv(c, 4 * w), conv(4 * w, 4 * w),
                              nn.Conv2d(4 * w, classes, 1))
                for c in (4 * w, 8 * w, 16 * w))  # fmt: skip
            self.register_buffer("bins", torch.arange(reg, dtype=torch.float32))

        def forward(self, x):
            p3 = self.b1(x)
            p4 = self.b2(p3)
            p5 = self.b3(p4)
            up = nn.functional.interpolate
            n4 = self.up2(torch.cat([up(p5, scale_factor=2.0), p4], 1))
            n3 = self.up1(torch.cat([up(n4, scale_factor=2.0), p3], 1))
            outs = []
            for i, f in enumerate((n3, n4, p5)):
                box = self.box[i](f).flatten(2)  # [1, 4·reg, cells]
                dist = box.view(1, 4, reg, -1).softmax(2)  # DFL
                dist = (dist * self.bins.view(1, 1, reg, 1)).sum(2)
                outs.append(torch.cat([dist, self.cls[i](f).flatten(2).sigmoid()], 1))
            return torch.cat(outs, 2)

    return _randomize_bn(Yolo())


def _crnn(size: str):
    torch = _torch()
    nn = torch.nn
    w = 16 if size == "small" else 64
    hidden = 32 if size == "small" else 256

    class CRNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.Sequential(
                _conv(3, w, act="relu"), nn.MaxPool2d(2),
                _conv(w, 2 * w, act="relu"), nn.MaxPool2d(2),
                _conv(2 * w, 4 * w, act="relu"), _conv(4 * w, 4 * w, act="relu"),
                nn.MaxPool2d((2, 1)), _conv(4 * w, 8 * w, act="relu"),
                _conv(8 * w, 8 * w, act="relu"), nn.MaxPool2d((4, 1)))  # H 32 -> 1
            self.rnn = nn.LSTM(8 * w, hidden, num_layers=2, bidirectional=True,
                               batch_first=True)
            self.fc = nn.Linear(2 * hidden, 97)

        def forward(self, x):
            f = self.convs(x).squeeze(2).permute(0, 2, 1)  # [1, W/4, C]
            h, _ = self.rnn(f)
            return self.fc(h).softmax(-1)

    return _randomize_bn(CRNN())


def _image(small: tuple[int, int], real: tuple[int, int]):
    def feeds(size: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
        h, w = small if size == "small" else real
        return {"image": rng.standard_normal((1, 3, h, w)).astype(np.float32)}

    return feeds


_BERT_MINI = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=4,
                  num_attention_heads=4, intermediate_size=1024,
                  max_position_embeddings=512)  # prajjwal1/bert-mini's shape
_BERT_TINY = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128,
                  max_position_embeddings=64)

ARCH: dict[str, Spec] = {
    "pplcnet": Spec("PP-LCNet-style classifier (depthwise, HardSwish, SE)",
                    _pplcnet, _image((32, 32), (224, 224))),
    "dbnet": Spec("DB-style text detector (FPN, stride-2 ConvTranspose head)",
                  _dbnet, _image((64, 64), (640, 640))),
    "yolov8": Spec("YOLOv8-style detector (SiLU, C2f, DFL head)",
                   _yolo, _image((64, 64), (640, 640))),
    "crnn": Spec("CRNN text recognizer (convs, bidirectional LSTM)",
                 _crnn, _image((32, 64), (32, 320))),
    "bert_mini": Spec("BERT-mini encoder, padding mask",
                      _hf("BertConfig", "BertModel", _BERT_TINY, _BERT_MINI),
                      _tokens(1, 16, 512, mask=True)),
}  # fmt: skip
