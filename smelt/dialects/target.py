"""The target dialect: the machine a module is compiled for, as a module attribute.

As MLIR's `nvvm-attach-target` puts a `#nvvm.target` on a GPU module, the pass
`target-attach-cpu` puts a `#target.cpu` on the module; schedules and the llvm
backend read it there (through `smelt.targets`), so the IR says what it was built for:

    builtin.module attributes {target.spec = #target.cpu<"znver5", "+avx2,+fma,...",
                                                        49152, 1048576, 33554432, 2>}

Parameters: the LLVM CPU name, the feature string LLVM takes (every feature smelt
knows, `+` or `-`), L1d / L2 bytes per core, L3 bytes, cores (0: unknown).
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntAttr, ModuleOp, StringAttr
from xdsl.ir import Dialect, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

SPEC_ATTR = "target.spec"
"""The module attribute that holds the target."""


@irdl_attr_definition
class CpuTargetAttr(ParametrizedAttribute):
    """A CPU: LLVM name, LLVM feature string, cache bytes, cores."""

    name = "target.cpu"

    cpu: StringAttr
    features: StringAttr
    l1d: IntAttr
    l2: IntAttr
    l3: IntAttr
    cores: IntAttr

    def __init__(
        self, cpu: str, features: str, l1d: int, l2: int, l3: int, cores: int
    ):
        super().__init__(
            StringAttr(cpu),
            StringAttr(features),
            IntAttr(l1d),
            IntAttr(l2),
            IntAttr(l3),
            IntAttr(cores),
        )

    def verify(self) -> None:
        if not self.cpu.data:
            raise VerifyException("#target.cpu needs a CPU name")
        for item in filter(None, self.features.data.split(",")):
            if item[0] not in "+-" or len(item) < 2:
                raise VerifyException(
                    f"#target.cpu feature '{item}' must read +name or -name"
                )
        sizes = (self.l1d, self.l2, self.l3, self.cores)
        if any(s.data < 0 for s in sizes):
            raise VerifyException("#target.cpu sizes must not be negative")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.cpu.data)
            printer.print_string(", ")
            printer.print_string_literal(self.features.data)
            for size in (self.l1d, self.l2, self.l3, self.cores):
                printer.print_string(f", {size.data}")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list:
        parser.parse_punctuation("<")
        cpu = parser.parse_str_literal()
        parser.parse_punctuation(",")
        features = parser.parse_str_literal()
        sizes = []
        for _ in range(4):
            parser.parse_punctuation(",")
            sizes.append(IntAttr(parser.parse_integer(allow_negative=False)))
        parser.parse_punctuation(">")
        return [StringAttr(cpu), StringAttr(features), *sizes]


def cpu_target(module: ModuleOp) -> CpuTargetAttr | None:
    """The module's CPU target, or None when no target was attached."""
    attr = module.attributes.get(SPEC_ATTR)
    return attr if isinstance(attr, CpuTargetAttr) else None


def attach(module: ModuleOp, target: CpuTargetAttr) -> None:
    module.attributes[SPEC_ATTR] = target


Target = Dialect("target", [], [CpuTargetAttr])
