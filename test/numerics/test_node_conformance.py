"""Every ONNX node-conformance case through the compiled CPU path: none may fail (a
wrong answer, a crash, a traceback), every case recorded in `conformance_passed.txt`
must still pass, and a newly passing case must be recorded (so the committed table
in `conformance.md` is the truth). Refusals that state their reason are allowed."""

import pytest

from conformance import PASSED, collect, run_case, ops_tested

CASES = collect()
OPS = ops_tested(CASES)
RECORDED = set(PASSED.read_text().split())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance_case(case):
    outcome = run_case(case)
    assert outcome.status != "failed", outcome.detail
    if case.name in RECORDED:
        assert outcome.status == "passed", f"passed before, now: {outcome.detail}"
    else:
        assert outcome.status != "passed", (
            "passes now but is not recorded: run "
            "`python test/numerics/conformance.py --write` and commit the table"
        )


def test_recorded_cases_exist():
    assert RECORDED <= {c.name for c in CASES}, sorted(RECORDED - set(OPS))
