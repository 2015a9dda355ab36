"""Accuracy of a QDQ model against its fp32 original on the calibration set:
per-tensor SQNR, end-to-end cosine / max error / SQNR, and the sensitivity of each
quantized layer. Models run in onnxruntime, one sample at a time; only running sums
are kept (memory does not grow with the sample count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from smelt.errors import SmeltError
from smelt.quantize.calibration import Calibration, Runner

SQNR_CAP = 200.0  # dB reported for an exact tensor


def session(model: onnx.ModelProto, extra: list[str] = ()) -> Runner:
    """A function feeds → {name: array} running `model` in onnxruntime, with the
    tensors `extra` made graph outputs."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise SmeltError("smelt quantize needs onnxruntime: pip install onnxruntime")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in extra:
        if name not in have:
            have.add(name)
            info = helper.make_empty_tensor_value_info(name)
            info.type.tensor_type.elem_type = TensorProto.FLOAT
            m.graph.output.append(info)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        sess = ort.InferenceSession(
            m.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # onnxruntime's own exception types
        raise SmeltError(f"onnxruntime cannot load the model: {e}") from None
    names = [o.name for o in sess.get_outputs()]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(names, sess.run(names, feeds)))

    return run


def sqnr(signal: float, noise: float) -> float:
    """20·log10(‖x‖ / ‖x − x̂‖) from the sums of squares."""
    if noise <= 0:
        return SQNR_CAP
    if signal <= 0:
        return -SQNR_CAP
    return min(10.0 * math.log10(signal / noise), SQNR_CAP)


@dataclass
class _Sums:
    signal: float = 0.0  # Σ x²
    noise: float = 0.0  # Σ (x − x̂)²
    quant: float = 0.0  # Σ x̂²
    dot: float = 0.0  # Σ x·x̂
    max_abs: float = 0.0

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        x = np.asarray(x, np.float64).reshape(-1)
        y = np.asarray(y, np.float64).reshape(-1)
        d = x - y
        self.signal += float(x @ x)
        self.noise += float(d @ d)
        self.quant += float(y @ y)
        self.dot += float(x @ y)
        if d.size:
            self.max_abs = max(self.max_abs, float(np.max(np.abs(d))))

    @property
    def sqnr(self) -> float:
        return sqnr(self.signal, self.noise)

    @property
    def cosine(self) -> float:
        den = math.sqrt(self.signal * self.quant)
        return self.dot / den if den > 0 else (1.0 if self.noise == 0 else 0.0)


@dataclass
class OutputError:
    name: str
    cosine: float
    max_abs: float
    sqnr: float


@dataclass
class Accuracy:
    """What `measure` found: per output, per quantized activation (SQNR of its DQ
    value against fp32), per quantized layer (output SQNR and the noise it adds)."""

    outputs: list[OutputError]
    tensors: dict[str, float] = field(default_factory=dict)
    layers: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=1.0)

    @property
    def sqnr(self) -> float:
        return min((o.sqnr for o in self.outputs), default=SQNR_CAP)

    def sensitivity(self, name: str) -> float:
        """Noise power the layer adds, relative to the signal: 10^(−out/10) −
        10^(−in/10), `in` the SQNR of its float inputs before their Q."""
        sqnr_in, sqnr_out = self.layers[name]
        return 10 ** (-sqnr_out / 10) - 10 ** (-sqnr_in / 10)


def measure(
    fp32: onnx.ModelProto,
    qdq: onnx.ModelProto,
    calibration: Calibration,
    tensors: dict[str, str],
    layers: dict[str, tuple[list[str], str]],
) -> Accuracy:
    """Run both models over the calibration set. `tensors` maps an fp32 activation
    to its DQ output in `qdq`; `layers` maps a quantized node to (its float inputs,
    its output)."""
    outputs = [o.name for o in fp32.graph.output]
    watched = set(tensors) | {t for ins, out in layers.values() for t in [*ins, out]}
    watched = sorted(watched)
    inputs = {i.name for i in fp32.graph.input}
    extra = [t for t in watched if t not in inputs]
    ref_run = session(fp32, extra)
    q_run = session(qdq, sorted(set(tensors.values()) | set(extra)))
    out_sums = {n: _Sums() for n in outputs}
    t_sums = {t: _Sums() for t in tensors}
    w_sums = {t: _Sums() for t in watched}
    for feeds in calibration.samples():
        ref, got = {**feeds, **ref_run(feeds)}, {**feeds, **q_run(feeds)}
        for n in outputs:
            out_sums[n].add(ref[n], got[n])
        for t, dq in tensors.items():
            t_sums[t].add(ref[t], got[dq])
        for t in watched:
            w_sums[t].add(ref[t], got[t])
    acc = Accuracy(
        [OutputError(n, s.cosine, s.max_abs, s.sqnr) for n, s in out_sums.items()],
        {t: s.sqnr for t, s in t_sums.items()},
    )
    for name, (ins, out) in layers.items():
        sqnr_in = min((w_sums[t].sqnr for t in ins), default=SQNR_CAP)
        acc.layers[name] = (sqnr_in, w_sums[out].sqnr)
    return acc


@dataclass(frozen=True)
class Budget:
    """An accuracy target on the outputs: SQNR in dB or cosine similarity."""

    kind: str  # "sqnr" or "cos"
    value: float

    @staticmethod
    def parse(text: str) -> Budget:
        key, sep, value = str(text).partition("=")
        if not sep:
            key, value = "sqnr", key
        key = key.strip().lower()
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if key not in ("sqnr", "cos", "cosine") or math.isnan(number):
            raise SmeltError(
                f"bad accuracy budget '{text}': write an output SQNR in dB (30, "
                "sqnr=30) or a cosine (cos=0.999)"
            )
        return Budget("cos" if key.startswith("cos") else "sqnr", number)

    def met(self, acc: Accuracy) -> bool:
        got = acc.cosine if self.kind == "cos" else acc.sqnr
        return got >= self.value

    def __str__(self) -> str:
        if self.kind == "cos":
            return f"cos ≥ {self.value:g}"
        return f"SQNR ≥ {self.value:g} dB"
