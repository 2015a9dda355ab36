"""Nested graphs in the importer's one scope: the body of an If, Loop or Scan, and
the nodes of a function call (an op onnx defines as a function, or a function of
the model), imported with their values renamed uniquely (`NestedScopes`, a part of
`onnx._Importer`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx
from onnx import helper
from xdsl.ir import BlockArgument, OpResult

from smelt.errors import SmeltError
from smelt.frontend import onnx_functions
from smelt.frontend.onnx_load import tensor_array
from smelt.frontend.onnx_validate import DEFAULT_DOMAINS
from smelt.frontend.onnx_values import (
    Const,
    Unsupported,
    Value,
    numpy_type_of,
    shape_of,
)

MAX_FUNCTION_DEPTH = 16  # nested function bodies; deeper is a recursive definition


class NestedScopes:
    """The importer's methods for nested graphs; they use its state (`values`,
    `depth`, `expansions`, `functions`, `domain_opsets`, `used`, `data_dir`,
    `block`, `input_names`) and import nodes with its `_node`."""

    def inline(
        self,
        graph: onnx.GraphProto,
        bindings: Sequence[Value],
        node: onnx.NodeProto,
        label: str,
        opset: int,
    ) -> list[Any]:
        """Imports the nodes of subgraph `graph` (an If branch, a Loop or Scan body)
        with its formal inputs bound to `bindings`, and returns the values of its
        outputs (_POISON where a node failed: its problem is recorded). The values
        it defines are renamed uniquely, so a body can be imported many times; it
        sees the outer values by name."""
        from smelt.frontend.handlers import HANDLERS

        scope = node.name or node.op_type
        if self.depth >= MAX_FUNCTION_DEPTH:
            raise SmeltError(
                f"{label}: subgraphs and function bodies nest deeper than "
                f"{MAX_FUNCTION_DEPTH} levels"
            )
        if len(bindings) != len(graph.input):
            raise SmeltError(
                f"{label}: its subgraph '{graph.name}' declares {len(graph.input)} "
                f"inputs, the op binds {len(bindings)}"
            )
        self.expansions += 1
        prefix = f"{scope}#{self.expansions}"
        names: dict[str, str] = {}
        for formal, value in zip(graph.input, bindings):
            names[formal.name] = f"{prefix}/{formal.name}"
            self.values[names[formal.name]] = value
        for t in graph.initializer:
            names[t.name] = f"{prefix}/{t.name}"
            array = tensor_array(t, f"initializer '{t.name}'", self.data_dir)
            self.values[names[t.name]] = Const(array)
        nodes = onnx_functions.rename_subgraph(graph.node, names, prefix)
        self.used |= onnx_functions.references(nodes)
        self.depth += 1
        try:
            for i, inner in enumerate(nodes):
                self._node(i, inner, HANDLERS, opset, self.depth)
        finally:
            self.depth -= 1
        outputs = []
        for o in graph.output:
            name = names.get(o.name, o.name)
            if name not in self.values:
                raise SmeltError(
                    f"{label}: output '{o.name}' of its subgraph '{graph.name}' is "
                    "not computed by any node"
                )
            outputs.append(self.values[name])
        return outputs

    def inputs_behind(self, v: Value) -> list[str]:
        """The graph inputs that value `v` is computed from."""
        seen, stack, found = set(), [v], set()
        while stack:
            x = stack.pop()
            if isinstance(x, Const) or id(x) in seen:
                continue
            seen.add(id(x))
            if isinstance(x, BlockArgument) and x.block is self.block:
                found.add(x.index)
            elif isinstance(x, OpResult):
                stack.extend(x.op.operands)
        return [self.input_names[i] for i in sorted(found)]

    def _is_function(self, node: onnx.NodeProto, opset: int) -> bool:
        if (node.domain, node.op_type) in self.functions:
            return True
        if node.domain in DEFAULT_DOMAINS:
            return onnx_functions.has_function(node.op_type, opset)
        version = self.domain_opsets.get(node.domain)
        return version is not None and onnx_functions.has_function(
            node.op_type, version, node.domain
        )

    def _function_body(
        self, node: onnx.NodeProto, label: str, inputs: list, opset: int, depth: int
    ) -> onnx_functions.Body:
        """The nodes that replace a call of an op onnx defines as a function, or of
        a function of the model; Unsupported when there is none."""
        local = self.functions.get((node.domain, node.op_type))
        function, defaults = local, {}
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        version = opset if not domain else self.domain_opsets.get(domain)
        if local is None and version is not None:
            types = [None if v is None else type_proto(v) for v in inputs]
            function = onnx_functions.schema_function(node, version, types)
            if function is not None:
                defaults = onnx_functions.schema_defaults(
                    node.op_type, version, domain
                )
        if function is None:
            raise Unsupported(
                f"{label}: op {node.op_type} is not supported for these input "
                "types (onnx builds no function body for them)"
            )
        if depth >= MAX_FUNCTION_DEPTH:
            raise SmeltError(
                f"{label}: function bodies nest deeper than {MAX_FUNCTION_DEPTH} "
                "levels (a function that calls itself?)"
            )
        self.expansions += 1
        scope = f"{node.name or label}#{self.expansions}"
        caller = node.name or label  # "Op#index" for a node without a name
        return onnx_functions.expand(node, function, defaults, opset, scope, caller)


def type_proto(v: Value) -> onnx.TypeProto:
    elem = helper.np_dtype_to_tensor_dtype(numpy_type_of(v))
    return onnx_functions.tensor_type(elem, shape_of(v))
