"""The search space of `smelt explore`: orders and subsets of the explored passes,
times a grid of pass options (tile sizes, micro-kernel shapes, unroll factors), each
written out as a complete pipeline string.

A base pipeline (a preset or a string) falls into sections: `target-attach-cpu`,
the graph passes, `convert-graph-to-loop`, the loop passes. A section holding
explored passes is replaced by a candidate's choice of them, in its order (a
graph pass never runs after the conversion); `buffer-plan` stays the last loop
pass unless it is explored itself. A section without explored passes is the
base's, unchanged.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from xdsl.utils.arg_spec import ArgSpec, parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError

from smelt.errors import SmeltError

FIXED = ("target-attach-cpu", "convert-graph-to-loop")
"""Passes every candidate keeps where the base has them (never explored)."""

LAST = ("buffer-plan",)
"""Loop passes that end their section whenever they run (the plan reads the
final loop IR)."""

EXHAUSTIVE = 20_000
"""Spaces up to this many orders are listed in full and shuffled; larger ones
are sampled."""


@dataclass(frozen=True)
class Candidate:
    """One pipeline to try: `order` numbers the explored passes it runs (1-based,
    in the order they run), `options` the option values set on it."""

    index: int
    order: tuple[int, ...]
    options: tuple[tuple[str, str], ...]
    pipeline: str

    def label(self) -> str:
        return " ".join(map(str, self.order)) or "(none)"


def split_specs(spec: str, what: str = "pipeline") -> list[ArgSpec]:
    """`spec` as one ArgSpec per pass; a SmeltError names a bad string."""
    try:
        return list(parse_pipeline(spec)) if spec.strip() else []
    except ArgSpecParseError as e:
        raise SmeltError(f"bad {what} '{spec}': {e}") from None


def level_of(name: str) -> str:
    """Where pass `name` runs: prefix, pivot (the conversion), graph or loop."""
    if name == "target-attach-cpu":
        return "prefix"
    if name == "convert-graph-to-loop":
        return "pivot"
    return "loop" if name.startswith("loop-") or name in LAST else "graph"


def _known(name: str) -> type:
    from smelt.universe import SMELT_UNIVERSE

    if name not in SMELT_UNIVERSE.all_passes:
        known = ", ".join(SMELT_UNIVERSE.all_passes)
        raise SmeltError(f"unknown pass '{name}': choose among {known}")
    return SMELT_UNIVERSE.all_passes[name]()


def explored_passes(spec: str) -> list[ArgSpec]:
    """The `--passes` list, checked: known names, none of FIXED."""
    passes = split_specs(spec, "--passes list")
    if not passes:
        raise SmeltError("--passes names no pass: give PASS,PASS,… (at least one)")
    for p in passes:
        _known(p.name)
        if p.name in FIXED:
            raise SmeltError(
                f"{p.name} is in every candidate (from the base pipeline): "
                "leave it out of --passes"
            )
    return passes


def pass_options(name: str) -> list[tuple[str, str, str]]:
    """(option, type, default) of every option of pass `name` ("(required)"
    where it has no default)."""
    return [
        (f.name, str(f.type),
         "(required)" if f.default is dataclasses.MISSING else repr(f.default))
        for f in dataclasses.fields(_known(name))
    ]  # fmt: skip


def parse_option_grid(items: Sequence[str]) -> list[tuple[str, str, list[str]]]:
    """`--option PASS.OPTION=V1,V2,…` items as (pass, option, values), each value
    checked by parsing `PASS{OPTION=V}`."""
    grid = []
    for item in items:
        key, sep, values = item.partition("=")
        name, dot, option = key.strip().rpartition(".")
        if not sep or not dot or not name or not option or not values.strip():
            raise SmeltError(
                f"bad --option '{item}': write PASS.OPTION=V1,V2,…, e.g. "
                "loop-schedule.mr=4,6"
            )
        known = [o for o, _, _ in pass_options(name)]
        if option not in known:
            raise SmeltError(
                f"pass {name} has no option '{option}': it has {', '.join(known)}"
            )
        texts = [v.strip() for v in values.split(",") if v.strip()]
        for text in texts:
            split_specs(f"{name}{{{option}={text}}}", f"--option value for {key}")
        grid.append((name, option, texts))
    return grid


def with_option(spec: ArgSpec, option: str, text: str) -> ArgSpec:
    """`spec` with `option` set to the value written `text`."""
    value = split_specs(f"{spec.name}{{{option}={text}}}")[0].parameters[option]
    return ArgSpec(spec.name, {**spec.parameters, option: value})


@dataclass(frozen=True)
class Sections:
    prefix: list[ArgSpec]
    graph: list[ArgSpec]
    pivot: list[ArgSpec]
    loop: list[ArgSpec]


def sections(base: str) -> Sections:
    """`base` cut into its sections (passes before a conversion are graph passes,
    after it loop passes)."""
    parts = Sections([], [], [], [])
    converted = False
    for spec in split_specs(base, "base pipeline"):
        level = level_of(spec.name)
        if level == "prefix":
            parts.prefix.append(spec)
        elif level == "pivot":
            parts.pivot.append(spec)
            converted = True
        else:
            (parts.loop if converted else parts.graph).append(spec)
    return parts


def build_pipeline(
    base: Sections, explored: Sequence[ArgSpec], order: Sequence[int]
) -> list[ArgSpec]:
    """The pipeline of `order` (1-based indices into `explored`) on `base`."""
    chosen = [explored[i - 1] for i in order]
    levels = {level_of(p.name) for p in explored}
    graph = base.graph
    if "graph" in levels:
        graph = [p for p in chosen if level_of(p.name) == "graph"]
    loop = base.loop
    if "loop" in levels:
        explored_names = {p.name for p in explored}
        moving = [p for p in chosen if level_of(p.name) == "loop"]
        kept = [p for p in base.loop if p.name in LAST and p.name not in explored_names]
        loop = [p for p in moving if p.name not in LAST] + kept
        loop += [p for p in moving if p.name in LAST]
    return [*base.prefix, *graph, *base.pivot, *loop]


def _space_size(n: int, subsets: bool) -> int:
    if not subsets:
        return math.factorial(n)
    return sum(math.perm(n, k) for k in range(n + 1))


def orders(n: int, count: int, subsets: bool, seed: int) -> Iterator[tuple[int, ...]]:
    """Up to `count` distinct orders of passes 1…n: the given order first, then
    (with `subsets`) each pass left out, then a seeded sample of the rest."""
    rng = random.Random(seed)
    given = tuple(range(1, n + 1))
    firsts = [given]
    if subsets:
        firsts += [given[:i] + given[i + 1 :] for i in range(n)]
    seen: set[tuple[int, ...]] = set()
    for order in firsts:
        if len(seen) >= count:
            return
        seen.add(order)
        yield order
    if _space_size(n, subsets) <= EXHAUSTIVE:
        sizes = range(n + 1) if subsets else [n]
        rest = [o for k in sizes for o in itertools.permutations(given, k)]
        rng.shuffle(rest)
    else:
        rest = (_sample(rng, given, subsets) for _ in range(50 * count))
    for order in rest:
        if len(seen) >= count:
            return
        if order not in seen:
            seen.add(order)
            yield order


def _sample(rng: random.Random, given: tuple[int, ...], subsets: bool) -> tuple:
    k = rng.randint(0, len(given)) if subsets else len(given)
    return tuple(rng.sample(given, k))


def candidates(
    base: str,
    passes: str,
    count: int,
    *,
    subsets: bool = True,
    grid: Sequence[tuple[str, str, list[str]]] = (),
    seed: int = 0,
) -> list[Candidate]:
    """Every candidate: up to `count` orders × the option grid, deduplicated by
    pipeline string (an option of a pass that a candidate does not run changes
    nothing), numbered from 1."""
    if count < 1:
        raise SmeltError(f"--orders must be at least 1, not {count}")
    explored = explored_passes(passes)
    parts = sections(base)
    points = list(itertools.product(*[
        [(f"{name}.{option}", v) for v in values] for name, option, values in grid
    ]))  # fmt: skip
    out: list[Candidate] = []
    seen: set[str] = set()
    for order in orders(len(explored), count, subsets, seed):
        specs = build_pipeline(parts, explored, order)
        for point in points:
            applied, final = [], []
            for spec in specs:
                for key, text in point:
                    name, option = key.rsplit(".", 1)
                    if spec.name == name:
                        spec = with_option(spec, option, text)
                        applied.append((key, text))
                final.append(spec)
            pipeline = ",".join(map(str, final))
            if pipeline in seen:
                continue
            seen.add(pipeline)
            options = tuple(p for p in point if p in applied)  # in grid order
            out.append(Candidate(len(out) + 1, order, options, pipeline))
    return out
