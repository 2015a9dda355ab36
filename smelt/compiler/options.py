"""CompileOptions: everything that decides a build, frozen and hashable."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from smelt.compiler import pipelines
from smelt.errors import SmeltError

DEVICES = ("cuda", "cpu")
"""Where the gpu target runs: a CUDA GPU, or Triton's interpreter on the CPU."""


@dataclass(frozen=True)
class FrozenArray:
    """A numpy array by value (dtype, shape, bytes): hashable, equal by content.
    The dtype is kept as itself, not its string: ml_dtypes' bfloat16 prints as
    '|V2', which would read back as raw bytes."""

    dtype: np.dtype
    shape: tuple[int, ...]
    data: bytes

    @staticmethod
    def of(value: Any) -> FrozenArray:
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise SmeltError(
                f"a constant must be a number, a bool or an array of them, not "
                f"{type(value).__name__}"
            )
        contiguous = np.ascontiguousarray(array)
        return FrozenArray(array.dtype, array.shape, contiguous.tobytes())

    def array(self) -> np.ndarray:
        """The array (read-only: it views the bytes)."""
        return np.frombuffer(self.data, self.dtype).reshape(self.shape)

    def record(self) -> dict[str, Any]:
        """dtype, shape and values, or a sha256 when large (JSON-able)."""
        array = self.array()
        record = {"dtype": array.dtype.name, "shape": list(array.shape)}
        if array.size <= 1024:
            return record | {"values": array.tolist()}
        return record | {"sha256": hashlib.sha256(self.data).hexdigest()}


def _items(value: Mapping | Iterable | None) -> list[tuple[Any, Any]]:
    if value is None:
        return []
    return list(value.items() if isinstance(value, Mapping) else value)


def _dims(name: str, dims: Any) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in dims)
    except (TypeError, ValueError):
        raise SmeltError(
            f"input_shapes['{name}'] must be a sequence of ints, not {dims!r}"
        ) from None


@dataclass(frozen=True)
class CompileOptions:
    """Everything that decides a compilation; the pipeline string holds the passes.

    Frozen and hashable: equal options build the same code, and their `record()`
    keys the compile cache. `input_shapes` and `constants` may be given as dicts;
    they are kept as sorted (name, value) tuples. Nothing that decides a build is
    read from the environment after these are made: the gpu target's `device`
    is chosen here (`default_device` when not given).
    """

    target: str = "cpu"
    pipeline: str | None = None  # None: the preset for `level`
    level: str = pipelines.DEFAULT_LEVEL
    threads: int = 1  # worker threads of the CPU presets (loop-parallelize)
    cpu: str = "host"  # the CPU to compile for (cpu target): see CpuSpec.parse
    # the gpu target's torch device: "cuda", or "cpu" (Triton's interpreter)
    device: str | None = None
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # graph inputs fixed to values at import (their If conditions and shapes fold)
    constants: tuple[tuple[str, FrozenArray], ...] = ()
    check_model: bool = True  # onnx's full checker before import
    precision: str = "f32"  # "bf16" / "f16": quant-cast joins the pipeline
    opt_level: int = 3  # LLVM's optimization level (cpu target)
    fast_math: bool = False  # LLVM's `reassoc nsz` on float ops (cpu target)
    tf32: bool = True  # f32 contractions as tf32 tl.dot (gpu target; False: f32)
    profile: bool = False  # time every kernel call (cpu target)
    # bytes that arena + weights + inputs / outputs may take (0: the machine's)
    memory_limit: int = 0

    def __post_init__(self) -> None:
        items = _items(self.input_shapes)
        shapes = tuple(sorted((str(k), _dims(k, v)) for k, v in items))
        constants = tuple(sorted(
            ((str(k), v if isinstance(v, FrozenArray) else FrozenArray.of(v))
             for k, v in _items(self.constants)),
            key=lambda kv: kv[0],
        ))  # fmt: skip
        object.__setattr__(self, "input_shapes", shapes)
        object.__setattr__(self, "constants", constants)
        if self.target not in pipelines.TARGETS:
            raise SmeltError(
                f"unknown target '{self.target}': choose one of "
                f"{', '.join(pipelines.TARGETS)}"
            )
        if self.profile and self.target != "cpu":
            raise SmeltError(
                "profile=True (--profile) times kernels on the cpu target only"
            )
        if self.target != "gpu" and not self.tf32:
            raise SmeltError(
                "tf32=False (--no-tf32) chooses how the gpu target multiplies: drop it"
            )
        if self.target != "gpu" and self.device is not None:
            raise SmeltError("device= chooses where the gpu target runs: drop it")
        if self.target == "gpu":
            if self.device is None:
                object.__setattr__(self, "device", default_device())
            elif self.device not in DEVICES:
                raise SmeltError(
                    f"unknown device '{self.device}': choose one of "
                    f"{', '.join(DEVICES)}"
                )

    def shape_map(self) -> dict[str, tuple[int, ...]]:
        """`input_shapes` as the importer takes them."""
        return dict(self.input_shapes)

    def constant_map(self) -> dict[str, np.ndarray]:
        """`constants` as the importer takes them."""
        return {k: v.array() for k, v in self.constants}

    def record(self) -> dict[str, Any]:
        """Every field as JSON-able data, and the pipeline they resolve to: what
        keys the compile cache and what an artifact's manifest says it was built
        with (constants: dtype, shape and values, or a sha256 when large)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["input_shapes"] = {k: list(v) for k, v in self.input_shapes}
        fields["constants"] = {k: v.record() for k, v in self.constants}
        fields["resolved_pipeline"] = self.resolved_pipeline()
        return fields

    def resolved_pipeline(self) -> str:
        if self.pipeline is not None:
            spec = pipelines.with_precision(self.pipeline, self.precision)
            if self.target != "cpu":
                return spec
            return pipelines.with_cpu(spec, self.cpu)
        return pipelines.preset(
            self.target, self.level, self.threads, self.cpu, self.precision
        )


def default_device() -> str:
    """Where the gpu target runs when not told: "cuda" when torch sees a GPU,
    "cpu" (Triton's interpreter) when TRITON_INTERPRET=1, else an error. The
    one place the environment is read: when CompileOptions are made."""
    import os

    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        raise SmeltError(
            "the gpu target needs torch and triton: pip install 'smelt[gpu]'"
        ) from None
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return "cpu"
    raise SmeltError(
        "the gpu target found no CUDA device; `smelt aot MODEL --arch sm_90` checks "
        "every kernel without one, and TRITON_INTERPRET=1 runs tiny models on the CPU"
    )
