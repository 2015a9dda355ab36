"""Missed-optimization remarks (smelt.passes.remarks): each guard of loop-vectorize,
loop-pack and loop-pack-constant that declines a case of its lit file says so,
naming the function, the op and the reason; the cases they rewrite say nothing;
and collecting remarks changes no IR."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
from xdsl.parser import Parser

from smelt.compiler.driver import lower
from smelt.compiler.instrument import module_text
from smelt.passes import remarks
from smelt.universe import make_context

LIT = os.path.join(os.path.dirname(__file__), "..", "filecheck", "passes")

VECTORIZE = "loop-vectorize"
PACK = 'loop-pack{at="n.0" operand=0}'
PACK_CONSTANT = "loop-pack-constant{operand=0}"

# (lit file, pipeline, function, "op: pass: reason") for every declining guard
DECLINES = [
    ("loop-vectorize", VECTORIZE, "non_contiguous",
     "loop.for: loop-vectorize: non-contiguous access"),
    ("loop-vectorize", VECTORIZE, "unanalyzable_index",
     "loop.for: loop-vectorize: index is not iv + invariant"),
    ("loop-vectorize", VECTORIZE, "overlapping_store",
     "loop.for: loop-vectorize: a store may overlap another access"),
    ("loop-vectorize", VECTORIZE, "inplace_shift",
     "loop.for: loop-vectorize: a store may overlap another access"),
    ("loop-vectorize", VECTORIZE, "invariant_store",
     "loop.for: loop-vectorize: store to a loop-invariant address"),
    ("loop-vectorize", VECTORIZE, "short_and_strided",
     "loop.for: loop-vectorize: fewer iterations than lanes"),
    ("loop-vectorize", VECTORIZE, "short_and_strided",
     "loop.for: loop-vectorize: step is not 1"),
    ("loop-vectorize", VECTORIZE, "not_a_reduction",
     "loop.for: loop-vectorize: iter_arg is not a known reduction"),
    ("loop-vectorize", VECTORIZE, "not_innermost",  # its copy nest: too long rows
     ("loop.for: loop-vectorize: copy not interleaved: inner loop is not 2 to "
     "MAX_GROUP iterations")),
    ("loop-vectorize", "loop-vectorize{reassoc=false}", "reductions",
     "loop.for: loop-vectorize: float reduction needs reassoc=true"),
    ("loop-pack", PACK, "stored",
     'loop.for "n.0": loop-pack: the operand is stored to inside the pack loop'),
    ("loop-pack", PACK, "loaded_index",
     "memref.load: loop-pack: index computed by memref.load"),
    ("loop-pack-constant", PACK_CONSTANT, "input",
     ("func.func: loop-pack-constant: operand 0 is not a loop.constant at every "
      "call of it")),
    ("loop-pack-constant", PACK_CONSTANT, "gathered",
     "memref.load: loop-pack-constant: index uses an iter_arg or an argument"),
]  # fmt: skip

# functions each pipeline rewrites: no remark of that pass about their loops
REWRITTEN = [
    ("loop-vectorize", VECTORIZE, "elementwise"),
    ("loop-vectorize", VECTORIZE, "reductions"),
    ("loop-vectorize", VECTORIZE, "distinct_shift"),
    ("loop-pack", PACK, "transposed"),
    ("loop-pack-constant", PACK_CONSTANT, "tile"),
    ("loop-pack-constant", PACK_CONSTANT, "shared"),
]


def _parse(name: str):
    with open(os.path.join(LIT, f"{name}.mlir")) as f:
        return Parser(make_context(), f.read()).parse_module()


def _remarks(name: str, pipeline: str) -> dict[str, list[str]]:
    """The remarks of `pipeline` on lit file `name`, by function."""
    module = _parse(name)
    with remarks.collect() as got:
        lower(module, pipeline)
    by_function: dict[str, list[str]] = defaultdict(list)
    for r in got:
        by_function[r.function].append(str(r).split(" ", 1)[1])
    return by_function


@pytest.mark.parametrize("name, pipeline, function, remark", DECLINES)
def test_a_declining_guard_says_why(name, pipeline, function, remark):
    assert remark in _remarks(name, pipeline)[function]


@pytest.mark.parametrize("name, pipeline, function", REWRITTEN)
def test_a_rewritten_case_has_no_remark(name, pipeline, function):
    assert _remarks(name, pipeline)[function] == []


def test_remarks_are_kept_only_inside_collect_and_change_no_ir():
    outside = _parse("loop-vectorize")
    lower(outside, VECTORIZE)  # no sink: each remark is dropped
    inside = _parse("loop-vectorize")
    with remarks.collect() as got:
        lower(inside, VECTORIZE)
    assert got and module_text(inside) == module_text(outside)
    with remarks.collect() as nested_outer:
        with remarks.collect() as nested_inner:
            lower(_parse("loop-pack"), PACK)
        assert nested_inner and nested_outer == []  # the innermost sink gets them
