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
  each shape to them, or `check_ranges` proves them for a range of each dim
  (then recorded as `smelt.dim_ranges`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
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
from smelt.dialects.symbolic import DIM_MAX, Dim, sym
from smelt.dialects.symbolic_bounds import collect_assumptions, interval
from smelt.dialects.symbolic_text import holds, parse
from smelt.errors import SmeltError

if TYPE_CHECKING:
    from smelt.frontend.onnx import _Importer as Importer

DIMS_ATTR = "smelt.dims"
ASSUMPTIONS_ATTR = "smelt.dim_assumptions"
RANGES_ATTR = "smelt.dim_ranges"


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


def check_ranges(module: ModuleOp, ranges: Mapping[str, tuple[int, int]]) -> None:
    """Holds the symbolic dims of `module` to `ranges` (name: (lo, hi), both
    included): refuses a range that lets a shape break what the import assumed
    (`smelt.dim_assumptions`), naming the fact and a shape where it fails; the
    ranges are recorded in `smelt.dim_ranges = {batch = array<i64: 1, 64>}`.
    Unnamed symbols keep [1, 2**31 - 1]."""
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    known = dims_of(main)
    for name, (lo, hi) in ranges.items():
        if name not in known:
            raise SmeltError(
                f"dims names '{name}', which is not a symbolic dim of the model "
                f"(its symbolic dims: {', '.join(known) or 'none'})"
            )
        if not 0 <= lo <= hi:
            raise SmeltError(f"dim '{name}': the range {lo} to {hi} is empty or < 0")
    assumed = main.attributes.get(ASSUMPTIONS_ATTR, ArrayAttr([]))
    broken = [a.data for a in assumed if not _always(a.data, ranges)]  # type: ignore
    if broken:
        shown = ", ".join(f"{k} in [{lo}, {hi}]" for k, (lo, hi) in ranges.items())
        lines = [f"  - {fact}{_example(fact, ranges)}" for fact in broken]
        raise SmeltError(
            f"the dim ranges {shown} allow shapes that the model cannot take "
            "(narrow the ranges, or fix the dims with input_shapes=):\n"
            + "\n".join(lines)
        )
    main.attributes[RANGES_ATTR] = DictionaryAttr(
        {k: DenseArrayBase.from_list(i64, list(r)) for k, r in ranges.items()}
    )


def _always(fact: str, ranges: Mapping[str, tuple[int, int]]) -> bool:
    """Whether `fact` holds for every shape in `ranges` (bounds, so a fact that
    always holds may still be refused where the bounds are loose)."""
    if " in {" in fact:
        name, values = fact.split(" in {")
        lo, hi = interval(parse(name), ranges)
        allowed = {int(v) for v in values.rstrip("}").split(",")}
        return all(v in allowed for v in range(lo, min(hi, lo + 2) + 1))
    expr, op, _ = fact.rsplit(" ", 2)
    lo, hi = interval(parse(expr), ranges)
    return {">": lo > 0, ">=": lo >= 0, "<": hi < 0, "<=": hi <= 0,
            "!=": lo > 0 or hi < 0, "==": lo == hi == 0}[op]  # fmt: skip


def _example(fact: str, ranges: Mapping[str, tuple[int, int]]) -> str:
    """`(fails at H=2)`: a corner of `ranges` where `fact` fails, if one does."""
    names = sorted(parse(fact.split(" in {")[0].rsplit(" ", 2)[0]).symbols())
    unbounded = (1, DIM_MAX)
    for corner in itertools.product(*(ranges.get(n, unbounded) for n in names)):
        bindings = dict(zip(names, corner, strict=True))
        if not holds(fact, bindings):
            where = ", ".join(f"{k}={v}" for k, v in bindings.items())
            return f" (fails at {where})"
    return ""


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
