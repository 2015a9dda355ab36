"""ONNX node-conformance harness: every collected case of the ops smelt claims,
run through the compiled CPU path and compared with the case's expected outputs.

`python test/numerics/conformance.py [-v] [OP ...]` runs every case (or those that use
one of the OPs) and prints, per tested op, the cases passed, failed (a wrong answer, a
crash, a traceback) and refused (a SmeltError that states why); `--write` records the
table in `conformance.md` and the passing cases in `conformance_passed.txt`, which
`test_node_conformance.py` holds every later run to. An op is claimed when any of its
cases passes: derived from the results, not kept by hand.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Inputs that decide an output shape (Reshape's shape, Slice's starts, ...) are
# frozen to the case's values: the table is smelt's own (SHAPE_OPERANDS in
# smelt/frontend/onnx_constants.py, which the ONNX backend API uses too).
from smelt.frontend.onnx_constants import SHAPE_OPERANDS, shape_inputs  # noqa: F401


def as_array(value) -> np.ndarray:
    """A case's input or expected value as an array: onnx gives some as TensorProto
    (bfloat16, float16 and float64 casts), which np.asarray would wrap as objects."""
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list | dict) or value is None:
        return value  # a sequence, map or optional value: smelt refuses those types
    return np.asarray(value)


def case_data(case) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """Every data set of `case`, converted by `as_array`."""
    return [
        ([as_array(v) for v in inputs], [as_array(v) for v in expected])
        for inputs, expected in case.data_sets
    ]


def freeze(model, inputs: list[np.ndarray]):
    """(model with its shape inputs as initializers, the remaining input values)."""
    from onnx import numpy_helper

    frozen = shape_inputs(model)
    if not frozen:
        return model, inputs
    model = type(model).FromString(model.SerializeToString())
    rest = []
    for info, value in zip(model.graph.input, inputs):
        if info.name in frozen:
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), info.name))
        else:
            rest.append(value)
    return model, rest


@dataclass
class Outcome:
    case: str
    status: str  # passed | failed | refused | disputed
    detail: str = ""


HERE = Path(__file__).parent
TABLE = HERE / "conformance.md"
PASSED = HERE / "conformance_passed.txt"
# Cases whose expected low-precision outputs round every intermediate of a fused
# computation (onnx's reference runs Softmax in bf16 / f16 numpy), while smelt
# computes in f32 and rounds once: smelt's answer is nearer the exact value, but the
# case's rtol (1e-3) is below the dtype's step (bf16: 2**-8). Likewise f32 transforms
# (DFT) whose expected outputs come from numpy's f32 FFT: its rounding is relative
# to the whole signal, so an element that is exactly 0 holds a residue above the
# case's atol. Such a case counts as disputed, not passed, and only while every
# element is within two steps (f32: two steps of the output's largest magnitude).
DISPUTED = {
    name: reason
    for line in (HERE / "conformance_disputed.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
    for name, reason in [line.split(maxsplit=1)]
}


def collect() -> list:
    """Every node test case onnx ships, in its order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return list(collect_testcases())


def ops_tested(cases: list) -> dict[str, str]:
    """Case name → the op it tests: a one-node case's op type; an `_expanded` case
    (onnx's function body of the op, written out) counts for its unexpanded twin."""
    single = {
        c.name: c.model.graph.node[0].op_type
        for c in cases
        if len(c.model.graph.node) == 1
    }
    out = {}
    for c in cases:
        twin = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        out[c.name] = single.get(c.name) or single.get(twin) or "(multi-op models)"
    return out


def run_case(case) -> Outcome:
    import smelt

    data = case_data(case)
    frozen_model, _ = freeze(case.model, data[0][0])
    try:
        model = smelt.compile(frozen_model, "cpu")
    except smelt.InternalError as e:  # smelt's own bug, whatever it says
        return Outcome(case.name, "failed", f"internal error: {e}"[:200])
    except smelt.SmeltError as e:
        return Outcome(case.name, "refused", _first_problem(str(e)))
    except Exception as e:  # a crash on a valid model is a failure, not unsupported
        return Outcome(case.name, "failed", f"compile crashed: {type(e).__name__}: {e}"[:200])
    for inputs, expected in data:
        _, inputs = freeze(case.model, inputs)
        feeds = dict(zip(model.input_names, inputs))
        try:
            got = model.run(feeds)
        except Exception as e:
            return Outcome(case.name, "failed", f"run: {type(e).__name__}: {e}"[:200])
        for name, want in zip(model.output_names, expected):
            have = got[name]
            if not isinstance(want, np.ndarray):
                return Outcome(case.name, "failed", f"{name}: not a tensor")
            if have.dtype != want.dtype or have.shape != want.shape:
                return Outcome(case.name, "failed",
                               f"{name}: got {have.dtype}{have.shape}, want {want.dtype}{want.shape}")
            try:
                np.testing.assert_allclose(have, want, rtol=case.rtol, atol=case.atol)
            except AssertionError as e:
                lines = [l for l in str(e).splitlines() if "Max" in l or "Mismatch" in l]
                detail = f"{name}: " + "; ".join(lines)
                near = _within_two_steps(have, want) or _within_f32_scale(have, want)
                if case.name in DISPUTED and near:
                    return Outcome(case.name, "disputed", DISPUTED[case.name])
                return Outcome(case.name, "failed", detail)
    return Outcome(case.name, "passed")


