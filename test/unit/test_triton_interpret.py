"""Generated Triton kernels run under TRITON_INTERPRET=1 on CPU torch tensors and
match onnxruntime / numpy. The interpreter is slow (about a second per launch on
real sizes), so the cases are few and tiny; each runs in a fresh process because
Triton reads TRITON_INTERPRET when it is first imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

HERE = os.path.dirname(os.path.abspath(__file__))
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
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=HERE)
    command = [sys.executable, "-c", code]
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
