"""smelt-opt: xDSL's opt driver with smelt's dialects, passes, targets and frontends."""

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.targets.mlir import MLIRTarget
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from smelt.dialects.graph_base import FullConstantsPrinter
from smelt.errors import InternalError, SmeltError, internal_errors
from smelt.universe import SMELT_UNIVERSE

DESCRIPTION = ("smelt-opt: reads .mlir or .onnx, runs a pass pipeline (-p, "
               "`smelt pipelines` prints the presets) and prints the IR at any "
               "level (-t mlir, llvm, asm); smelt's dialects, passes and targets "
               "on xDSL's opt driver")


class SmeltOptMain(xDSLOptMain):
    """Reads .mlir or .onnx, runs `-p` pipelines, prints any level (`-t mlir|llvm`)."""

    @property
    def version_format(self) -> str:  # xDSL formats it: no braces in it
        from smelt.compiler.cli_options import version_text

        return version_text("smelt-opt")

    def register_all_dialects(self) -> None:
        for name, factory in SMELT_UNIVERSE.all_dialects.items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        for name, factory in SMELT_UNIVERSE.all_passes.items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        self.available_targets.update(SMELT_UNIVERSE.all_targets)

    def register_all_frontends(self) -> None:
        self.available_frontends.update(SMELT_UNIVERSE.all_frontends)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--debug",
            action="store_true",
            help="print the traceback of an internal error",
        )
        arg_parser.add_argument(
            "--print-constants",
            action="store_true",
            help="print every constant in full instead of eliding large ones",
        )
        from smelt.compiler.cli_options import add_compile_options

        add_compile_options(arg_parser, ("input_shape", "constant"))
        arg_parser.add_argument(
            "--cpu",
            help="attach this CPU before the pipeline (target-attach-cpu): host or "
            "an LLVM CPU name with feature edits (x86-64-v3, znver5,-avx512f)",
        )
        arg_parser.add_argument(
            "--remarks",
            action="store_true",
            help="print to stderr why passes left ops alone (missed-optimization "
            "remarks, as MLIR's -Rpass-missed), by pass and reason",
        )
        from smelt.compiler.cli_options import add_dump_arguments

        add_dump_arguments(arg_parser, smelt_opt=True)

    def setup_pipeline(self) -> None:
        name = self.args.input_file
        if name and name.startswith("light_") and not os.path.exists(name):
            from smelt.compiler.cli_inputs import resolve_model

            self.args.input_file = resolve_model(name)  # onnx's light models
        if self.args.constant or self.args.input_shape:
            from smelt.compiler.cli_inputs import (
                check_input_names,
                parse_constants,
                parse_shapes,
            )

            constants = parse_constants(self.args.constant)
            shapes = parse_shapes(self.args.input_shape)
            if (self.args.input_file or "").endswith(".onnx"):
                check_input_names(self.args.input_file, shapes, constants)
            fixed = fixed_onnx_frontend(constants, shapes)
            self.available_frontends["onnx"] = lambda: fixed
        if self.args.cpu:
            from smelt.compiler.pipelines import with_cpu

            self.args.passes = with_cpu(self.args.passes or "", self.args.cpu)
        try:
            super().setup_pipeline()
        except ValueError as e:  # xDSL's words for an unknown pass or option
            raise SmeltError(
                f"bad pipeline: {e} (smelt-opt --help lists the passes)"
            ) from None

    def apply_passes(self, prog: ModuleOp) -> None:
        """The pipeline through smelt's driver: its dumps, timing, statistics and
        crash reproducer; the IR is verified before and after each pass (not with
        --disable-verify) and diagnostics reach --verify-diagnostics."""
        from smelt.compiler.cli_options import dump_options
        from smelt.compiler.instrument import Instrumentation
        from smelt.compiler.runner import lower
        from smelt.passes import remarks

        options = dump_options(self.args)
        if self.args.print_between_passes:
            options = replace(options, print_after_all=True)

        def verify(_previous, module: ModuleOp, _following) -> None:
            if not self.args.disable_verify:  # as xDSL's driver: the input too
                module.verify()

        try:
            with remarks.collect() as missed:
                lower(
                    prog, self.args.passes, verify,
                    Instrumentation(options, source=self._reread()),
                    passthrough=(DiagnosticException,),
                )
            if self.args.remarks:
                print(remarks.format_grouped(missed), file=sys.stderr)
        except SmeltError as e:  # a pass refusing its input: a diagnostic
            if self.args.verify_diagnostics and not isinstance(e, InternalError):
                raise DiagnosticException(str(e)) from None
            raise

    def _reread(self) -> Callable[[], ModuleOp] | None:
        """The input parsed again from its file, for a crash reproducer, so that
        no copy of it (of every weight in it) is kept while the passes run; None
        for stdin or a split input (then the reproducer keeps a copy)."""
        if self.args.input_file is None or self.args.split_input_file:
            return None

        def source() -> ModuleOp:
            stream, extension = self.get_input_stream()
            with stream:
                module = self.parse_chunk(stream, extension)
            if module is None:
                raise SmeltError(f"{self.args.input_file} parsed to nothing")
            return module

        return source

    def run(self) -> None:
        if self.args.print_constants:
            self.available_targets["mlir"] = lambda: FullConstantsMLIRTarget
        super().run()


def fixed_onnx_frontend(constants: dict, shapes: dict) -> type:
    """The ONNX frontend that fixes graph inputs to `constants` and the dims of
    inputs to `shapes` (--constant, --input-shape)."""
    from smelt.universe import OnnxFrontend

    class FixedOnnxFrontend(OnnxFrontend):
        def parse(self, ctx: Context, input: IO[bytes], input_name: str) -> ModuleOp:
            from smelt.frontend.onnx import import_model

            return import_model(input.read(), shapes, constants=constants)

    return FixedOnnxFrontend


@dataclass(frozen=True)
class FullConstantsMLIRTarget(MLIRTarget):
    """xDSL's mlir target printing every constant in full (--print-constants)."""

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        printer = FullConstantsPrinter(
            stream=output,
            print_generic_format=self.print_generic_format,
            print_properties_as_attributes=self.print_properties_as_attributes,
            print_debuginfo=self.print_debuginfo,
        )
        printer.print_op(module)
        printer.print_metadata(ctx.loaded_dialects)
        print("\n", file=output)


def main(argv: Sequence[str] | None = None) -> int:
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        try:
            SmeltOptMain(DESCRIPTION, args=argv).run()
        except (SmeltError, DiagnosticException, ParseError):
            raise
        except OSError as e:
            if e.filename is None or str(e.filename) not in (argv or sys.argv[1:]):
                with internal_errors("smelt-opt"):
                    raise e
            raise SmeltError(f"cannot read {e.filename}: {e.strerror}") from None
        except Exception as e:  # noqa: BLE001 (a bug: one line, --debug for more)
            with internal_errors("smelt-opt"):
                raise e
    except (DiagnosticException, ParseError) as e:
        print(f"smelt-opt: error: {e}", file=sys.stderr)
        return 1
    except SmeltError as e:
        if debug and isinstance(e, InternalError):
            print(e.details, file=sys.stderr, end="")
        from smelt.compiler.cli_options import one_line

        print(f"smelt-opt: error: {one_line(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
