"""onnx's own backend test runner drives smelt (`smelt.backend`) over every node case
smelt claims (`conformance_passed.txt`), comparing at the runner's tolerances; the
other cases, the CUDA device and the model suites are skipped by the runner.

Every claimed case runs: none is excluded (EXCLUDED lists the exceptions, each with
its reason, should one be needed)."""

import re
import warnings

import onnx.backend.test
from conformance import PASSED

import smelt.backend

CLAIMED = sorted(set(PASSED.read_text().split()))
# case name → why the runner cannot pass it although conformance.py does
EXCLUDED: dict[str, str] = {}

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(smelt.backend, __name__)
names = "|".join(re.escape(name) for name in CLAIMED if name not in EXCLUDED)
backend_test.include(rf"^({names})_cpu$")

globals().update(backend_test.test_cases)
