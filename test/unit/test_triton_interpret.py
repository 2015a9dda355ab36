"""Generated Triton kernels run in Triton's interpreter on CPU torch tensors and
match onnxruntime / numpy. The interpreter is slow (about a second per launch on
real sizes), so the cases are few and tiny; each runs in a fresh process with
TRITON_INTERPRET=1, the environment a user sets to pick the interpreter (read
once, when smelt.compile makes its CompileOptions: the device "cpu")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # this checkout's smelt
CASES = [
    "mlp_through_smelt_compile",
    "encoder_layer",
    "conv_batchnorm_relu_and_pools",
    "rows_longer_than_one_block",
    "scalar_ops_match_numpy",
    "reductions_and_scans",
    "indexing_ops",
    "logic_bitwise_mod_and_trig_ops",
]


@pytest.mark.parametrize("case", CASES)
def test_interpreted(case):
    code = f"import triton_interpret_cases as c; c.case_{case}()"
    path = os.pathsep.join([ROOT, HERE])
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path)
    command = [sys.executable, "-c", code]
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
