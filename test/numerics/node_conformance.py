"""ONNX node conformance of the reference executor: imports the onnx node test cases
of the ops smelt maps and runs them with `run_graph`.

Run `python test/numerics/node_conformance.py [-v]` for per-op pass counts.
Inputs that an op needs as constants (shapes, axes, pads) are turned into
initializers when the plain import refuses them.
"""

from __future__ import annotations

import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from smelt.errors import SmeltError
from smelt.frontend.handlers import HANDLERS
from smelt.frontend.onnx import import_model
from smelt.reference.executor import run_graph


@dataclass
class Result:
    name: str
    op: str  # the op type of a one-node model, "expanded" for function bodies
    passed: bool
    detail: str = ""
    folded: bool = False  # ran only once all inputs were made constants


def _as_array(value) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def _with_initializers(model: onnx.ModelProto, names: set[str], feeds: dict):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in names]
    for name in names:
        m.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


def run_case(case) -> Result:
    """Imports and runs one onnx backend node test case."""
    nodes = case.model.graph.node
    op = nodes[0].op_type if len(nodes) == 1 else "expanded"
    inputs, expected = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    feeds = {n: _as_array(v) for n, v in zip(names, inputs)}
    attempts = [set(), set(names[1:]), set(names)]
    error = ""
    for constant in attempts:
        try:
            module = import_model(_with_initializers(case.model, constant, feeds))
        except SmeltError as e:
            error = str(e).replace("\n", " ")
            continue
        try:
            out = run_graph(
                module, {n: v for n, v in feeds.items() if n not in constant}
            )
        except Exception as e:  # noqa: BLE001 (a crash is a failed case)
            return Result(case.name, op, False, f"run: {type(e).__name__}: {e}")
        result = _compare(
            case, op, list(out.values()), [_as_array(e) for e in expected]
        )
        result.folded = constant == set(names) and bool(names)
        return result
    return Result(case.name, op, False, f"import: {error}")


def _compare(case, op: str, got: list, want: list) -> Result:
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        if a.dtype != b.dtype or a.shape != b.shape:
            detail = f"output {i}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
            return Result(case.name, op, False, detail)
        if b.dtype == ml_dtypes.bfloat16:  # numpy sees a void type: compare in f32
            a, b = a.astype(np.float32), b.astype(np.float32)
        if b.dtype.kind in "fc":
            ok = np.allclose(a, b, rtol=case.rtol, atol=case.atol, equal_nan=True)
        else:
            ok = np.array_equal(a, b)
        if not ok:
            err = np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))
            return Result(case.name, op, False, f"output {i}: max abs error {err:.3g}")
    return Result(case.name, op, True)


def mapped_cases() -> list:
    """The node test cases whose nodes all use ops the importer maps."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return [
        c for c in cases
        if all(n.op_type in HANDLERS and n.domain in ("", "ai.onnx")
               for n in c.model.graph.node)
    ]  # fmt: skip


def run_all() -> list[Result]:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [run_case(c) for c in mapped_cases()]


def main(verbose: bool = False) -> None:
    results = run_all()
    by_op: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    for op in sorted(by_op):
        rs = by_op[op]
        folded = sum(r.passed and r.folded for r in rs)
        print(f"{op:22} {sum(r.passed for r in rs):4} / {len(rs)}  (folded {folded})")
        for r in rs:
            if verbose and not r.passed:
                print(f"    FAIL {r.name}: {r.detail[:300]}")
    total = sum(r.passed for r in results)
    print(f"{'total':22} {total:4} / {len(results)}")


if __name__ == "__main__":
    main("-v" in sys.argv)
