"""onnx's backend API (`onnx.backend.base.Backend`) over smelt's CPU target, so onnx's
own backend test runner, and tools written against that API, can drive smelt.

    import smelt.backend
    rep = smelt.backend.prepare(model)          # a SmeltRep
    outputs = rep.run([x, shape])               # the model's outputs, in order
    outputs = smelt.backend.run_model(model, [x, shape])

smelt compiles for static shapes, and an input that decides a shape (Reshape's
shape, TopK's k: `SHAPE_OPERANDS`) must be a compile-time constant. `prepare` cannot
know those values, so a model with such inputs (or with dynamic input dims) is
compiled at its first `run`, with those inputs fixed to the given values
(`compile(..., constants=...)`) and the other dims taken from the given arrays;
each new signature (shapes, dtypes, the fixed values) compiles once more and is
kept. Any other model is compiled by `prepare`, so a model smelt refuses fails
there, with the SmeltError that says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from smelt.errors import InvalidInput, SmeltError
from smelt.frontend.onnx_constants import shape_inputs
from smelt.runtime.model import CompiledModel

# smelt.compile's options that prepare() passes on; the runner's own keywords
# (its comparison tolerances) are not for the backend.
COMPILE_OPTIONS = frozenset(
    ("pipeline", "level", "threads", "cpu", "precision", "check_model", "base_dir")
)
RUNNER_OPTIONS = frozenset(("rtol", "atol"))


class SmeltRep(BackendRep):
    """A prepared model: `run(inputs)` returns its outputs in graph order (a named
    tuple: by position or by output name)."""

    def __init__(self, model: onnx.ModelProto, options: Mapping[str, Any]) -> None:
        self.model = model
        self.options = dict(options)
        initializers = {t.name for t in model.graph.initializer}
        self.input_names = [
            i.name for i in model.graph.input if i.name not in initializers
        ]
        self.output_names = [o.name for o in model.graph.output]
        self.fixed = shape_inputs(model)  # fixed to their values at compile time
        self._compiled: dict[tuple, CompiledModel] = {}
        if not self.fixed and all(_static(i) for i in self._inputs()):
            self._compiled[()] = self._compile({}, {})

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """The outputs for `inputs`: arrays in graph-input order (a list, or one
        array for a one-input model) or a {name: array} mapping."""
        if kwargs:
            raise SmeltError(f"SmeltRep.run takes no options, got {sorted(kwargs)}")
        feeds = self._feeds(inputs)
        compiled = self._compiled.get(())
        if compiled is None:
            compiled = self._for_signature(feeds)
        results = compiled.run(
            {n: v for n, v in feeds.items() if n in compiled.input_names}
        )
        outputs = namedtupledict("Outputs", self.output_names)
        return outputs(*(results[n] for n in self.output_names))

    # --- inputs ----------------------------------------------------------------------

    def _inputs(self) -> list[onnx.ValueInfoProto]:
        return [i for i in self.model.graph.input if i.name in self.input_names]

    def _feeds(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self.input_names))
            if unknown:
                raise InvalidInput(
                    f"inputs {unknown} are not model inputs ({self.input_names})"
                )
            items = list(inputs.items())
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise InvalidInput(
                    f"the model takes {len(self.input_names)} inputs "
                    f"({', '.join(self.input_names)}), got {len(inputs)}"
                )
            items = list(zip(self.input_names, inputs))  # trailing ones: optional
        feeds = {}
        for name, value in items:
            if value is None:
                continue  # an optional input left out
            if isinstance(value, onnx.TensorProto):
                value = onnx.numpy_helper.to_array(value)
            if not isinstance(value, np.ndarray | np.generic | int | float | bool):
                raise InvalidInput(
                    f"input '{name}' is a {type(value).__name__}; smelt takes "
                    "tensors only"
                )
            feeds[name] = self._typed(name, np.asarray(value))
        return feeds

    def _typed(self, name: str, value: np.ndarray) -> np.ndarray:
        """`value`, viewed as its input's element type when it comes as raw bytes
        of that width (onnx's test runner hands bfloat16 data over as `|V2`)."""
        if value.dtype.kind != "V" or value.dtype.names is not None:
            return value
        info = next((i for i in self.model.graph.input if i.name == name), None)
        if info is None or not info.type.HasField("tensor_type"):
            return value
        dtype = np.dtype(
            onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        )
        return value.view(dtype) if dtype.itemsize == value.dtype.itemsize else value

    # --- compilation -----------------------------------------------------------------

    def _for_signature(self, feeds: Mapping[str, np.ndarray]) -> CompiledModel:
        """The model compiled for these inputs' shapes and fixed values."""
        missing = sorted(self.fixed - set(feeds))
        if missing:
            raise InvalidInput(
                f"inputs {missing} decide output shapes: smelt needs their values"
            )
        constants = {n: feeds[n] for n in sorted(self.fixed)}
        shapes = {n: v.shape for n, v in feeds.items() if n not in self.fixed}
        key = (
            tuple((n, v.dtype.str, v.shape, v.tobytes()) for n, v in constants.items()),
            tuple((n, feeds[n].dtype.str, s) for n, s in sorted(shapes.items())),
        )
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compile(constants, shapes)
            self._compiled[key] = compiled
        return compiled

    def _compile(
        self, constants: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]]
    ) -> CompiledModel:
        from smelt.compiler.driver import compile as smelt_compile

        return smelt_compile(
            self.model,
            "cpu",
            constants=dict(constants),
            input_shapes=dict(shapes),
            **self.options,
        )


