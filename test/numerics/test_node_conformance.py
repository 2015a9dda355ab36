"""Every ONNX conformance case of every claimed op passes on the compiled CPU path."""

import pytest

from conformance import CLAIMED_OPS, collect, run_case

CASES = [case for case, _ in collect(CLAIMED_OPS)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance_case(case):
    outcome = run_case(case)
    assert outcome.status == "passed", f"{outcome.status}: {outcome.detail}"


def test_every_claimed_op_has_cases():
    covered = {t for _, types in collect(CLAIMED_OPS) for t in types}
    assert covered == CLAIMED_OPS, sorted(CLAIMED_OPS - covered)
