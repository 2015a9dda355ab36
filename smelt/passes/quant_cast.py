"""quant-cast: f32 weights and activations stored as f16 / bf16, f32 at the edges.

Mixed precision after onnxruntime's float16 converter with `keep_io_types`: every
f32 constant becomes a low-precision constant, every op whose operands can all be
low precision computes on them (its inferred result types follow), the model's f32
inputs are cast down once at entry and its f32 outputs cast up once before the
return, so callers still feed and read f32.

What stays f32, and why no more is needed:
- Arithmetic never happens in 16 bits: the loop lowering stores f16 / bf16 but
  computes in f32 (`compute_type` in lowering/loop_builder.py). Matmul / gemm / conv
  accumulate their sums in an f32 register (lower_matmul.py's dot form, lower_conv*.py
  for 16-bit floats), and the iter_args of every reduction are f32 too: softmax's
  max and sum, layer-norm's mean and variance, ReduceSum / ReduceMean's
  accumulators (lower_reduce.py, loop_nests.reduce_axes). Only the values between
  kernels are rounded to the low type; fused chains keep f32 registers inside.
- Ops in `KEEP_F32`, ops with regions (scan, loop bodies), ops whose shape rule
  refuses low-precision operands and contractions without a fast 16-bit path
  (matmul, gemm, conv: f32 weights, see the `contractions` option; on a CPU
  whose bf16 dot beats f32, `bf16_path.fast_dot`, bf16 matmul / gemm with a
  constant weight and group-1 convs with constant weights become vdpbf16ps GEMM
  calls and are converted by default) keep their f32 operands (a cast back
  to f32 is inserted for each converted one) and f32 results.

    %w = graph.constant dense<...> : tensor<4x8xf32>
    %y = graph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
    func.return %y
  → %x1 = graph.cast %x {to = bf16} ; %w1 = graph.constant ... : tensor<4x8xbf16>
    %y1 = graph.matmul %x1, %w1 : (...) -> tensor<2x8xbf16>
    %y = graph.cast %y1 {to = f32} ; func.return %y
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.transforms.dead_code_elimination import dce

from smelt.dialects import dtypes, graph, target
from smelt.errors import SmeltError
from smelt.passes import remarks

LOW_TYPES: dict[str, Attribute] = {"f16": dtypes.f16, "bf16": dtypes.bf16}


def _is_f32(value: SSAValue) -> bool:
    t = value.type
    return isinstance(t, TensorType) and t.element_type == dtypes.f32


@dataclass(frozen=True)
class QuantCastPass(ModulePass):
    """Stores f32 weights and activations as `to` (f16 or bf16) with f32 io types;
    arithmetic and accumulators stay f32 (see the module docstring)."""

    name = "quant-cast"

    to: str = "bf16"
    # Matmul / gemm / conv in 16 bits too (weights stored in `to`). true: all of
    # them; false: none (f32 weights, a cast up before them). Unset (the default):
    # those with a fast 16-bit lowering, i.e. with to=bf16 on a `#target.cpu`
    # whose bf16 dot beats f32 (`bf16_path.fast_dot`: Zen 4 / 5, not Intel's
    # avx512bf16 CPUs), matmul / gemm with a constant 2-D weight (a vdpbf16ps GEMM
    # call, lower_matmul_bf16.py) and group-1 convs with constant weights (im2col
    # and that GEMM, lower_conv_bf16.py); elsewhere none, since the generic 16-bit
    # lowering is the unscheduled dot form (lower_matmul.py), ~300x slower than
    # the f32 GEMM.
    contractions: bool | None = None

    # Ops kept in f32 whatever their operands (besides contractions above): none
    # needs it for accuracy today (every lowering accumulates in f32).
    KEEP_F32: ClassVar[tuple[type[Operation], ...]] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.to not in LOW_TYPES:
            raise SmeltError(
                f"quant-cast{{to={self.to}}}: choose to=f16 or to=bf16"
            )
        low = LOW_TYPES[self.to]
        on_cpu = target.cpu_target(op) is not None
        for f in list(op.walk()):
            if isinstance(f, func.FuncOp) and not f.is_declaration:
                _Converter(low, self._keeps_f32, on_cpu).run(f)
        dce(op)

    def _keeps_f32(self, op: graph.GraphOp) -> bool:
        if isinstance(op, self.KEEP_F32) or op.regions:
            return True
        if op.ANCHOR != "contraction" or self.contractions:
            return False
        if self.contractions is None and self.to == "bf16":
            from smelt.targets.bf16_path import conv_has_fast_path, has_fast_path

            if isinstance(op, graph.Conv2dOp):  # group 1: im2col + the bf16 GEMM
                return not conv_has_fast_path(op)
            fast = isinstance(op, graph.MatMulOp | graph.GemmOp) and has_fast_path(op)
            return not fast
        return True


class _Converter:
    def __init__(
        self, low: Attribute, keep: Callable[[graph.GraphOp], bool], on_cpu: bool
    ):
        self.low = low
        self.keep = keep
        self.on_cpu = on_cpu  # a `#target.cpu` module: see _read_as_f32_only
        self.down: dict[SSAValue, SSAValue] = {}  # f32 value -> its low copy
        self.up: dict[SSAValue, SSAValue] = {}  # converted value -> f32 copy
        self.converted: set[SSAValue] = set()  # low results of once-f32 values

    def run(self, f: func.FuncOp) -> None:
        block = f.body.block
        f32_read = self._read_as_f32_only(block)
        for op in list(block.ops):
            if isinstance(op, func.ReturnOp):
                self._restore_operands(op)
            elif isinstance(op, graph.ConstantOp):
                continue
            elif op in f32_read:
                remarks.missed(
                    QuantCastPass.name, op,
                    f"kept f32: only f32 ops read it (a {self.low} copy would be "
                    "cast back before each)",
                )  # fmt: skip
                self._restore_operands(op)
            elif isinstance(op, graph.GraphOp):
                self._convert(op)

    def _read_as_f32_only(self, block) -> set[Operation]:
        """On a CPU target, the ops, not kept f32 themselves, whose results only
        f32 ops read: contractions kept f32 (`keep`: no fast 16-bit path) and ops
        of this set. Stored in 16 bits they would be rounded, then cast back by a
        kernel of their own before each reader (a conv takes no fused prologue;
        light_shufflenet on x86-64-v3: 113 kernels against f32's 97 when only
        convs counted, the residual stream reaching the final gemm), so they stay
        f32: on AVX2, what runs between a CNN's contractions. Contractions are
        left to `keep`, the outputs' producers convert as before (their cast up
        fuses into their kernel); other targets (a GPU's f16) keep the 16-bit
        storage between f32 contractions, unmeasured here."""
        if not self.on_cpu:
            return set()
        f32_users: set[Operation] = set()  # ops that read f32 operands
        result: set[Operation] = set()
        for op in reversed(list(block.ops)):
            if not isinstance(op, graph.GraphOp) or isinstance(op, graph.ConstantOp):
                continue
            if self.keep(op):
                if op.ANCHOR == "contraction":
                    remarks.missed(
                        QuantCastPass.name, op,
                        f"kept f32: no fast {self.low} path for this contraction on "
                        "this target (f32 compute; quant-cast{contractions=true} "
                        "forces one)",
                    )  # fmt: skip
                f32_users.add(op)
                continue
            if op.ANCHOR == "contraction":  # a 16-bit one computes otherwise
                continue
            users = [use.operation for r in op.results for use in r.uses]
            if users and all(u in f32_users for u in users):
                f32_users.add(op)
                result.add(op)
        return result

    # --- values -----------------------------------------------------------------

    def _lowered(self, value: SSAValue, before: Operation) -> SSAValue:
        """The low-precision copy of f32 `value` (a constant is converted, anything
        else cast once right after it is defined)."""
        if value in self.down:
            return self.down[value]
        owner = value.owner
        if isinstance(owner, graph.ConstantOp):
            array = owner.to_array().astype(dtypes.to_numpy(self.low))
            new = graph.ConstantOp.from_array(array)
            new.location = owner.location
            owner.parent_block().insert_op_after(new, owner)
        else:
            new = graph.CastOp.build([value], to=self.low)
            new.location = before.location
            before.parent_block().insert_op_before(new, before)
        self.down[value] = new.results[0]
        return new.results[0]

    def _raised(self, value: SSAValue, before: Operation) -> SSAValue:
        if value in self.up:
            return self.up[value]
        new = graph.CastOp.build([value], to=dtypes.f32)
        new.location = before.location
        before.parent_block().insert_op_before(new, before)
        self.up[value] = new.results[0]
        return new.results[0]

    # --- ops --------------------------------------------------------------------

    def _restore_operands(self, op: Operation) -> None:
        """Operands that were f32 before the pass read the f32 copy again."""
        for i, v in enumerate(op.operands):
            if v in self.converted:
                op.operands[i] = self._raised(v, op)

    def _convert(self, op: graph.GraphOp) -> None:
        if self.keep(op) or not any(
            _is_f32(v) or v in self.converted for v in op.operands
        ):
            self._restore_operands(op)
            return
        operands = [
            self._lowered(v, op) if _is_f32(v) else v for v in op.operands
        ]
        attrs, attributes = op.attrs(), dict(op.attributes)
        if isinstance(op, graph.CastOp) and attrs["to"] == dtypes.f32:
            attrs["to"] = attributes["to"] = self.low
        try:
            types = op.infer([v.type for v in operands], attrs)
        except Exception:  # the shape rule refuses low precision: keep f32
            self._restore_operands(op)
            return
        if any(
            t.element_type == dtypes.f32 for t in types if isinstance(t, TensorType)
        ):
            self._restore_operands(op)
            return
        new = type(op).create(
            operands=operands,
            result_types=list(types),
            attributes=attributes,
            properties=dict(op.properties),
        )
        new.location = op.location
        op.parent_block().insert_op_before(new, op)
        for old, res in zip(op.results, new.results, strict=True):
            old.replace_all_uses_with(res)
            if _is_f32(old):
                self.converted.add(res)
        op.parent_block().erase_op(op)
