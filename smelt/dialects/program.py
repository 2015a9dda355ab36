"""The program's facts that every level reads: its entry function @main and the
ONNX names of its inputs and outputs, declared once.

At the graph level @main's arguments are the model's inputs and its results the
outputs; at the loop level its arguments are the inputs then the outputs. Both
carry `smelt.input_names` / `smelt.output_names` (an array of strings), written
by the importer.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr

from smelt.errors import SmeltError

MAIN = "main"
INPUT_NAMES_ATTR = "smelt.input_names"
OUTPUT_NAMES_ATTR = "smelt.output_names"


def is_main(op: object) -> bool:
    return isinstance(op, func.FuncOp) and op.sym_name.data == MAIN


def main_func(module: ModuleOp) -> func.FuncOp:
    """The module's @main (a SmeltError where it has none)."""
    for op in module.ops:
        if is_main(op):
            return op  # type: ignore[return-value]
    raise SmeltError("the module has no @main function")


def io_names(main: func.FuncOp, key: str) -> list[str] | None:
    """@main's `key` (INPUT_NAMES_ATTR or OUTPUT_NAMES_ATTR) as strings; None
    where @main lacks it."""
    attr = main.attributes.get(key)
    if not isinstance(attr, ArrayAttr):
        return None
    return [a.data for a in attr.data if isinstance(a, StringAttr)]


def set_io_names(main: func.FuncOp, key: str, names: list[str]) -> None:
    main.attributes[key] = ArrayAttr([StringAttr(n) for n in names])