def _static(info: onnx.ValueInfoProto) -> bool:
    """Whether an input's type fixes its shape (else the first run's arrays do)."""
    t = info.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in t.tensor_type.shape.dim)


class SmeltBackend(Backend):
    """smelt as an ONNX backend: the CPU device (the llvm target)."""

    @classmethod
    def prepare(
        cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any
    ) -> SmeltRep:
        """A SmeltRep of `model` on `device` ("CPU"); `kwargs`: options of
        `smelt.compile` (level, threads, cpu, precision, pipeline, check_model,
        base_dir)."""
        if not cls.supports_device(device):
            raise SmeltError(
                f"smelt's ONNX backend runs on the CPU device, not '{device}' (the "
                "GPU target is smelt.compile(model, 'gpu'))"
            )
        unknown = sorted(set(kwargs) - COMPILE_OPTIONS - RUNNER_OPTIONS)
        if unknown:
            raise SmeltError(
                f"unknown options {unknown}: smelt's backend takes "
                f"{sorted(COMPILE_OPTIONS)}"
            )
        if isinstance(model, bytes):
            model = onnx.load_model_from_string(model)
        if not isinstance(model, onnx.ModelProto):
            raise SmeltError(f"prepare takes a ModelProto, not {type(model).__name__}")
        options = {k: v for k, v in kwargs.items() if k in COMPILE_OPTIONS}
        return SmeltRep(model, options)

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        """`prepare(model, device, **kwargs).run(inputs)`."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """Runs one node on `inputs` (arrays, in the node's input order), as a
        one-node model of the default domain's opset `opset_version` (default:
        onnx's newest)."""
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        arrays = [np.asarray(v) for v in inputs]
        names = [n for n in node.input if n]
        if len(names) != len(arrays):
            raise InvalidInput(
                f"node {node.op_type} has {len(names)} inputs, got {len(arrays)}"
            )
        graph_inputs = [
            onnx.helper.make_tensor_value_info(
                n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
            )
            for n, a in zip(names, arrays)
        ]
        graph_outputs = []
        for i, name in enumerate(node.output):
            if outputs_info is not None and i < len(outputs_info):
                dtype, shape = outputs_info[i]
                elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                graph_outputs.append(
                    onnx.helper.make_tensor_value_info(name, elem, shape)
                )
            else:
                graph_outputs.append(onnx.helper.make_empty_tensor_value_info(name))
        graph = onnx.helper.make_graph([node], "node", graph_inputs, graph_outputs)
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid("", opset)]
        )
        return cls.run_model(model, arrays, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Only the CPU: smelt's GPU target is not an ONNX backend device yet."""
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):
            return False


# The module is a backend too, as onnx's runner and onnxruntime.backend expect.
prepare = SmeltBackend.prepare
run_model = SmeltBackend.run_model
run_node = SmeltBackend.run_node
supports_device = SmeltBackend.supports_device
is_compatible = SmeltBackend.is_compatible
