"""Smoke test of the real-architecture set (arch.py) in benchmarks/zoo.py: one tiny
model, 2 timed runs; its row reports an error against onnxruntime below 1e-4."""

import subprocess
import sys
from pathlib import Path

import arch
import pytest
import zoo

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SCRIPT = Path(__file__).parents[2] / "benchmarks" / "zoo.py"


def test_arch_set_named_and_buildable():
    assert set(arch.ARCH) == {"pplcnet", "dbnet", "yolov8", "crnn", "bert_mini"}
    assert zoo.spec("crnn") is arch.ARCH["crnn"]
    assert zoo.spec("bert") is zoo.MODELS["bert"]


def test_benchmark_runs_one_tiny_model():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "crnn", "--set", "arch", "--size", "small",
         "--threads", "1", "--repeat", "2", "--exporters", "torchscript"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| crnn |")]
    assert len(rows) == 1, out
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert float(cells[6]) <= 1e-4, rows[0]  # error against onnxruntime
    assert float(cells[-1]) > 0, rows[0]  # smelt / ort
