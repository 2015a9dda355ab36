"""A compiled model with run-time dims (issue 34): one compile, any batch in range.

`DynamicModel.run(feeds)` reads each dim from the inputs' shapes, checks it
against its declared range (InvalidInput naming the dim, the range and the
input), and calls the entry point with the dims after the buffers
(`lowering/llvm/emit_dynamic.py`). The arena is `batch * arena_bytes` bytes: it
is allocated for the largest batch run so far and reused below that.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from smelt.dialects.weights import aligned_empty
from smelt.errors import InvalidInput


class DynamicModel:
    def __init__(
        self,
        engine: Any,
        entry_address: int,
        inputs: list[tuple[str, tuple[int | str, ...], np.dtype]],
        outputs: list[tuple[str, tuple[int | str, ...], np.dtype]],
        dims: dict[str, tuple[int, int]],
        arena_bytes: int,
        segments: tuple[np.ndarray, ...],
        info: dict[str, Any] | None = None,
        check_messages: tuple[str, ...] = (),
    ):
        self._engine = engine  # owns the code
        self._entry = ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
        )(entry_address)
        self.inputs, self.outputs, self.dims = inputs, outputs, dict(dims)
        self.arena_bytes = arena_bytes
        """Arena bytes per unit of the (first) dim: a run takes dim * this."""
        self._segments_held = segments
        self._segments = (ctypes.c_void_p * max(1, len(segments)))(
            *(s.ctypes.data for s in segments)
        )
        self._arena = aligned_empty(64)
        self._lock = threading.Lock()
        self.info = info or {}
        self.check_messages = check_messages
        """The message of each `loop.check` (a Gather's index range, ...): the
        code's status global holds the failed one's position + 1."""
        self._status: ctypes.c_int32 | None = None
        if check_messages:
            address = engine.get_global_value_address("smelt_status")
            self._status = ctypes.c_int32.from_address(address)

    @property
    def input_names(self) -> list[str]:
        return [n for n, _, _ in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [n for n, _, _ in self.outputs]

    @property
    def input_shapes(self) -> dict[str, tuple[int | str, ...]]:
        """Each input's shape, a run-time dim by its name."""
        return {n: s for n, s, _ in self.inputs}

    def arena_formula(self) -> str:
        dim = next(iter(self.dims))
        return f"{self.arena_bytes} * {dim} bytes"

    def _bind(self, feeds: dict[str, Any]) -> tuple[list[np.ndarray], dict[str, int]]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise InvalidInput(f"missing inputs: {', '.join(missing)}")
        extra = sorted(set(feeds) - set(self.input_names))
        if extra:
            raise InvalidInput(
                f"unknown inputs {', '.join(extra)}; the model takes "
                f"{', '.join(self.input_names)}"
            )
        values: dict[str, int] = {}
        arrays = []
        for name, shape, dtype in self.inputs:
            a = np.ascontiguousarray(np.asarray(feeds[name]), dtype=dtype)
            if a.ndim != len(shape):
                raise InvalidInput(
                    f"input {name} must have {len(shape)} dims {list(shape)}, "
                    f"got shape {list(a.shape)}"
                )
            for axis, (want, got) in enumerate(zip(shape, a.shape)):
                if isinstance(want, str):
                    lo, hi = self.dims[want]
                    if not lo <= got <= hi:
                        raise InvalidInput(
                            f"input {name} axis {axis}: dim '{want}' = {got} is "
                            f"outside its declared range [{lo}, {hi}] (compile with "
                            f"dims={{'{want}': (lo, hi)}} covering it)"
                        )
                    if values.setdefault(want, got) != got:
                        raise InvalidInput(
                            f"input {name} axis {axis}: dim '{want}' = {got}, but "
                            f"another input gives it {values[want]}"
                        )
                elif want != got:
                    raise InvalidInput(
                        f"input {name} axis {axis} must be {want}, got {got} "
                        f"(shape {list(a.shape)})"
                    )
            arrays.append(a)
        return arrays, values

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        arrays, values = self._bind(feeds)
        outs = [
            np.empty(
                tuple(values[d] if isinstance(d, str) else d for d in shape), dtype
            )
            for _, shape, dtype in self.outputs
        ]
        dims = [values[d] for d in self.dims]
        io = (ctypes.c_void_p * (len(arrays) + len(outs) + len(dims)))(
            *(a.ctypes.data for a in (*arrays, *outs)), *dims
        )
        with self._lock:
            need = max(64, dims[0] * self.arena_bytes)
            if self._arena.nbytes < need:
                self._arena = aligned_empty(need)
            self._entry(
                ctypes.addressof(io),
                self._arena.ctypes.data,
                ctypes.addressof(self._segments),
                None,
            )
            if self._status is not None and self._status.value:
                code, self._status.value = self._status.value, 0
                raise InvalidInput(self.check_messages[code - 1])
        return dict(zip(self.output_names, outs))

    def __call__(self, **feeds: Any) -> dict[str, np.ndarray]:
        return self.run(feeds)

    def __repr__(self) -> str:
        dims = ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in self.dims.items())
        return f"DynamicModel({', '.join(self.input_names)}; {dims})"
