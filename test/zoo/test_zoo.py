"""Every zoo model (both torch.onnx exporters, small configurations) compiles at O2
with 1 and 2 threads and matches onnxruntime to 1e-4 (max |a - b| / max |b| per
output)."""

import numpy as np
import onnxruntime as ort
import pytest
import zoo

import smelt

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
CASES = [(name, ex) for name in zoo.MODELS for ex in zoo.EXPORTERS]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - want))) / scale


@pytest.mark.parametrize("name,exporter", CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_zoo_model_matches_onnxruntime(name, exporter):
    path = zoo.build(name, "small", exporter)
    feeds = zoo.inputs(name, "small")
    want = ort.InferenceSession(str(path)).run(None, feeds)
    for threads in (1, 2):
        model = smelt.compile(str(path), "cpu", level="O2", threads=threads)
        got = model.run(feeds)
        assert len(got) == len(want)
        for (out, g), w in zip(got.items(), want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype, out
            assert relative_error(g, w) <= 1e-4, (out, threads)
