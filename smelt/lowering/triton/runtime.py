"""Runs a loop-level model with Triton on torch tensors: one arena, one launch plan.

The generated source is written to a file (Triton's JIT reads a function's source)
and imported; @main becomes a list of launches over views of three preallocated
buffers (the io buffers, the arena laid out by buffer-plan, the weight blob). On a
CUDA device the plan is captured once as a CUDA graph and replayed; on the CPU
(device "cpu": its source loaded with Triton's interpreter) it runs in Triton's
interpreter.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerType, MemRefType, ModuleOp, StringAttr
from xdsl.ir import SSAValue

from smelt.dialects import dtypes
from smelt.dialects.loop import AllocOp, ConstantOp, ViewOp
from smelt.errors import SmeltError
from smelt.lowering.triton.emit import TritonKernel
from smelt.lowering.triton.emit_dot import FP32_DOT_ATTR
from smelt.lowering.triton.source import module_kernels, module_source

_LOADED: dict[str, ModuleType] = {}


def cache_dir() -> str:
    """Where generated modules are written (one file per distinct source)."""
    base = os.path.join(os.path.expanduser("~"), ".cache", "smelt", "triton")
    try:
        os.makedirs(base, exist_ok=True)
        return base
    except OSError:
        return tempfile.gettempdir()


@contextmanager
def _jit_mode(interpret: bool) -> Iterator[None]:
    """Triton picks its interpreter or its compiler when `triton.jit` decorates a
    function, from `triton.knobs.runtime.interpret` (TRITON_INTERPRET unless
    set): set here for the import of one generated module, so that the caller
    decides, not the environment (Triton mirrors the knob into TRITON_INTERPRET
    while its scope lasts, and the scope restores both)."""
    from triton import knobs

    with knobs.runtime.scope():
        knobs.runtime.interpret = interpret
        yield


def load_source(
    source: str, directory: str | None = None, interpret: bool = False
) -> ModuleType:
    """Imports generated Triton source from a file named after its hash; its
    kernels run in Triton's interpreter with `interpret`, else compiled."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    key = f"{digest}-{interpret}"
    if key in _LOADED:
        return _LOADED[key]
    path = os.path.join(directory or cache_dir(), f"smelt_triton_{digest}.py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    name = f"smelt_triton_{digest}_{int(interpret)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    with _jit_mode(interpret):
        spec.loader.exec_module(module)
    _LOADED[key] = module
    return module


def torch_dtype(element_type: Any):
    import torch

    from smelt.dialects import dtypes

    if element_type == dtypes.bf16:
        return torch.bfloat16
    if element_type == dtypes.i1:
        return torch.bool
    if isinstance(element_type, IntegerType):
        return {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[
            element_type.width.data
        ]
    return {16: torch.float16, 32: torch.float32, 64: torch.float64}[
        element_type.bitwidth
    ]


@dataclass
class Launch:
    """One kernel launch of the plan."""

    kernel: TritonKernel
    fn: Any
    args: list[Any]

    def __call__(self) -> None:
        k = self.kernel
        self.fn[(k.grid,)](
            *self.args,
            **k.constexprs,
            num_warps=k.schedule.num_warps,
            num_stages=k.schedule.num_stages,
        )


class TritonProgram:
    """A model as a launch plan over preallocated torch buffers.

    `run(arrays)` takes numpy inputs then outputs (as the CPU program does) and
    writes the outputs in place; `run_torch(tensors)` takes device tensors and
    returns the output buffers (owned by the program: copy them to keep them).
    """

    def __init__(
        self,
        module: ModuleOp,
        device: str = "cuda",
        cuda_graph: bool = True,
        memory_limit: int = 0,
    ):
        import torch

        from smelt.dialects.program import INPUT_NAMES_ATTR, io_names, main_func
        from smelt.lowering.memory_plan import plan_memory

        self.device = torch.device(device)
        self.kernels = module_kernels(module)
        self.source = module_source(self.kernels)
        self.module = load_source(
            self.source, interpret=self.device.type == "cpu"
        )
        main = main_func(module)
        self.n_inputs = len(io_names(main, INPUT_NAMES_ATTR) or ())
        plan = plan_memory(main, memory_limit=memory_limit)
        self.arena_bytes = plan.arena_bytes
        self.arena = torch.zeros(
            max(1, plan.arena_bytes), dtype=torch.uint8, device=device
        )
        self.weights = torch.from_numpy(np.array(plan.weights)).to(device)
        self.io_types = [a.type for a in main.args]
        self.io = [
            torch.zeros(max(1, dtypes.nbytes(t)), dtype=torch.uint8, device=device)
            for t in self.io_types
        ]
        views: dict[SSAValue, Any] = {}
        for arg, buf in zip(main.args, self.io):
            views[arg] = self._typed(buf, 0, arg.type)
        self.launches: list[Launch] = []
        self._functions: dict[str, Any] = {}
        for op in main.body.block.ops:
            if isinstance(op, AllocOp):
                views[op.result] = self._typed(
                    self.arena, plan.arena_offsets[op.result], op.result.type
                )
            elif isinstance(op, ConstantOp):
                views[op.result] = self._typed(
                    self.weights, plan.weight_offsets[op.result], op.result.type
                )
            elif isinstance(op, ViewOp):  # a reshape or a bitcast
                views[op.result] = views[op.source].view(
                    torch_dtype(op.result.type.element_type)
                )
            elif isinstance(op, func.CallOp):
                callee = op.callee.root_reference.data
                if callee not in self.kernels:
                    raise SmeltError(
                        f"@main calls @{callee}, which is not a loop.kernel"
                    )
                args = [views[v] for v in op.arguments]
                for k in self.kernels[callee]:
                    if k.grid > 0:
                        self.launches.append(Launch(k, self._function(k), args))
        self.use_graph = cuda_graph and self.device.type == "cuda"
        self._graph = None

    def _function(self, k: TritonKernel) -> Any:
        """The jit function of `k`, shared by kernels with the same body, signature
        and schedule (Triton then compiles it once)."""
        from smelt.lowering.triton.aot import kernel_key

        return self._functions.setdefault(kernel_key(k), getattr(self.module, k.name))

    def _typed(self, base, offset: int, t: MemRefType):
        """The bytes [offset, offset + size of t) of `base` as a flat tensor of t's
        element type (an empty one for zero-size buffers)."""
        return base[offset : offset + dtypes.nbytes(t)].view(torch_dtype(t.element_type))

    @property
    def io_tensors(self) -> list[Any]:
        """@main's buffers (inputs then outputs) as typed, shaped tensors."""
        return [
            self._typed(b, 0, t).reshape(tuple(t.get_shape()))
            for b, t in zip(self.io, self.io_types)
        ]

    def launch_all(self) -> None:
        for launch in self.launches:
            launch()

    def replay(self) -> None:
        """Runs the plan once: the CUDA graph after the first (warm-up) run."""
        import torch

        if not self.use_graph:
            self.launch_all()
            return
        if self._graph is None:
            self.launch_all()  # compiles every kernel outside the capture
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.launch_all()
            self._graph = graph
        self._graph.replay()

    def run(self, args: list[np.ndarray]) -> None:
        """Runs on numpy buffers (inputs then outputs); outputs are written in place."""
        import torch

        if len(args) != len(self.io):
            raise SmeltError(
                f"the model takes {len(self.io)} buffers (inputs then outputs), "
                f"got {len(args)}"
            )
        n = self.n_inputs
        for buf, a in zip(self.io[:n], args[:n]):
            data = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            buf[: data.size].copy_(torch.from_numpy(data))
        self.replay()
        for buf, a in zip(self.io[n:], args[n:]):
            a.reshape(-1).view(np.uint8)[:] = buf[: a.nbytes].cpu().numpy()

    def run_torch(self, inputs: list[Any]) -> list[Any]:
        """Copies device `inputs` into the io buffers, runs, returns the outputs."""
        io = self.io_tensors
        for dst, src in zip(io, inputs):
            dst.copy_(src)
        self.replay()
        return io[len(inputs) :]


def compile_to_triton(
    module: ModuleOp,
    device: str,
    cuda_graph: bool = True,
    memory_limit: int = 0,
    tf32: bool = True,
) -> TritonProgram:
    """The launch plan of a loop-level module with @main (after buffer-plan) on
    torch `device`: "cuda", or "cpu" (Triton's interpreter); a model that needs
    more than `memory_limit` bytes (0: the host's memory) is refused before any
    device buffer is allocated. `tf32=False`: f32 contractions multiply in f32
    (`emit_dot.FP32_DOT_ATTR`), not as tf32."""
    if not tf32:
        module.attributes[FP32_DOT_ATTR] = StringAttr("ieee")
    return TritonProgram(module, device, cuda_graph, memory_limit)
