"""A compiled model ready to run: checks inputs, calls the native entry point."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from smelt.errors import InvalidInput, SmeltError, internal_errors


@dataclass(frozen=True)
class TensorSpec:
    """Name, static shape and numpy dtype of one model input or output."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def describe(self) -> str:
        return (
            f"{self.name}: {self.dtype}[{'x'.join(map(str, self.shape)) or 'scalar'}]"
        )


class ProfileRow(NamedTuple):
    """One kernel of a profile: its calls and time summed over the runs, and the
    ONNX nodes its calls compute (their locations)."""

    kernel: str
    calls: int
    seconds: float
    nodes: tuple[str, ...]


class Program(Protocol):
    """What a backend hands the runtime: runs @main on (inputs…, outputs…)."""

    def run(self, args: list[np.ndarray]) -> None: ...


class CompiledModel:
    """`run({name: array}) -> {name: array}` over one native program.

    Output buffers are allocated once here; `run` returns copies of them, so the
    caller owns its results and a run allocates nothing inside the program.
    """

    def __init__(
        self,
        program: Program,
        inputs: list[TensorSpec],
        outputs: list[TensorSpec],
        info: dict[str, Any] | None = None,
    ):
        self.program = program
        self.inputs = inputs
        self.outputs = outputs
        self.info = info or {}
        self._spare: list[np.ndarray] = []  # the last run's results, for reuse

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def check_inputs(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        """The feeds as contiguous arrays in input order, or a SmeltError that says
        which input is wrong and what was expected."""
        if not isinstance(feeds, dict):
            raise InvalidInput("inputs must be a dict {input name: numpy array}")
        unknown = sorted(set(feeds) - set(self.input_names))
        missing = [n for n in self.input_names if n not in feeds]
        problems = []
        if unknown:
            problems.append(f"unknown input(s) {unknown}")
        if missing:
            problems.append(f"missing input(s) {missing}")
        arrays = []
        for spec in self.inputs:
            if spec.name not in feeds:
                continue
            value = np.asarray(feeds[spec.name])
            if value.dtype != spec.dtype:
                problems.append(
                    f"input '{spec.name}' has dtype {value.dtype}, expected {spec.dtype}"
                )
            elif tuple(value.shape) != spec.shape:
                problems.append(
                    f"input '{spec.name}' has shape {list(value.shape)}, expected "
                    f"{list(spec.shape)}"
                )
            arrays.append(np.require(value, requirements="C"))
        if problems:
            expected = ", ".join(s.describe() for s in self.inputs)
            raise InvalidInput("; ".join(problems) + f" (the model takes {expected})")
        return arrays

    def check_outputs(self, outputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Caller-owned output arrays in output order, or a SmeltError naming the
        output that is missing or of the wrong shape, dtype or layout."""
        problems = []
        missing = [n for n in self.output_names if n not in outputs]
        if missing:
            problems.append(f"missing output array(s) {missing}")
        arrays = []
        for spec in self.outputs:
            array = outputs.get(spec.name)
            if array is None:
                continue
            if not isinstance(array, np.ndarray) or array.dtype != spec.dtype:
                problems.append(f"output '{spec.name}' must be a {spec.dtype} array")
            elif tuple(array.shape) != spec.shape:
                problems.append(
                    f"output '{spec.name}' has shape {list(array.shape)}, expected "
                    f"{list(spec.shape)}"
                )
            elif not (array.flags.c_contiguous and array.flags.writeable):
                problems.append(f"output '{spec.name}' must be C-contiguous, writable")
            arrays.append(array)
        if problems:
            raise InvalidInput("; ".join(problems))
        return arrays

    def _result_arrays(self) -> list[np.ndarray]:
        """Arrays for a run's results: the previous run's where nothing outside
        this object refers to them any more (no name, no view, no buffer export:
        the caller dropped them, so no one can see the reuse, as numpy reuses
        temporaries), else fresh ones. Saves the page faults of a large new
        array on every run."""
        spare, self._spare = self._spare, []
        results = []
        for spec in self.outputs:
            array = spare.pop(0) if spare else None
            # references: `array` here and getrefcount's argument
            if array is None or sys.getrefcount(array) > 2:
                array = np.empty(spec.shape, spec.dtype)
            results.append(array)
        self._spare = list(results)
        return results

    def run(
        self,
        feeds: dict[str, Any],
        outputs: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """Run the model once. Results are written straight into `outputs`
        (caller-owned arrays: nothing is allocated) or, without it, into arrays
        the caller then owns; either way the dict {output name: array} is returned."""
        arrays = self.check_inputs(feeds)
        if outputs is None:
            results = self._result_arrays()
        else:
            results = self.check_outputs(outputs)
        with internal_errors("the run"):
            self.program.run(arrays + results)
        return dict(zip(self.output_names, results))

    def profile(self, reset: bool = True) -> list[ProfileRow]:
        """(kernel, calls, seconds, ONNX nodes) summed over the runs since the
        last reset, slowest first; the model must be compiled with `profile=True`
        (cpu). A kernel shared by several calls (loop-dedup-kernels) lists the
        nodes of all of them."""
        per_call = getattr(self.program, "profile", None)
        if per_call is None:
            raise SmeltError("profiles are taken on the cpu target only")
        from smelt.lowering.llvm.program import tick_seconds

        call_nodes = getattr(self.program, "profiled_nodes", ())
        totals: dict[str, list[int]] = {}
        nodes: dict[str, dict[str, None]] = {}
        for i, (kernel, ticks) in enumerate(per_call(reset)):
            entry = totals.setdefault(kernel, [0, 0])
            entry[0] += 1
            entry[1] += ticks
            names = call_nodes[i] if i < len(call_nodes) else ()
            nodes.setdefault(kernel, {}).update(dict.fromkeys(names))
        scale = tick_seconds()
        rows = [
            ProfileRow(k, calls, ticks * scale, tuple(nodes[k]))
            for k, (calls, ticks) in totals.items()
        ]
        return sorted(rows, key=lambda row: -row.seconds)

    def save(self, path: str) -> str:
        """Writes this model (cpu target) as an artifact, one file that `smelt.load`
        and `smelt run FILE` run without compiling; returns the path."""
        from smelt.runtime.artifact import save

        return save(self, path)

    def __repr__(self) -> str:
        ins = ", ".join(s.describe() for s in self.inputs)
        outs = ", ".join(s.describe() for s in self.outputs)
        return f"CompiledModel({ins} -> {outs})"
