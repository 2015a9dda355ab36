"""LoweringContext: builds the loop-level @main while graph ops are lowered in order."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import LocationAttr, MemRefType, TensorType, UnknownLoc
from xdsl.ir import Block, Operation, Region, SSAValue

from smelt.dialects import locations, loop
from smelt.errors import SmeltError
from smelt.lowering.loop_builder import KernelBuilder
from smelt.lowering.scalar_ops import memref_type


class LoweringContext:
    """The @main being built: graph values mapped to buffers, kernels in call order.

    Lowerings ask for `buffer(value)` (an input's memref), `result_buffer(value)`
    (a fresh `loop.alloc`, or the output argument the value is written into) and
    `op_kernel(op)` (a kernel over those buffers, already called from @main).
    Kernels, their calls and the ops of @main carry `location`: the ONNX nodes of
    the graph op being lowered.
    """

    def __init__(self, graph_func: func.FuncOp, taken_names: set[str]):
        inputs = [memref_type(_tensor(t)) for t in graph_func.function_type.inputs]
        outputs = [memref_type(_tensor(t)) for t in graph_func.function_type.outputs]
        self.block = Block(arg_types=[*inputs, *outputs])
        self.input_args = list(self.block.args[: len(inputs)])
        self.output_args = list(self.block.args[len(inputs) :])
        self.buffers: dict[SSAValue, SSAValue] = dict(
            zip(graph_func.body.block.args, self.input_args)
        )
        self.kernels: list[KernelBuilder] = []
        self.calls: list[func.CallOp] = []
        self.direct_outputs: dict[SSAValue, SSAValue] = {}
        self._taken = taken_names
        self._next: dict[str, int] = {}  # per base: the first counter maybe free
        self.location: LocationAttr = UnknownLoc()

    # --- @main -----------------------------------------------------------------------

    def emit(self, op: Operation) -> SSAValue:
        locations.inherit(op, self.location)
        self.block.add_op(op)
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def alloc(self, memref: MemRefType) -> SSAValue:
        return self.emit(loop.AllocOp(memref))

    def bind(self, value: SSAValue, buffer: SSAValue) -> None:
        """`value` lives in `buffer` (a view, a constant, an alias)."""
        self.buffers[value] = buffer

    def buffer(self, value: SSAValue) -> SSAValue:
        return self.buffers[value]

    def result_buffer(self, value: SSAValue) -> SSAValue:
        """Where a kernel writes `value`: its output argument or a new allocation."""
        buffer = self.direct_outputs.get(value)
        if buffer is None:
            buffer = self.alloc(memref_type(_tensor(value.type)))
        self.buffers[value] = buffer
        return buffer

    # --- kernels ---------------------------------------------------------------------

    @property
    def taken_names(self) -> set[str]:
        """The module's symbol names so far (a nested lowering adds to them)."""
        return self._taken

    def unique_name(self, base: str) -> str:
        counter = self._next.get(base, 0)
        while f"{base}_{counter}" in self._taken:
            counter += 1
        name = f"{base}_{counter}"
        self._taken.add(name)
        self._next[base] = counter + 1
        return name

    def kernel(
        self, base: str, inputs: Sequence[SSAValue], outputs: Sequence[SSAValue]
    ) -> KernelBuilder:
        """A new kernel `<base>_<n>` over these @main buffers, called from @main now."""
        name = self.unique_name(base)
        in_types = [_memref(v) for v in inputs]
        out_types = [_memref(v) for v in outputs]
        k = KernelBuilder(name, in_types, out_types)
        k.func.location = self.location
        self.kernels.append(k)
        call = func.CallOp(name, [*inputs, *outputs], [])
        self.emit(call)
        self.calls.append(call)
        return k

    def op_kernel(
        self, op: Operation, inputs: Sequence[SSAValue] | None = None
    ) -> KernelBuilder:
        """The kernel of one graph op: its operands' buffers in, its results' out."""
        ins = [self.buffer(v) for v in (op.operands if inputs is None else inputs)]
        outs = [self.result_buffer(r) for r in op.results]
        # "quant.quantize" -> "quant_quantize": kernel names are identifiers
        return self.kernel(op.name.removeprefix("graph.").replace(".", "_"), ins, outs)

    def finish(self, graph_func: func.FuncOp) -> list[func.FuncOp]:
        """The kernels, then the new @main (same name and attributes). Kernel inputs
        that a kernel never reads are dropped (a conv reads its padded or packed
        copy instead), and so are constants that no kernel reads any more."""
        for k, call in zip(self.kernels, self.calls):
            unused = k.drop_unused_inputs()
            if unused:
                operands = [v for i, v in enumerate(call.arguments) if i not in unused]
                new = func.CallOp(call.callee, operands, [])
                new.location = call.location
                self.block.insert_op_before(new, call)
                self.block.erase_op(call)
        for op in list(self.block.ops):
            if isinstance(op, loop.ConstantOp) and not op.result.uses:
                self.block.erase_op(op)
        self.emit(func.ReturnOp())
        arg_types = [a.type for a in self.block.args]
        main = func.FuncOp(
            graph_func.sym_name.data,
            (arg_types, []),
            Region(self.block),
            graph_func.sym_visibility,
        )
        main.attributes.update(graph_func.attributes)
        return [k.finish() for k in self.kernels] + [main]


def _tensor(t: object) -> TensorType:
    if not isinstance(t, TensorType):
        raise SmeltError(f"convert-graph-to-loop expects tensor types, got {t}")
    return t


def _memref(buffer: SSAValue) -> MemRefType:
    t = buffer.type
    assert isinstance(t, MemRefType)
    return t
