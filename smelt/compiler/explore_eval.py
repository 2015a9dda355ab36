"""One `smelt explore` candidate, measured: compile its pipeline, check its outputs
against the oracle's (explore_oracle: onnxruntime, or the reference executor where
it cannot run the model), time it, count its kernels and bytes, hash each kernel
and keep the passes' remarks (why they declined a rewrite).

Runs inside an executor's worker process (local or Ray): `evaluate(job,
candidate)` never raises for a candidate's own failure; it returns a record
whose `status` says what happened.
"""

from __future__ import annotations

import hashlib
import io
import statistics
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from smelt.compiler.explore_space import Candidate

STATUSES = ("ok", "wrong", "compile-error", "run-error", "crashed")
"""ok: outputs match the oracle's; wrong: they do not (or have another shape);
compile-error: the pipeline failed (an invalid combination); run-error: the
compiled model failed to run; crashed: the worker process died (a native crash)."""


@dataclass(frozen=True)
class Job:
    """What every candidate of one search shares (shipped once per worker)."""

    model: bytes  # the ONNX file
    name: str  # its file name, for records
    sha256: str
    target: str = "cpu"
    base_dir: str | None = None  # where the model's external data lies
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    check_model: bool = True
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    expected: dict[str, np.ndarray] = field(default_factory=dict)  # the oracle's
    tolerance: float = 1e-4  # max |error| / max |expected|, per output
    repeat: int = 10  # timed runs after one warm-up run
    oracle: str = "reference executor"  # who computed `expected` (explore_oracle)


# Per worker process: the imported graph of the job's model, by model hash (a
# worker serves one search at a time; importing once saves seconds per candidate).
_IMPORTED: dict[str, tuple[Any, float]] = {}


def imported(job: Job):
    """The graph-level module of `job`'s model (imported once per process) and
    the seconds its import took."""
    if job.sha256 not in _IMPORTED:
        from smelt.compiler.runner import import_graph

        t0 = time.perf_counter()
        module = import_graph(
            job.model, job.input_shapes, job.base_dir, job.constants, job.check_model
        )
        _IMPORTED.clear()
        _IMPORTED[job.sha256] = (module, time.perf_counter() - t0)
    return _IMPORTED[job.sha256]


def one_line(error: BaseException) -> str:
    """An error as one line: its type and first lines (a SmeltError's message
    names the pass and the reproducer)."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    text = text if len(text) <= 400 else text[:397] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def record(candidate: Candidate, status: str, error: str | None = None) -> dict:
    """A candidate's result record (metrics filled in by `evaluate`)."""
    return {
        "candidate": candidate.index,
        "order": list(candidate.order),
        "options": dict(candidate.options),
        "pipeline": candidate.pipeline,
        "status": status,
        "error": error,
        "metrics": {},
    }


def max_error(outputs: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> float:
    """The largest error relative to each output's scale (inf on a shape or dtype
    mismatch or a missing output)."""
    worst = 0.0
    for name, ref in expected.items():
        value = outputs.get(name)
        if value is None or value.shape != ref.shape or value.dtype != ref.dtype:
            return float("inf")
        if ref.size == 0:
            continue
        if ref.dtype.kind not in "fc":
            worst = max(worst, float(np.any(value != ref)))
            continue
        scale = max(float(np.max(np.abs(ref))), 1e-30)
        diff = np.abs(value.astype(np.float64) - ref.astype(np.float64))
        if np.any(np.isnan(value) != np.isnan(ref)):
            return float("inf")
        worst = max(worst, float(np.nanmax(diff)) / scale if diff.size else 0.0)
    return worst


def kernel_hashes(module: ModuleOp) -> dict[str, str]:
    """Each kernel's name → the sha256 (16 hex digits) of its final IR with the
    name left out: a kernel that two pipelines made alike hashes alike, whatever
    each calls it. Large constants are elided in the text (kernels take their
    weights as arguments)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import StringAttr
    from xdsl.printer import Printer

    from smelt.dialects.loop import is_kernel

    hashes = {}
    for op in module.ops:
        if isinstance(op, func.FuncOp) and is_kernel(op):
            unnamed = op.clone()
            unnamed.sym_name = StringAttr("kernel")
            text = io.StringIO()
            Printer(stream=text).print_op(unnamed)
            digest = hashlib.sha256(text.getvalue().encode()).hexdigest()
            hashes[op.sym_name.data] = digest[:16]
    return hashes


def kernel_calls(module: ModuleOp) -> dict[str, int]:
    """How many calls of each kernel the entry function makes (the `kernels`
    statistic counts calls: one kernel may serve several)."""
    from xdsl.dialects import func

    from smelt.dialects.loop import is_kernel

    calls: dict[str, int] = {}
    for op in module.ops:
        if isinstance(op, func.FuncOp) and not is_kernel(op):
            for call in op.walk():
                if isinstance(call, func.CallOp):
                    name = call.callee.string_value()
                    calls[name] = calls.get(name, 0) + 1
    return calls


def evaluate(job: Job, candidate: Candidate) -> dict:
    """Compiles, checks and times `candidate` on `job`: its record."""
    from smelt.compiler.driver import compile as compile_model
    from smelt.compiler.stages import STAGE_NAMES
    from smelt.passes import remarks

    try:
        module, import_s = imported(job)
    except Exception as e:  # noqa: BLE001 (the model itself: every candidate fails)
        return record(candidate, "compile-error", "import: " + one_line(e))
    work = module.clone()  # the passes rewrite it in place: the final IR after
    try:
        with remarks.collect() as missed:
            model = compile_model(work, job.target, pipeline=candidate.pipeline)
    except Exception as e:  # noqa: BLE001 (an invalid combination, recorded)
        return record(candidate, "compile-error", one_line(e))
    out = record(candidate, "ok")
    out["pipeline"] = model.info["pipeline"]  # as the driver ran it: replayable
    seconds = model.info["seconds"]
    out["metrics"] = {
        "compile_s": seconds["passes"] + seconds["codegen"],
        "passes_s": seconds["passes"],
        "codegen_s": seconds["codegen"],
        "import_s": import_s,
        "stage_s": {k: seconds[k] for k in STAGE_NAMES if k in seconds},
        **model.info["stats"],
    }
    out["kernel_hashes"] = kernel_hashes(work)
    out["kernel_calls"] = kernel_calls(work)
    out["remarks"] = [asdict(r) for r in missed]
    out["metrics"]["remarks"] = len(missed)
    if "cpu" in model.info:
        out["cpu"] = model.info["cpu"]
    try:
        outputs = model.run(job.feeds)
        error = max_error(outputs, job.expected)
        out["oracle"] = job.oracle
        out["metrics"]["max_rel_error"] = error if np.isfinite(error) else None
        if not error <= job.tolerance:
            out["status"] = "wrong"
            out["error"] = (
                f"outputs differ from {job.oracle}'s: max relative "
                f"error {error:.3g} > {job.tolerance:g}"
            )
        times = []
        for _ in range(max(1, job.repeat)):
            t0 = time.perf_counter()
            model.run(job.feeds)
            times.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 (recorded with the candidate)
        out["status"] = "run-error"
        out["error"] = one_line(e)
        out["traceback"] = traceback.format_exc(limit=4)
        return out
    out["metrics"]["latency_ms"] = statistics.median(times) * 1e3
    out["metrics"]["latency_min_ms"] = min(times) * 1e3
    out["metrics"]["runs"] = len(times)
    return out
