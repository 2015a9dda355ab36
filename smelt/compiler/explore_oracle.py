"""The answer `smelt explore` holds every candidate to, and who gave it:
onnxruntime on the original model and the job's feeds when it is installed and
runs the model; smelt's reference executor only where onnxruntime cannot (an oracle
nobody here wrote is the one to trust: the reference executor shares smelt's
importer, and its float32 BLAS sums once disagreed with exact arithmetic).

    answer = oracle_outputs(path, module, feeds, constants)
    answer.oracle   # "onnxruntime 1.32.0", or "reference executor"
    answer.why      # None, or why onnxruntime did not judge
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from smelt.errors import SmeltError

ORACLES = ("auto", "onnxruntime", "reference")
"""--oracle: auto (onnxruntime where it runs the model, else the reference
executor), or one of them (onnxruntime then fails where it cannot)."""

REFERENCE = "reference executor"


@dataclass(frozen=True)
class Answer:
    """The expected outputs by name, the oracle that computed them, and why it is
    not onnxruntime (None when it is)."""

    outputs: dict[str, np.ndarray]
    oracle: str
    why: str | None = None


def oracle_outputs(
    path: str,
    module: ModuleOp,
    feeds: Mapping[str, np.ndarray],
    constants: Mapping[str, Any] | None = None,
    oracle: str = "auto",
) -> Answer:
    """The outputs of the model at `path` (imported as `module`) on `feeds`, from
    `oracle` ("auto": onnxruntime, else the reference executor on `module`)."""
    if oracle not in ORACLES:
        raise SmeltError(f"unknown oracle '{oracle}': choose {', '.join(ORACLES)}")
    if oracle == "reference":
        return Answer(_reference(module, feeds), REFERENCE, "asked for with --oracle")
    try:
        return _onnxruntime(path, module, feeds, constants or {})
    except _CannotRun as e:
        if oracle == "onnxruntime":
            raise SmeltError(f"--oracle onnxruntime: {e}") from None
        return Answer(_reference(module, feeds), REFERENCE, str(e))


class _CannotRun(Exception):
    """onnxruntime cannot judge this model; the message says why."""


def _reference(module: ModuleOp, feeds: Mapping[str, np.ndarray]) -> dict:
    from smelt.reference.executor import run_graph

    return run_graph(module, feeds)


def _onnxruntime(
    path: str,
    module: ModuleOp,
    feeds: Mapping[str, np.ndarray],
    constants: Mapping[str, Any],
) -> Answer:
    try:
        import onnxruntime as ort
    except ImportError:
        raise _CannotRun(
            "onnxruntime is not installed (pip install 'smelt[test]')"
        ) from None
    from smelt.compiler.runner import io_specs

    options = ort.SessionOptions()
    options.log_severity_level = 3  # unused initializers and the like: not ours
    try:  # from the path: external data is found beside the model
        session = ort.InferenceSession(
            path, options, providers=["CPUExecutionProvider"]
        )
        inputs = {i.name: i for i in session.get_inputs()}
        ort_feeds = dict(feeds)
        for name, value in constants.items():  # fixed by --constant: fed here
            if name in inputs:
                ort_feeds[name] = _as_input(value, inputs[name].type)
        names = [o.name for o in session.get_outputs()]
        wanted = [s.name for s in io_specs(module)[1]]
        if sorted(names) != sorted(wanted):
            raise _CannotRun(
                f"onnxruntime's outputs {names} are not the imported model's {wanted}"
            )
        values = session.run(names, ort_feeds)
    except _CannotRun:
        raise
    except Exception as e:  # noqa: BLE001 (any refusal of onnxruntime's: fall back)
        text = " ".join(str(e).split())
        raise _CannotRun(
            f"onnxruntime cannot run the model: {type(e).__name__}: {text[:300]}"
        ) from None
    return Answer(dict(zip(names, values)), f"onnxruntime {ort.__version__}")


_ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(double)": np.float64,
    "tensor(float16)": np.float16, "tensor(int64)": np.int64,
    "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}  # fmt: skip


def _as_input(value: Any, ort_type: str) -> np.ndarray:
    """A --constant value as onnxruntime's input type (what the importer does)."""
    dtype = _ORT_TYPES.get(ort_type)
    if dtype is None:
        raise _CannotRun(f"a --constant input of type {ort_type}")
    return np.asarray(value, dtype=dtype)
