"""Every ONNX node-conformance case through the compiled CPU path, each run once.

The cases smelt claims (`conformance_passed.txt`) run in test_onnx_backend.py,
through onnx's own backend runner; here run the others: none may fail (a wrong
answer, a crash, an InternalError), a case that now passes must be recorded (so
the committed table in `conformance.md` is the truth), and a case smelt refuses
with its reason, or whose expected output is disputed (`conformance_disputed.txt`),
is a skip that says so, never a pass."""

import pytest
from conformance import PASSED, collect, ops_tested, run_case

CASES = collect()
OPS = ops_tested(CASES)
RECORDED = set(PASSED.read_text().split())
UNCLAIMED = [c for c in CASES if c.name not in RECORDED]


@pytest.mark.parametrize("case", UNCLAIMED, ids=[c.name for c in UNCLAIMED])
def test_unclaimed_case(case):
    outcome = run_case(case)
    assert outcome.status != "failed", outcome.detail
    assert outcome.status != "passed", (
        "passes now but is not recorded: run "
        "`python test/numerics/conformance.py --write` and commit the table"
    )
    pytest.skip(f"{outcome.status}: {outcome.detail}")


def test_recorded_cases_exist():
    assert RECORDED <= {c.name for c in CASES}, sorted(RECORDED - set(OPS))
