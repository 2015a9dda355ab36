"""ONNX → graph dialect: loads a model, fixes its input shapes, folds constant
subgraphs, and reports every problem of a model in one error.

The result is a module with one `func.func @main` whose arguments are the real
graph inputs (initializers are constants) and whose results are the graph outputs,
named by the `smelt.input_names` / `smelt.output_names` attributes. Each node is
converted by a handler of `smelt.frontend.onnx_ops`; a node whose inputs are all
constants is evaluated at import with the reference executor.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
import onnx.numpy_helper
from onnx import helper
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    LocationAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    UnknownLoc,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from smelt.dialects import dtypes, locations
from smelt.dialects import graph as g
from smelt.errors import InvalidModel, ResourceLimit, SmeltError, UnsupportedModel
from smelt.frontend import onnx_dims, onnx_functions, symbolic_import
from smelt.frontend.onnx_body_shapes import inferred_shapes
from smelt.frontend.onnx_constants import fix_inputs
from smelt.frontend.onnx_load import (
    ModelLike,
    check_weights_fit,
    load_model,
    tensor_array,
)
from smelt.frontend.onnx_scopes import NestedScopes
from smelt.frontend.onnx_validate import DEFAULT_DOMAINS, full_check, validate
from smelt.frontend.onnx_validate import label as node_label
from smelt.frontend.onnx_values import (  # the handlers import these from here too
    Const,
    DimArray,
    NodeContext,
    Unsupported,
    Value,
    element_type,
    element_type_of,  # noqa: F401
    numpy_type_of,
    shape_of,  # noqa: F401
)
from smelt.reference import executor as reference
from smelt.targets.memory import describe_limit, gib, resolve_limit


def import_model(
    model: ModelLike,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    base_dir: str | os.PathLike | None = None,
    constants: Mapping[str, Any] | None = None,
    check_model: bool = True,
    memory_limit: int = 0,
    symbolic: bool = False,
) -> ModuleOp:
    """The graph-level module of an ONNX model (a path, bytes or a ModelProto).

    `input_shapes` fixes the symbolic or unknown dims of the graph inputs;
    `constants` fixes graph inputs to values (a scalar, a list or an array): each
    becomes an initializer, so the If conditions and shapes that depend on it
    fold at import; `base_dir` is the folder of the external data of a model given
    as bytes or a ModelProto (a path's is its own folder). The graph is checked
    first (`onnx_validate`; `check_model=False` skips onnx's full
    checker after the import). Raises one SmeltError that lists every unsupported op
    and every dynamic input dim, or a ResourceLimit before any weight is read when
    the model's tensors alone need more than `memory_limit` bytes (0: the
    machine's memory).

    `symbolic=True` keeps the dims that `input_shapes` does not fix symbolic
    instead of refusing them (`symbolic_import`).
    """
    proto, data_dir = load_model(model, base_dir)
    check_weights_fit(proto, memory_limit)
    if constants:
        proto = fix_inputs(proto, constants, input_shapes or {})
    validate(proto)
    importer = _Importer(proto, dict(input_shapes or {}), data_dir, memory_limit)
    module = symbolic_import.run(importer) if symbolic else importer.run()
    if check_model:
        full_check(proto)
    return module


_POISON = object()  # the value of a node that failed: its users are skipped


class _Importer(NestedScopes):
    def __init__(
        self,
        model: onnx.ModelProto,
        input_shapes: dict,
        data_dir: str | None = None,
        memory_limit: int = 0,
    ) -> None:
        self.graph = model.graph
        self.memory_limit = memory_limit  # 0: the machine's memory
        self.data_dir = data_dir  # where external tensors are read from
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.expansions = 0  # function calls expanded so far: unique value names
        self.opset = next(
            (o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 1
        )
        # other domains' opsets: their ops onnx defines as functions expand too
        self.domain_opsets = {o.domain: o.version for o in model.opset_import}
        self.input_shapes = input_shapes
        self.values: dict[str, Any] = {}
        self.block = Block()  # replaced in _inputs, once the input types are known
        self.unsupported: list[str] = []
        self.dynamic: list[str] = []
        # symbolic_import: the named dims of the inputs (None: dims must be static)
        self.symbols: symbolic_import.Symbols | None = None
        self.errors: list[str] = []
        # errors that break ONNX's rules: InvalidModel, while one is still listed
        # (a loop body's failed attempt takes its errors back)
        self.invalid: set[str] = set()
        self.used = onnx_functions.references(self.graph.node)
        self.used |= {o.name for o in self.graph.output}
        self.depth = 0  # nesting of function bodies and subgraphs being imported
        # the iteration numbers of the graph.loop bodies being imported, and their
        # trip counts (frontend/onnx_loop.py, onnx_loop_index.py)
        self.loop_counters: dict[SSAValue, int] = {}
        self.input_names: list[str] = []
        # the node being imported: every op emitted for it carries its name
        self.location: LocationAttr = UnknownLoc()

    def run(self) -> ModuleOp:
        from smelt.frontend.handlers import HANDLERS

        input_names, input_types = self._inputs()
        for index, node in enumerate(self.graph.node):
            self._node(index, node, HANDLERS)
        outputs = self._outputs()
        self._raise_problems()
        self.block.add_op(func.ReturnOp(*outputs))
        main = func.FuncOp(
            "main", (input_types, [v.type for v in outputs]), Region(self.block)
        )
        main.attributes["smelt.input_names"] = _names(input_names)
        main.attributes["smelt.output_names"] = _names(
            [o.name for o in self.graph.output]
        )
        module = ModuleOp([main])
        module.verify()
        return module

    def emit(self, cls, operands, result_types=None, **attrs) -> list[Value]:
        if any(isinstance(v, DimArray) for v in operands):  # shape arithmetic
            return onnx_dims.fold(cls, operands, result_types, attrs)
        if cls.FOLDABLE and all(isinstance(v, Const) for v in operands):
            scratch = Block(arg_types=[v.type for v in operands])
            op = cls.build(scratch.args, result_types, **attrs)
            self._check_fold(op)
            arrays = reference.evaluate(op, [v.array for v in operands])
            return [Const(a) for a in arrays]
        op = cls.build([self.materialize(v) for v in operands], result_types, **attrs)
        op.location = self.location
        self.block.add_op(op)
        return list(op.results)

    def _check_fold(self, op: g.GraphOp) -> None:
        """Refuses to fold `op` at import when its results alone would take more
        than the memory limit."""
        types = [r.type for r in op.results if isinstance(r.type, TensorType)]
        nbytes = sum(
            dtypes.byte_size(t.element_type) * math.prod(t.get_shape()) for t in types
        )
        self.check_bytes(nbytes, ", ".join(str(t) for t in types[:2]))

    def check_bytes(self, nbytes: int, what: str) -> None:
        """ResourceLimit when a constant of `nbytes` (`what`), made at import,
        would take more than the memory limit (a ConstantOfShape of 40 GB was
        built before)."""
        limit = resolve_limit(self.memory_limit)
        if limit and nbytes > limit:
            raise ResourceLimit(
                f"its result ({what}) is computed at import from constants and "
                f"would take {gib(nbytes)}, more than "
                f"{describe_limit(self.memory_limit)}"
            )

    def materialize(self, v: Value) -> SSAValue:
        if isinstance(v, DimArray):
            raise v.refusal("it is used as run-time data")
        if not isinstance(v, Const):
            return v
        if v.ssa is None:
            op = g.ConstantOp.from_array(v.array)
            op.location = self.location  # the node that needs it first
            self.block.add_op(op)
            v.ssa = op.result
        return v.ssa

    def _inputs(self) -> tuple[list[str], list[TensorType]]:
        for t in self.graph.initializer:
            try:
                self.values[t.name] = Const(
                    tensor_array(t, f"initializer '{t.name}'", self.data_dir)
                )
            except Unsupported as e:
                self.unsupported.append(f"initializer '{t.name}': {e}")
                self.values[t.name] = _POISON
        for t in self.graph.sparse_initializer:
            self.unsupported.append(f"sparse initializer '{t.values.name}'")
        real = [i for i in self.graph.input if i.name not in self.values]
        unknown = set(self.input_shapes) - {i.name for i in real}
        for name in sorted(unknown):
            self.errors.append(
                f"input_shapes names '{name}', which is not a model input "
                f"(inputs: {', '.join(i.name for i in real)})"
            )
        names, types = [], []
        for info in real:
            t = self._input_type(info)
            if t is None:
                self.values[info.name] = _POISON
                continue
            names.append(info.name)
            types.append(t)
        self.block = Block(arg_types=types)
        for name, arg in zip(names, self.block.args):
            self.values[name] = arg
        self.input_names = names
        return names, types

    def _input_type(self, info: onnx.ValueInfoProto) -> TensorType | None:
        what = f"input '{info.name}'"
        if info.type.WhichOneof("value") != "tensor_type":
            self.unsupported.append(f"{what}: only tensor inputs are supported")
            return None
        tt = info.type.tensor_type
        try:
            elem = element_type(tt.elem_type, what)
        except SmeltError as e:
            self.unsupported.append(str(e))
            return None
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        given = self.input_shapes.get(info.name)
        if given is not None:
            given = [int(d) for d in given]
            if dims is not None and len(dims) != len(given):
                self.errors.append(
                    f"input_shapes gives {what} rank {len(given)}, "
                    f"the model says rank {len(dims)}"
                )
                return None
            for i, d in enumerate(dims or []):
                if d.HasField("dim_value") and d.dim_value != given[i]:
                    self.errors.append(
                        f"input_shapes gives {what} dim {i} = {given[i]}, "
                        f"the model fixes it to {d.dim_value}"
                    )
            return self._checked(f"input_shapes gives {what}", given, elem)
        if dims is None:
            self.dynamic.append(f"{what}: its rank is unknown")
            return None
        shape, ok = [], True
        for i, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value < 0:
                self.errors.append(f"{what} dim {i} is {d.dim_value}: dims are >= 0")
                ok = False
                continue
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
                continue
            if self.symbols is not None:
                shape.append(self.symbols.dim(d.dim_param, info.name, i))
                continue
            symbol = f"'{d.dim_param}'" if d.dim_param else "unknown"
            self.dynamic.append(f"{what} dim {i} is {symbol}")
            ok = False
        return self._checked(what, shape, elem) if ok else None

    def _checked(
        self, what: str, shape: list[int], elem: Attribute
    ) -> TensorType | None:
        """The type of a graph input of `shape`, or None (and an error) when a dim
        is negative or the shape's byte strides overflow 64-bit offsets (an empty
        tensor of 0 x 2**62 too: numpy cannot even make one)."""
        for i, d in enumerate(shape):
            if d < 0:
                self.errors.append(f"{what} dim {i} = {d}: dims are >= 0")
                return None
        static = [d for d in shape if not isinstance(d, g.Dim) and d]
        strides = dtypes.byte_size(elem) * math.prod(static)
        if strides >= 1 << 63:
            self.errors.append(
                f"{what} shape {list(shape)}: its size in bytes overflows 64-bit "
                "offsets; use smaller dims"
            )
            return None
        return g.tensor(elem, shape)

    def _node(
        self,
        index: int,
        node: onnx.NodeProto,
        handlers: dict,
        opset: int | None = None,
        depth: int = 0,
    ) -> None:
        opset = opset or self.opset
        label = node_label(node, index)
        domain = "" if node.domain in DEFAULT_DOMAINS else f"{node.domain}::"
        handler = handlers.get(domain + node.op_type)  # com.microsoft::FusedMatMul
        outputs: list = [_POISON] * len(node.output)
        outer, self.location = self.location, locations.node(node.name or label)
        try:
            inputs = [self._lookup(n, label) if n else None for n in node.input]
            if handler is None and not self._is_function(node, opset):
                domain = f" (domain '{node.domain}')" if node.domain else ""
                raise Unsupported(f"{label}: op {node.op_type}{domain} is not supported")
            if any(v is _POISON for v in inputs):
                pass  # an earlier problem is reported; nothing to add
            elif handler is not None:
                ctx = NodeContext(self, node, label, inputs, opset)
                results = handler(ctx)
                outputs[: len(results)] = results
            else:
                body = self._function_body(node, label, inputs, opset, depth)
                self.used |= onnx_functions.references(body.nodes)
                for i, inner in enumerate(body.nodes):
                    self._node(i, inner, handlers, body.opset, depth + 1)
                inferred_shapes(self, node, label, inputs, opset, _POISON)
                return  # the body's nodes define the outputs
        except Unsupported as e:
            self.unsupported.append(_labelled(label, e))
        except ResourceLimit as e:  # nothing after it matters: stop at once
            raise ResourceLimit(_labelled(label, e)) from None
        except SmeltError as e:
            self.errors.append(_labelled(label, e))
            if isinstance(e, InvalidModel):
                self.invalid.add(self.errors[-1])
        except VerifyException as e:
            self.errors.append(f"{label}: {e}")
        finally:
            self.location = outer
        for name, v in zip(node.output, outputs):
            if name:
                self.values[name] = v

    def _lookup(self, name: str, label: str) -> Any:
        if name not in self.values:
            raise SmeltError(
                f"{label}: input '{name}' is not defined by any earlier node, "
                "initializer or graph input (are the nodes topologically sorted?)"
            )
        return self.values[name]

    def _outputs(self) -> list[SSAValue]:
        outputs = []
        for o in self.graph.output:
            v = self.values.get(o.name, _POISON)
            if o.name not in self.values:
                self.errors.append(
                    f"graph output '{o.name}' is not computed by any node"
                )
            if v is not _POISON:
                self._check_output_type(o, v)
                outputs.append(self.materialize(v))
        return outputs

    def _check_output_type(self, info: onnx.ValueInfoProto, v: Value) -> None:
        """A graph output declared with one element type and computed with
        another is refused, as onnxruntime does (an undeclared type is fine)."""
        declared = info.type.tensor_type.elem_type
        if not info.type.HasField("tensor_type"):
            return
        if not declared:
            self.errors.append(f"graph output '{info.name}' has no element type")
            return
        try:
            computed = helper.np_dtype_to_tensor_dtype(numpy_type_of(v))
        except (KeyError, ValueError, TypeError):
            return
        if declared == computed:
            return
        names = onnx.TensorProto.DataType
        want = names.Name(declared) if declared in names.values() else str(declared)
        self.errors.append(
            f"graph output '{info.name}' is declared {want} but its node computes "
            f"{names.Name(computed)}"
        )

    def _raise_problems(self) -> None:
        sections = []
        if self.unsupported:
            sections.append(
                f"unsupported ops or features ({len(self.unsupported)}):",
            )
            sections += [f"  - {p}" for p in self.unsupported]
        if self.dynamic:
            sections.append(
                f"dynamic input dims ({len(self.dynamic)}); smelt needs static "
                "shapes: pass input_shapes={'name': (1, 3, 224, 224)} to "
                "import_model / smelt.compile, or --input-shape name=1x3x224x224 on "
                "the command line:"
            )
            sections += [f"  - {p}" for p in self.dynamic]
        if self.errors:
            sections.append(f"other errors ({len(self.errors)}):")
            sections += [f"  - {p}" for p in self.errors]
        if sections:
            kind = SmeltError if self.dynamic or self.errors else UnsupportedModel
            kind = InvalidModel if self.invalid.intersection(self.errors) else kind
            raise kind("cannot import the ONNX model:\n" + "\n".join(sections))


def _labelled(label: str, e: Exception) -> str:
    return str(e) if str(e).startswith(label) else f"{label}: {e}"


def _names(names: Sequence[str]) -> ArrayAttr:
    return ArrayAttr([StringAttr(n) for n in names])
