"""The one registry of smelt's dialects, passes, targets and frontends."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Dialect
from xdsl.passes import ModulePass
from xdsl.universe import Universe
from xdsl.utils.frontend import Frontend
from xdsl.utils.target import Target


def _xdsl_dialect(name: str) -> Callable[[], Dialect]:
    def load() -> Dialect:
        from xdsl.dialects import get_all_dialects

        return get_all_dialects()[name]()

    return load


def _arith() -> Dialect:
    from smelt.dialects.arith_ext import ArithWithRemF

    return ArithWithRemF


def _graph() -> Dialect:
    from smelt.dialects.graph import Graph

    return Graph


def _loop() -> Dialect:
    from smelt.dialects.loop import Loop

    return Loop


def _quant() -> Dialect:
    from smelt.dialects.quant import Quant

    return Quant


def _target() -> Dialect:
    from smelt.dialects.target import Target

    return Target


def _pass(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        import importlib

        return getattr(importlib.import_module(module), cls)

    return load


@dataclass(frozen=True)
class LLVMTarget(Target):
    """Loop-level module → textual LLVM IR (what the JIT compiles)."""

    name: ClassVar[str] = "llvm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from smelt.lowering.llvm.emit import emit_llvm_ir

        output.write(emit_llvm_ir(module))


@dataclass(frozen=True)
class AsmTarget(Target):
    """Loop-level module → the assembly LLVM makes of it for the module's
    `#target.cpu` (the host without one); any CPU, whether this one runs it or not."""

    name: ClassVar[str] = "asm"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from smelt.lowering.llvm.jit import assembly

        output.write(assembly(module))


@dataclass(frozen=True)
class TritonTarget(Target):
    """Loop-level module → Triton source (one @triton.jit function per phase)."""

    name: ClassVar[str] = "triton"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from smelt.lowering.triton.source import emit_triton

        output.write(emit_triton(module))


@dataclass(frozen=True)
class OnnxFrontend(Frontend):
    """An .onnx file → graph-level module (static shapes)."""

    name: ClassVar[str] = "onnx"
    # graph inputs fixed to values (smelt-opt --constant): set by `with_constants`
    constants: ClassVar[dict] = {}

    def parse(self, ctx: Context, input: IO[bytes], input_name: str) -> ModuleOp:
        from smelt.frontend.onnx import import_model

        return import_model(input.read(), constants=self.constants)

    @staticmethod
    def with_constants(constants: dict) -> type["OnnxFrontend"]:
        """The ONNX frontend that fixes graph inputs to `constants`."""
        return type("OnnxFrontend", (OnnxFrontend,), {"constants": dict(constants)})


def _mlir_target() -> type[Target]:
    from xdsl.targets.mlir import MLIRTarget

    return MLIRTarget


def _mlir_frontend() -> type[Frontend]:
    from xdsl.frontend import get_all_frontends

    return get_all_frontends()["mlir"]()


SMELT_UNIVERSE = Universe(
    all_dialects={
        **{
            name: _xdsl_dialect(name)
            for name in ("builtin", "func", "math", "memref", "vector", "scf")
        },
        "arith": _arith,
        "graph": _graph,
        "loop": _loop,
        "quant": _quant,
        "target": _target,
    },
    all_passes={
        "graph-simplify": _pass("smelt.passes.graph_simplify", "GraphSimplifyPass"),
        "graph-fold-constants": _pass(
            "smelt.passes.graph_fold_constants", "GraphFoldConstantsPass"
        ),
        "graph-fold-batchnorm": _pass(
            "smelt.passes.graph_fold_batchnorm", "GraphFoldBatchnormPass"
        ),
        "graph-convert-layout": _pass(
            "smelt.passes.graph_convert_layout", "GraphConvertLayoutPass"
        ),
        "graph-fuse": _pass("smelt.passes.graph_fuse", "GraphFusePass"),
        "quant-fold-qdq": _pass("smelt.passes.quant_fold_qdq", "QuantFoldQdqPass"),
        "quant-pack-gemm": _pass("smelt.passes.quant_pack_gemm", "QuantPackGemmPass"),
        "quant-cast": _pass("smelt.passes.quant_cast", "QuantCastPass"),
        "buffer-plan": _pass("smelt.passes.buffer_plan", "BufferPlanPass"),
        "loop-vectorize": _pass("smelt.passes.loop_vectorize", "LoopVectorizePass"),
        "loop-parallelize": _pass(
            "smelt.passes.loop_parallelize", "LoopParallelizePass"
        ),
        "loop-flatten": _pass("smelt.passes.loop_flatten", "LoopFlattenPass"),
        "loop-tile": _pass("smelt.passes.loop_tile", "LoopTilePass"),
        "loop-interchange": _pass(
            "smelt.passes.loop_interchange", "LoopInterchangePass"
        ),
        "loop-unroll": _pass("smelt.passes.loop_unroll", "LoopUnrollPass"),
        "loop-pack": _pass("smelt.passes.loop_pack", "LoopPackPass"),
        "loop-fuse": _pass("smelt.passes.loop_fuse", "LoopFusePass"),
        "loop-pack-constant": _pass(
            "smelt.passes.loop_pack_constant", "LoopPackConstantPass"
        ),
        "loop-promote": _pass("smelt.passes.loop_promote", "LoopPromotePass"),
        "loop-forward": _pass("smelt.passes.loop_forward", "LoopForwardPass"),
        "loop-schedule": _pass("smelt.passes.loop_schedule", "LoopSchedulePass"),
        "loop-schedule-plan": _pass(
            "smelt.passes.loop_schedule_plan", "LoopSchedulePlanPass"
        ),
        "loop-schedule-apply": _pass(
            "smelt.passes.loop_schedule_apply", "LoopScheduleApplyPass"
        ),
        "loop-cse": _pass("smelt.passes.loop_cse", "LoopCsePass"),
        "loop-dedup-kernels": _pass(
            "smelt.passes.loop_dedup_kernels", "LoopDedupKernelsPass"
        ),
        "target-attach-cpu": _pass(
            "smelt.passes.target_attach_cpu", "TargetAttachCpuPass"
        ),
        "convert-graph-to-loop": _pass(
            "smelt.lowering.convert_graph_to_loop", "ConvertGraphToLoopPass"
        ),
    },
    all_targets={
        "mlir": _mlir_target,
        "llvm": lambda: LLVMTarget,
        "asm": lambda: AsmTarget,
        "triton": lambda: TritonTarget,
    },
    all_frontends={"mlir": _mlir_frontend, "onnx": lambda: OnnxFrontend},
)


def make_context() -> Context:
    """A context with every smelt dialect loaded (lazily)."""
    ctx = Context()
    for name, factory in SMELT_UNIVERSE.all_dialects.items():
        ctx.register_dialect(name, factory)
    return ctx
