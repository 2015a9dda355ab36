"""Importing an ONNX model with its symbolic dims kept (`import_model(...,
symbolic=True)`): each input dim that the model does not fix and `input_shapes`
does not give becomes a `symbolic.Dim` named after its ONNX `dim_param` (one symbol
per name, so a model's two `batch` inputs share it; an unnamed dim gets a name of
its own), and the handlers' shape arithmetic carries the expressions through.

The `@main` function records what the loop level will need:
- `smelt.dims = {batch = array<i64: 0, 0>, ...}`: each symbol, with the argument
  and axis to read it from at run time (the first that carries it);
- `smelt.dim_assumptions = ["H - 3 >= 0", ...]`: what the import assumed of the
  symbols where a shape check could not be decided over their whole range (a kernel
  fits its padded input, a broadcast dim is 1 or n): a run-time check must hold
  each shape to them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    i64,
)

from smelt.dialects import graph as g
from smelt.dialects.symbolic import Dim, collect_assumptions, sym

if TYPE_CHECKING:
    from smelt.frontend.onnx import _Importer as Importer

DIMS_ATTR = "smelt.dims"
ASSUMPTIONS_ATTR = "smelt.dim_assumptions"


class Symbols:
    """The symbols of a model's inputs and where each is first read."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = set(taken)  # every dim_param of the inputs
        self.sources: dict[str, tuple[str, int]] = {}  # name: (input, axis)

    def dim(self, param: str, input_name: str, axis: int) -> Dim:
        """The symbol of dim `axis` of input `input_name`, whose ONNX dim_param is
        `param` ("" when the dim has no name)."""
        name = param or self._fresh(input_name, axis)
        self.sources.setdefault(name, (input_name, axis))
        return sym(name)

    def _fresh(self, input_name: str, axis: int) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", f"{input_name}_dim{axis}")
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name


def run(importer: Importer) -> ModuleOp:
    """The module of `importer`'s model, its unfixed input dims symbolic."""
    taken = {
        d.dim_param
        for i in importer.graph.input
        if i.type.HasField("tensor_type")
        for d in i.type.tensor_type.shape.dim
        if d.dim_param
    }
    importer.symbols = Symbols(taken)
    with collect_assumptions() as assumed:
        module = importer.run()
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    names = importer.input_names
    sources = {
        name: DenseArrayBase.from_list(i64, [names.index(arg), axis])
        for name, (arg, axis) in importer.symbols.sources.items()
    }
    if sources:
        main.attributes[DIMS_ATTR] = DictionaryAttr(sources)
    if assumed:
        main.attributes[ASSUMPTIONS_ATTR] = ArrayAttr([StringAttr(a) for a in assumed])
    return module


def dims_of(main: func.FuncOp) -> dict[str, tuple[int, int]]:
    """`smelt.dims` of a function: each symbol's (argument, axis)."""
    attr = main.attributes.get(DIMS_ATTR)
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {k: tuple(v.get_values()) for k, v in attr.data.items()}  # type: ignore


def symbolic_shapes(module: ModuleOp) -> dict[str, tuple]:
    """Every named value's shape in the `@main` of `module`: the arguments and
    results by their ONNX names (for tests and reports)."""
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    out = {}
    for key, values in (
        ("smelt.input_names", main.body.block.args),
        ("smelt.output_names", main.body.block.last_op.operands),
    ):
        for name, v in zip(main.attributes[key], values):  # type: ignore[arg-type]
            out[name.data] = g.shape_of(v)
    return out
