"""A compiled model ready to run: checks inputs, calls the native entry point."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from smelt.errors import SmeltError


@dataclass(frozen=True)
class TensorSpec:
    """Name, static shape and numpy dtype of one model input or output."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}[{'x'.join(map(str, self.shape)) or 'scalar'}]"


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
        self._output_buffers = [np.empty(o.shape, o.dtype) for o in outputs]

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
            raise SmeltError("inputs must be a dict {input name: numpy array}")
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
            raise SmeltError("; ".join(problems) + f" (the model takes {expected})")
        return arrays

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        arrays = self.check_inputs(feeds)
        self.program.run(arrays + self._output_buffers)
        return {o.name: b.copy() for o, b in zip(self.outputs, self._output_buffers)}

    def __repr__(self) -> str:
        ins = ", ".join(s.describe() for s in self.inputs)
        outs = ", ".join(s.describe() for s in self.outputs)
        return f"CompiledModel({ins} -> {outs})"