def _within_two_steps(have: np.ndarray, want: np.ndarray) -> bool:
    """Every element of a low-precision float output within two steps of the
    dtype's grid of the expected value: what the extra roundings of the expected
    value (exp, sum, division, each half a step) can account for."""
    if have.dtype.itemsize != 2 or have.dtype.kind in "iu":
        return False
    h, w = have.astype(np.float64), want.astype(np.float64)
    mantissa_bits = 10 if have.dtype == np.float16 else 7  # f16, bf16
    size = np.maximum(np.maximum(np.abs(h), np.abs(w)), 2.0**-126)
    step = 2.0 ** (np.floor(np.log2(size)) - mantissa_bits)
    same = (h == w) | (np.isnan(h) & np.isnan(w))
    return bool(np.all(same | (np.abs(h - w) <= 2 * step)))


def _within_f32_scale(have: np.ndarray, want: np.ndarray) -> bool:
    """Every element of an f32 output within two f32 steps of the expected
    output's largest magnitude: a transform's rounding, relative to the signal."""
    if have.dtype != np.float32 or not have.size:
        return False
    h, w = have.astype(np.float64), want.astype(np.float64)
    scale = max(float(np.max(np.abs(w))), 2.0**-126)
    step = 2.0 ** (np.floor(np.log2(scale)) - 23)
    return bool(np.all(np.abs(h - w) <= 2 * step))


def run(cases: list, only: set[str] | None = None) -> list[Outcome]:
    ops = ops_tested(cases)
    outcomes = []
    for case in cases:
        types = {n.op_type for n in case.model.graph.node} | {ops[case.name]}
        if only and not types & only:
            continue
        outcomes.append(run_case(case))
    return outcomes


def table(outcomes: list[Outcome], ops: dict[str, str]) -> str:
    """Markdown: per tested op, claimed / passed / failed / refused and why."""
    counts: dict[str, collections.Counter] = collections.defaultdict(
        collections.Counter
    )
    reasons: dict[str, collections.Counter] = collections.defaultdict(
        collections.Counter
    )
    for o in outcomes:
        counts[ops[o.case]][o.status] += 1
        if o.status != "passed":
            reasons[ops[o.case]][_reason(o.detail)] += 1
    lines = [
        "| op | claimed | passed | failed | refused | disputed | why (most common) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for op in sorted(counts):
        c = counts[op]
        why = "; ".join(f"{r} ({n})" for r, n in reasons[op].most_common(2))
        claimed = "yes" if c["passed"] else "no"
        lines.append(
            f"| {op} | {claimed} | {c['passed']} | {c['failed']} | {c['refused']} "
            f"| {c['disputed']} | {why.replace('|', '/')} |"
        )
    total = collections.Counter(o.status for o in outcomes)
    claimed_ops = sum(1 for c in counts.values() if c["passed"])
    lines.append(
        f"| total ({len(outcomes)} cases) | {claimed_ops} ops | {total['passed']} "
        f"| {total['failed']} | {total['refused']} | {total['disputed']} | |"
    )
    return "\n".join(lines)


def _first_problem(message: str) -> str:
    """The first problem a SmeltError lists (its first line is a heading)."""
    lines = [line.strip() for line in message.splitlines()]
    items = [line.removeprefix("- ") for line in lines if line.startswith("- ")]
    return (items or [line for line in lines if not line.endswith(":")] or [""])[0][
        :160
    ]


def _reason(detail: str) -> str:
    """A refusal's message without node names and values, to group by."""
    detail = re.sub(r"'[^']*'", "'…'", detail)
    detail = re.sub(r"^\w+(#\d+| '…'): ", "", detail)
    return re.sub(r"#\d+", "", detail)[:90]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ops", nargs="*", help="only cases that use these ops")
    parser.add_argument("--all", action="store_true", help="(every case is run)")
    parser.add_argument("--write", action="store_true", help="record the results")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    cases = collect()
    ops = ops_tested(cases)
    outcomes = run(cases, set(args.ops) or None)
    for o in outcomes:
        if o.status == "failed" or (args.verbose and o.status != "passed"):
            print(f"  {o.status:<9}{o.case}: {o.detail}")
    text = table(outcomes, ops)
    print(text)
    if args.write:
        if args.ops:
            parser.error("--write records the whole suite: give no OPs")
        TABLE.write_text(
            "# ONNX node conformance through the compiled CPU path\n\n"
            "Written by `python test/numerics/conformance.py --write` "
            f"(onnx {onnx_version()}).\n\n{text}\n"
        )
        PASSED.write_text(
            "".join(f"{o.case}\n" for o in outcomes if o.status == "passed")
        )
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def onnx_version() -> str:
    import onnx

    return onnx.__version__


if __name__ == "__main__":
    sys.exit(main())
