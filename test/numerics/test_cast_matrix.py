"""Every Cast between smelt's 13 element types runs correctly through native code,
in a subprocess (a crash fails the test instead of killing the suite): on the
host's ISA and on generic x86-64 (no F16C: float16 through the compiler runtime)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("cpu", ["host", "x86-64"])
def test_every_cast_pair_runs_correctly(cpu):
    script = os.path.join(os.path.dirname(__file__), "cast_matrix.py")
    run = subprocess.run(
        [sys.executable, script, cpu], capture_output=True, text=True, timeout=600
    )
    lines = run.stdout.splitlines()
    assert run.returncode == 0, (
        f"exit {run.returncode} after: {lines[-3:]}\n{run.stderr[-2000:]}"
    )
    assert lines[-1] == "done" and len(lines) == 13 * 13 + 1
    assert all(line.endswith(" ok") for line in lines[:-1])
