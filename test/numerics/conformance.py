"""ONNX node-conformance harness: every collected case of the ops smelt claims,
run through the compiled CPU path and compared with the case's expected outputs.

`python test/numerics/conformance.py [--all] [OP ...]` prints per-op counts of passed,
failed and unsupported cases; `--all` also tries the ops smelt does not claim.
"""

from __future__ import annotations

import argparse
import collections
import sys
import warnings
from dataclasses import dataclass

import numpy as np

# Ops whose every conformance case must pass through smelt.compile(target="cpu").
# Not claimed though imported: Dropout (its training cases draw numpy random masks),
# Identity (its cases include sequence and optional types).
CLAIMED_OPS = frozenset(
    """MatMul Gemm Add Sub Mul Div Pow Sqrt Exp Erf Tanh Sigmoid Relu Clip Softmax
    LayerNormalization ReduceMean ReduceSum ReduceMax Reshape Transpose Concat Split
    Slice Gather Unsqueeze Squeeze Flatten Where Pad MaxPool AveragePool
    GlobalAveragePool BatchNormalization Conv Sum Constant ConstantOfShape Shape
    LRN
    And Or Not Xor GreaterOrEqual LessOrEqual BitShift BitwiseAnd BitwiseOr
    BitwiseXor BitwiseNot Mod Sign Round IsNaN IsInf Sin Cos Tan Asin Acos Atan
    Sinh Cosh Asinh Acosh Atanh Mean PRelu""".split()
)


# smelt compiles for static shapes: an operand that decides a shape (Reshape's shape,
# Slice's starts, a reduction's axes, ...) must be known at compile time. A case that
# feeds one as a graph input gets that input frozen to the case's value (added as an
# initializer, as a user would with a real model); every other input stays a run-time
# input.
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "Split": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "ReduceMean": (1,),
    "ReduceSum": (1,),
    "ReduceMax": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
}


def as_array(value) -> np.ndarray:
    """A case's input or expected value as an array: onnx gives some as TensorProto
    (bfloat16, float16 and float64 casts), which np.asarray would wrap as objects."""
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def case_data(case) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """Every data set of `case`, converted by `as_array`."""
    return [
        ([as_array(v) for v in inputs], [as_array(v) for v in expected])
        for inputs, expected in case.data_sets
    ]


def shape_inputs(model) -> set[str]:
    """Names of the graph inputs that feed a shape-deciding operand."""
    names = set()
    for node in model.graph.node:
        for i in SHAPE_OPERANDS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i]:
                names.add(node.input[i])
    return names & {i.name for i in model.graph.input}


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
    ops: tuple[str, ...]
    status: str  # passed | failed | unsupported
    detail: str = ""


def collect(ops: frozenset[str] | None):
    """(case, op types) for cases whose ops are all in `ops` (all cases if None)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    for case in cases:
        types = tuple(sorted({n.op_type for n in case.model.graph.node}))
        if ops is None or set(types) <= ops:
            yield case, types


def run_case(case) -> Outcome:
    import smelt

    types = tuple(sorted({n.op_type for n in case.model.graph.node}))
    data = case_data(case)
    frozen_model, _ = freeze(case.model, data[0][0])
    try:
        model = smelt.compile(frozen_model, "cpu")
    except smelt.SmeltError as e:
        return Outcome(case.name, types, "unsupported", str(e).splitlines()[0][:160])
    except Exception as e:  # a crash on a valid model is a failure, not unsupported
        return Outcome(case.name, types, "failed", f"compile crashed: {type(e).__name__}: {e}"[:200])
    for inputs, expected in data:
        _, inputs = freeze(case.model, inputs)
        feeds = dict(zip(model.input_names, inputs))
        try:
            got = model.run(feeds)
        except Exception as e:
            return Outcome(case.name, types, "failed", f"run: {type(e).__name__}: {e}"[:200])
        for name, want in zip(model.output_names, expected):
            have = got[name]
            if have.dtype != want.dtype or have.shape != want.shape:
                return Outcome(case.name, types, "failed",
                               f"{name}: got {have.dtype}{have.shape}, want {want.dtype}{want.shape}")
            try:
                np.testing.assert_allclose(have, want, rtol=case.rtol, atol=case.atol)
            except AssertionError as e:
                lines = [l for l in str(e).splitlines() if "Max" in l or "Mismatch" in l]
                return Outcome(case.name, types, "failed", f"{name}: " + "; ".join(lines))
    return Outcome(case.name, types, "passed")


def run(ops: frozenset[str] | None, only: set[str] | None = None) -> list[Outcome]:
    outcomes = []
    for case, types in collect(ops):
        if only and not set(types) & only:
            continue
        outcomes.append(run_case(case))
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        key = o.ops[0] if len(o.ops) == 1 else "(multi-op models)"
        counts[key][o.status] += 1
    lines = [f"{'op':<24}{'passed':>8}{'failed':>8}{'unsupported':>13}"]
    for key in sorted(counts):
        c = counts[key]
        lines.append(f"{key:<24}{c['passed']:>8}{c['failed']:>8}{c['unsupported']:>13}")
    total = collections.Counter(o.status for o in outcomes)
    lines.append(
        f"{'total':<24}{total['passed']:>8}{total['failed']:>8}{total['unsupported']:>13}"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ops", nargs="*", help="only cases that use these ops")
    parser.add_argument("--all", action="store_true", help="also unclaimed ops")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    outcomes = run(None if args.all else CLAIMED_OPS, set(args.ops) or None)
    print("claimed ops:", " ".join(sorted(CLAIMED_OPS)))
    for o in outcomes:
        if o.status != "passed" and (args.verbose or o.ops[0] in CLAIMED_OPS):
            print(f"  {o.status:<12}{o.case}: {o.detail}")
    print(table(outcomes))
    bad = [o for o in outcomes if o.status != "passed" and set(o.ops) <= CLAIMED_OPS]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
