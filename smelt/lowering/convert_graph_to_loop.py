"""The convert-graph-to-loop pass: graph-dialect functions to loop-level kernels.

Op vocabulary of the output, exactly `VOCABULARY` below (what the LLVM and Triton
emitters must implement):

* builtin.module; func.func (kernels carry the unit attribute `loop.kernel`),
  func.call, func.return
* loop.for (static bounds, step 1, kind parallel or reduction, optional iter_args),
  loop.yield, loop.alloc, loop.constant, loop.view, loop.check (a run-time
  condition: gather / scatter indices in range; the llvm target fails the run, the
  triton target keeps only the clamp that follows it)
* memref.load, memref.store (indices of type index; i1 elements are bytes)
* arith.constant (index, integer and float values; floats include inf and NaN)
* on index and integers: arith.addi, subi, muli, divsi, divui, remsi, remui, andi,
  ori, xori, shli, shrui, shrsi (shifting by the bit width or more gives 0, or the
  sign fill), cmpi (eq ne slt sle sgt sge ult ule ugt uge), select, index_cast
* on floats: arith.addf, subf, mulf, divf, remf (C fmod; not in xDSL 0.75, see
  `dialects/arith_ext.py`), negf, maximumf, minimumf,
  cmpf (oeq olt ole ogt oge une uno)
* conversions: arith.extf, truncf, sitofp, uitofp, fptosi, fptoui, extsi, extui,
  trunci
* math.exp, log, tanh, erf, sqrt, powf, absf, floor, ceil, roundeven, sin, cos,
  tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh

Floats are computed in f32 or f64: f16/bf16 appear only in memref.load/store,
arith.extf/truncf, and graph.cast's int-float conversions. Integer division is
guarded (x / 0 gives 0, MIN / -1 wraps) so no kernel traps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, UnknownLoc
from xdsl.ir import Operation, OpResult
from xdsl.passes import ModulePass

from smelt.dialects import graph, locations, loop
from smelt.errors import SmeltError
from smelt.lowering import (
    lower_data,
    lower_elementwise,
    lower_fused,
    lower_index,
    lower_loop,
    lower_qgemm,
    lower_rnn,
)
from smelt.lowering.loop_builder import shape
from smelt.lowering.loop_context import LoweringContext
from smelt.lowering.loop_nests import copy_nest

Lowering = Callable[[LoweringContext, Operation], None]


def _qualified(dialect: str, ops: str) -> list[str]:
    return [f"{dialect}.{name}" for name in ops.split()]


# Every op name the pass emits (the module docstring explains them).
VOCABULARY = frozenset(
    _qualified("builtin", "module")
    + _qualified("func", "func call return")
    + _qualified("loop", "for yield alloc constant view check")
    + _qualified("memref", "load store")
    + _qualified(
        "arith",
        """constant addi subi muli divsi divui remsi remui andi ori xori shli shrui
        shrsi cmpi select index_cast addf subf mulf divf remf negf maximumf
        minimumf cmpf extf truncf sitofp uitofp fptosi fptoui extsi extui trunci""",
    )
    + _qualified(
        "math",
        """exp log tanh erf sqrt powf absf floor ceil roundeven sin cos tan asin
        acos atan sinh cosh asinh acosh atanh""",
    )
)

LOWERINGS: dict[type[Operation], Lowering] = {
    **lower_elementwise.LOWERINGS,
    **lower_data.LOWERINGS,
    **lower_index.LOWERINGS,
    **lower_fused.LOWERINGS,
    **lower_rnn.LOWERINGS,
    **lower_qgemm.LOWERINGS,
    **lower_loop.LOWERINGS,
}


def lower_function(graph_func: func.FuncOp, taken_names: set[str]) -> list[func.FuncOp]:
    """The kernels and the new @main for one graph-level function."""
    body = graph_func.body
    if len(body.blocks) != 1:
        raise SmeltError(f"@{graph_func.sym_name.data} must have exactly one block")
    block = body.blocks[0]
    ret = block.last_op
    if not isinstance(ret, func.ReturnOp):
        raise SmeltError(f"@{graph_func.sym_name.data} must end with func.return")
    ctx = LoweringContext(graph_func, taken_names)
    # A kernel writes a returned value straight into its output argument (first
    # occurrence only); other outputs are copied at the end.
    for value, out in zip(ret.arguments, ctx.output_args):
        if (
            isinstance(value, OpResult)
            and not getattr(value.op, "KERNEL_FREE", False)
            and value not in ctx.direct_outputs
        ):
            ctx.direct_outputs[value] = out
    for op in block.ops:
        if op is ret:
            break
        ctx.location = op.location
        with locations.naming_errors(op):
            lowering = LOWERINGS.get(type(op))
            if lowering is None:
                raise SmeltError(
                    f"convert-graph-to-loop cannot lower {op.name}: no loop lowering "
                    "for it"
                )
            lowering(ctx, op)
    ctx.location = UnknownLoc()
    for value, out in zip(ret.arguments, ctx.output_args):
        if ctx.direct_outputs.get(value) is not out:
            src = ctx.buffer(value)
            k = ctx.kernel("copy", [src], [out])
            copy_nest(k, k.inputs[0], k.outputs[0], shape(out), lambda ivs: ivs)
    return ctx.finish(graph_func)


def _is_graph_function(op: Operation) -> bool:
    """A non-kernel function over tensors or holding graph ops."""
    if not isinstance(op, func.FuncOp) or loop.is_kernel(op):
        return False
    ftype = op.function_type
    return any(
        isinstance(t, TensorType) for t in (*ftype.inputs, *ftype.outputs)
    ) or any(isinstance(o, graph.GraphOp) for o in op.walk())


@dataclass(frozen=True)
class ConvertGraphToLoopPass(ModulePass):
    """Lowers every graph op to loop-level kernels called from a buffer-passing @main.

    Expects: functions whose body is one block of graph ops over static tensors,
    ending in `func.return`. Produces, per function `@f`, one kernel `func.func`
    per graph op (`@conv2d_0`, `@relu_1`, ...; attribute `loop.kernel`, arguments
    input memrefs then output memrefs, body of `loop.for` nests) and a new `@f`
    whose arguments are the model inputs then the model outputs as memrefs and
    whose body allocates intermediates (`loop.alloc`), binds weights
    (`loop.constant`), views reshapes (`loop.view`) and calls the kernels in order.
    Every output argument is written in full. Unsupported ops or types raise
    SmeltError naming the op and its ONNX nodes. Each kernel, its call and the
    @main ops made for a graph op keep that op's location (its ONNX nodes).

        func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          %y = graph.relu %x : (tensor<4xf32>) -> tensor<4xf32>
          func.return %y : tensor<4xf32>
        }
      becomes
        func.func @relu_0(%x: memref<4xf32>, %y: memref<4xf32>)
            attributes {loop.kernel} {
          loop.for %i = 0 to 4 step 1 parallel { ... memref.store ... }
          func.return
        }
        func.func @main(%x: memref<4xf32>, %y: memref<4xf32>) {
          func.call @relu_0(%x, %y) : (memref<4xf32>, memref<4xf32>) -> ()
          func.return
        }
    """

    name = "convert-graph-to-loop"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        taken = {
            f.sym_name.data for f in op.body.block.ops if isinstance(f, func.FuncOp)
        }
        for f in list(op.body.block.ops):
            if not _is_graph_function(f):
                continue
            assert isinstance(f, func.FuncOp)
            lowered = lower_function(f, taken)
            for new in lowered:
                op.body.block.insert_op_before(new, f)
            # the erased function lives on in reference cycles until a garbage
            # collection: drop its constants' bytes now (the loop.constants share
            # them), or a weight that a later pass packs anew is held twice
            doomed = [c for c in f.walk() if isinstance(c, graph.ConstantOp)]
            op.body.block.erase_op(f)
            for c in doomed:
                c.attributes.clear()
