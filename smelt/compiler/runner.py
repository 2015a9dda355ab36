"""The pass runner every tool shares (`smelt.compile`'s stages, `smelt report`,
`smelt show`, `smelt-opt`, the Triton AOT driver): a model imported as a
graph-level module, a pipeline parsed and run on it with its instrumentation (a
crashing pass named, its reproducer written), and @main's io specs."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterator, Sequence

import onnx
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, TensorType
from xdsl.passes import ModulePass, PassPipeline

from smelt.compiler.instrument import Instrumentation
from smelt.dialects import dtypes, program
from smelt.dialects.program import main_func
from smelt.errors import SmeltError, internal_errors
from smelt.runtime.model import TensorSpec
from smelt.universe import SMELT_UNIVERSE, make_context

ModelLike = str | os.PathLike | bytes | onnx.ModelProto | ModuleOp


def import_graph(
    model: ModelLike,
    input_shapes: dict | None = None,
    base_dir: str | None = None,
    constants: dict | None = None,
    check_model: bool = True,
    memory_limit: int = 0,
) -> ModuleOp:
    """The graph-level module of `model` (a path, bytes, ModelProto or module);
    ResourceLimit when its weights alone need more than `memory_limit` bytes (0:
    the machine's memory)."""
    if isinstance(model, ModuleOp):
        if constants:
            raise SmeltError("constants= fixes ONNX inputs: give an ONNX model")
        return model
    from smelt.frontend.onnx import import_model

    return import_model(
        model, input_shapes or {}, base_dir, constants, check_model=check_model,
        memory_limit=memory_limit,
    )  # fmt: skip


def parse_pipeline(spec: str, callback: Callable | None = None) -> PassPipeline:
    try:
        return PassPipeline.parse_spec(SMELT_UNIVERSE.all_passes, spec, callback)
    except ValueError as e:
        raise SmeltError(f"bad pipeline '{spec}': {e}") from None


def lower(
    module: ModuleOp,
    spec: str,
    callback: Callable | None = None,
    instrument: Instrumentation | None = None,
    *,
    source: str = "input",
    passthrough: tuple[type[Exception], ...] = (),
    finish: bool = True,
) -> ModuleOp:
    """Runs pipeline `spec` on `module` in place and returns it; a pass that fails
    with anything but a SmeltError (or a `passthrough` type) is named in the
    InternalError, which says where its crash reproducer lies.

    `instrument` (default: one that only keeps the reproducer ready) dumps, times
    and counts between passes; `callback` runs after it; `source` names the
    input in dump files; `finish=False` leaves the reports (`instrument.finish()`)
    to the caller, who may time more stages."""
    instrument = instrument if instrument is not None else Instrumentation()
    passes = parse_pipeline(spec).passes
    instrument.start(module, spec, passes, source)
    run_passes(module, passes, instrument, callback, passthrough)
    if finish:
        instrument.finish()
    return module


def run_passes(
    module: ModuleOp,
    passes: Sequence[ModulePass],
    instrument: Instrumentation,
    callback: Callable | None = None,
    passthrough: tuple[type[Exception], ...] = (),
) -> None:
    """Runs `passes`, the next ones of the pipeline that `instrument` started
    (`Instrumentation.start`), on `module` in place (see `lower`)."""
    running = ["the pipeline"]

    def track(previous, op, following) -> None:
        instrument(previous, op, following)
        running[0] = f"pass {following.name}" if following else "the pipeline"
        if callback is not None:
            callback(previous, op, following)

    try:
        with fewer_collections():
            PassPipeline(tuple(passes), track).apply(make_context(), module)
    except (SmeltError, *passthrough):
        raise
    except Exception as e:  # noqa: BLE001 (re-raised as the failed pass's error)
        with internal_errors(running[0], lambda: reproducer_note(instrument)):
            raise e


def reproducer_note(instrument: Instrumentation) -> str:
    """The sentence saying where the crashed pass's reproducer lies."""
    try:
        return instrument.crashed(make_context)
    except Exception as e:  # noqa: BLE001 (the crash's own report comes first)
        return f"no reproducer ({type(e).__name__}: {e})"


def io_specs(module: ModuleOp) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Input and output specs of @main (graph level: args/results; loop level:
    args are inputs then outputs)."""
    main = main_func(module)
    names_in = _names(main, program.INPUT_NAMES_ATTR)
    names_out = _names(main, program.OUTPUT_NAMES_ATTR)
    types = list(main.function_type.inputs.data)
    if all(isinstance(t, TensorType) for t in types):
        types += list(main.function_type.outputs.data)
    specs = [
        TensorSpec(name, tuple(t.get_shape()), _numpy_dtype(t))
        for name, t in zip(names_in + names_out, types, strict=True)
    ]
    return specs[: len(names_in)], specs[len(names_in) :]


def _names(main: func.FuncOp, key: str) -> list[str]:
    names = program.io_names(main, key)
    if names is None:
        raise SmeltError(f"@main lacks the {key} attribute")
    return names


def _numpy_dtype(t: TensorType | MemRefType):
    return dtypes.to_numpy(t.element_type)


_GC_LOCK = threading.Lock()


_GC_DEPTH = [0, (0, 0, 0)]  # compiles running now, the thresholds they replaced


GC_YOUNG_THRESHOLD = 100_000
"""Allocations between the young collections of Python's cyclic GC while a
compile runs (Python's default: 700). A compile makes millions of IR objects
that live until it ends; at the default each full collection walks all of them,
and those collections took a quarter to a third of a compile's time."""


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Python's GC runs young collections every GC_YOUNG_THRESHOLD allocations
    (and so older ones far less often) while any compile runs; restored after.
    Garbage is still collected: erased ops that hold weights drop them at once
    (see convert-graph-to-loop and loop-pack-constant)."""
    with _GC_LOCK:
        if _GC_DEPTH[0] == 0:
            _GC_DEPTH[1] = gc.get_threshold()
            _, older, oldest = _GC_DEPTH[1]
            gc.set_threshold(max(GC_YOUNG_THRESHOLD, _GC_DEPTH[1][0]), older, oldest)
        _GC_DEPTH[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_DEPTH[0] -= 1
            if _GC_DEPTH[0] == 0:
                gc.set_threshold(*_GC_DEPTH[1])
