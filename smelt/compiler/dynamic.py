"""`compile_dynamic`: one compile for every batch size in a range (issue 34, step 1).

An explicit opt-in beside `smelt.compile` (which stays static): the model's
inputs must lead with one symbolic dim (the ONNX `dim_param`, e.g. "batch",
bounded by `dims={"batch": (1, 64)}`), their other dims static, and every op
must compute each batch row from that row alone (the rule of
`dynamic_rows.py`); anything else is refused naming the op. The model is
lowered and scheduled by the usual pipeline for batch 1, then the batch
becomes a run-time loop bound (`lowering/dynamic_batch.py`) and the LLVM code reads it from the call
(`lowering/llvm/emit_dynamic.py`); the memory plan is the batch-1 plan scaled
by the batch (arena = batch * arena(1)).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects import func

from smelt.compiler.driver import lower
from smelt.compiler.dynamic_rows import check_row_local
from smelt.compiler.options import CompileOptions
from smelt.dialects import graph
from smelt.dialects.dtypes import to_numpy
from smelt.dialects.program import is_main
from smelt.errors import SmeltError, UnsupportedModel
from smelt.lowering.dynamic_batch import make_batch_dynamic
from smelt.lowering.dynamic_block import attach_blocked
from smelt.lowering.llvm.emit_dynamic import lower_dynamic_module
from smelt.lowering.llvm.emit_kernel import EmitOptions
from smelt.lowering.llvm.jit import _initialize, _object, module_spec
from smelt.lowering.llvm.object_code import load_objects
from smelt.lowering.llvm.program import ENTRY
from smelt.lowering.memory_plan import plan_memory
from smelt.passes import remarks
from smelt.runtime.dynamic import DynamicModel

DEFAULT_BLOCK = 8
"""Rows per block (`opt_dims` default): kernels get a body scheduled for this batch."""

_IGNORED = frozenset({"base_dir", "progress", "check_model", "dims"})
"""smelt.compile / `smelt run` keywords that change nothing here."""
_DEFAULTS = {"threads": (1, None), "precision": ("f32", None), "dump": (None,)}
"""Keywords taken at their default value only (the CLI passes them all)."""


def _model_dims(model: Any) -> list[tuple[str, tuple[int | str, ...]]]:
    from smelt.frontend.onnx import load_model

    proto, _ = load_model(model, None)
    inits = {t.name for t in proto.graph.initializer}
    shapes = []
    for value in proto.graph.input:
        if value.name in inits:
            continue
        dims = value.type.tensor_type.shape.dim
        shape = tuple(
            d.dim_param if d.HasField("dim_param") else int(d.dim_value) for d in dims
        )
        shapes.append((value.name, shape))
    return shapes


def compile_dynamic(
    model: Any,
    dims: dict[str, tuple[int, int]],
    *,
    target: str = "cpu",
    level: str = "O2",
    cpu: str = "host",
    opt_level: int = 3,
    opt_dims: dict[str, int] | None = None,
    **others: Any,
) -> DynamicModel:
    """Compiles `model` once for the run-time dim of `dims` ({"batch": (1, 64)}):
    the returned model runs any value of it in the range (see the module text).
    `smelt.compile(model, dims=...)` comes here."""
    if target != "cpu":
        raise SmeltError(f"dims= (a run-time batch) is for the cpu target only, not {target}")
    given = others.pop("input_shapes", None) or {}
    if others.get("dump") is not None and others["dump"].quiet():
        del others["dump"]  # the CLI's: nothing to show
    others = {
        k: v for k, v in others.items()
        if k not in _IGNORED and v not in _DEFAULTS.get(k, (None, False, {}, [], 0))
    }  # fmt: skip
    if others:
        raise SmeltError(
            f"compile options {', '.join(sorted(others))} are not supported with "
            "dims= yet (a run-time batch takes level, cpu, opt_level and opt_dims)"
        )
    if len(dims) != 1:
        raise SmeltError(
            f"dims= bounds one run-time dim (the leading batch) for now, got {dims}"
        )
    (dim, (lo, hi)), = dims.items()
    if not 1 <= lo <= hi:
        raise SmeltError(f"dims['{dim}'] = ({lo}, {hi}): need 1 <= min <= max")
    inputs = _model_dims(model)
    for name, shape in inputs:  # `smelt run --inputs`: the feeds' shapes, any batch
        if name in given and list(given[name])[1:] != list(shape[1:]):
            raise SmeltError(
                f"input_shapes[{name!r}] = {list(given[name])} does not match the "
                f"model's {list(shape)} after the run-time dim"
            )
    for name, shape in inputs:
        if not shape or shape[0] != dim or any(isinstance(d, str) for d in shape[1:]):
            raise UnsupportedModel(
                f"input {name} has shape {list(shape)}: compile_dynamic needs "
                f"'{dim}' first and static dims after it"
            )
    from smelt.frontend.onnx import import_model

    symbolic = import_model(model, symbolic=True)
    for op in symbolic.walk():
        if isinstance(op, graph.GraphOp):
            check_row_local(op, dim)
    rows = (opt_dims or {}).get(dim, min(hi, DEFAULT_BLOCK))
    if not 1 <= rows <= hi:
        raise SmeltError(f"opt_dims['{dim}'] = {rows} is outside [1, {hi}]")
    shapes = {name: [1, *shape[1:]] for name, shape in inputs}
    options = CompileOptions(level=level, threads=1, cpu=cpu, input_shapes=shapes)
    module = import_model(model, shapes)
    outer = remarks._SINK.get()  # noqa: SLF001 (smelt run --remarks collects too)
    with remarks.collect() as found:
        lower(module, options.resolved_pipeline())
        blocked = None
        if rows > 1:
            many = import_model(model, {n: [rows, *s[1:]] for n, s in inputs})
            lower(many, options.resolved_pipeline())
            paired = attach_blocked(module, many, rows)
            if isinstance(paired, str):
                main = next(op for op in module.ops if is_main(op))
                remarks.missed(
                    "make-batch-dynamic", main,
                    f"no blocks of {rows} rows ({paired}): every row runs the "
                    "batch-1 kernels",
                )  # fmt: skip
            else:
                blocked = paired
        main = next(op for op in module.ops if is_main(op))
        assert isinstance(main, func.FuncOp)
        plan = plan_memory(main, in_place=True)
        make_batch_dynamic(module, dim, blocked)
    if outer is not None:
        outer.extend(found)
    _initialize()
    spec = module_spec(module)
    lowered = lower_dynamic_module(module, plan, [dim], EmitOptions())
    mod, obj = _object(str(lowered.ir_module), spec, opt_level, False)
    engine = load_objects((obj,), ENTRY, "the compiled model")

    def spec_of(names: list[str], types: list) -> list:
        out = []
        for n, t in zip(names, types):
            shape = (dim, *t.get_shape()[1:])
            out.append((n, shape, np.dtype(to_numpy(t.get_element_type()))))
        return out

    n_in = len(lowered.input_names)
    info = {
        "pipeline": options.resolved_pipeline(),
        "remarks": [str(r) for r in found],
        "kernels": sum(1 for op in module.ops if "loop.kernel" in op.attributes),
        "llvm_ir": str(mod),
    }
    dynamic = DynamicModel(
        engine,
        engine.get_function_address(ENTRY),
        spec_of(lowered.input_names, lowered.io_types[:n_in]),
        spec_of(lowered.output_names, lowered.io_types[n_in:]),
        {dim: (lo, hi)},
        plan.arena_bytes,
        tuple(plan.segments),
        info,
        lowered.check_messages,
    )
    dynamic.opt_dims = {dim: rows}
    return dynamic
