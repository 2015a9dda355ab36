"""Source locations: the ONNX nodes an op, a fused kernel or a loop kernel came from.

xDSL 0.75 implements MLIR's locations, so smelt uses them rather than an attribute
of its own: every `Operation` has a `location` (`loc(unknown)` by default), the
parser reads a trailing `loc(...)` on generic and custom ops, and the printer writes
it when asked (`smelt-opt --print-debuginfo`, as mlir-opt's `--mlir-print-debuginfo`),
so a printed module parses back with its locations. Locations are not attributes:
they change no op's meaning, CSE and kernel deduplication ignore them (xDSL's
structural equality does), and the default printing stays as it was.

The importer gives each op of an ONNX node `loc("name")` (a `NameLoc`; a node
without a name is `"OpType#index"`, ops of a function body `"Caller/Inner"`); an op
made of several nodes (a `graph.fused` kernel, a conv with its batchnorm folded in)
gets `loc(fused["a", "b"])`, a `FusedLoc` of their names in order. Ops a rewrite
creates start unknown: a pass that replaces ops passes the location on (`inherit`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from xdsl.dialects.builtin import (
    CallSiteLoc,
    FusedLoc,
    LocationAttr,
    NameLoc,
    NoneAttr,
    StringAttr,
    UnknownLoc,
)
from xdsl.ir import Attribute, Operation

from smelt.errors import SmeltError

Source = Operation | Attribute

MAX_NAMED = 4  # nodes a message names before "and N more"


def node(name: str) -> NameLoc:
    """The location of the ops of ONNX node `name`."""
    return NameLoc(StringAttr(name), NoneAttr())


def of_names(names: Iterable[str]) -> LocationAttr:
    """One location for these node names: unknown, one name, or fused."""
    unique = list(dict.fromkeys(names))
    if not unique:
        return UnknownLoc()
    if len(unique) == 1:
        return node(unique[0])
    return FusedLoc([node(n) for n in unique], NoneAttr())


def names(source: Source | None) -> list[str]:
    """The ONNX node names of an op or a location, in order, each once."""
    if isinstance(source, Operation):
        source = source.location
    found: list[str] = []
    stack = [source]
    while stack:
        loc = stack.pop()
        if isinstance(loc, NameLoc):
            found.append(loc.desc.data)
        elif isinstance(loc, FusedLoc):
            stack.extend(reversed(loc.locations.data))
        elif isinstance(loc, CallSiteLoc):
            stack.append(loc.callee)
    return list(dict.fromkeys(found))


def merge(*sources: Source | None) -> LocationAttr:
    """The location of an op made of `sources` (ops or locations): their names."""
    return of_names(n for s in sources for n in names(s))


def inherit(new: Operation | Iterable[Operation], *old: Source | None) -> None:
    """Gives the ops in `new` that have no location yet the names of `old`."""
    loc = merge(*old)
    for op in [new] if isinstance(new, Operation) else new:
        if not names(op):
            op.location = loc


def describe(source: Source | None) -> str:
    """How a message names the nodes of `source`: "ONNX node 'a'", "ONNX nodes
    'a', 'b' and 3 more", or "" when it has none."""
    found = names(source)
    if not found:
        return ""
    shown = ", ".join(f"'{n}'" for n in found[:MAX_NAMED])
    more = len(found) - MAX_NAMED
    tail = f" and {more} more" if more > 0 else ""
    return f"ONNX node{'s' if len(found) > 1 else ''} {shown}{tail}"


def prefixed(message: str, source: Source | None) -> str:
    """`message` after the names of `source`'s nodes (unchanged without any, or
    when it names them already)."""
    where = describe(source)
    if not where or message.startswith(where):
        return message
    return f"{where}: {message}"


@contextmanager
def naming_errors(source: Source | None) -> Iterator[None]:
    """Work on `source` (a pass rewriting one op, an emitter writing one kernel):
    a SmeltError raised inside gets the ONNX nodes in front of its message; any
    other exception (a bug) gets them as a note, which the InternalError that
    reports it shows."""
    try:
        yield
    except SmeltError as e:
        if e.args and isinstance(e.args[0], str):
            e.args = (prefixed(e.args[0], source), *e.args[1:])
        raise
    except Exception as e:
        where = describe(source)
        if where:
            e.add_note(f"on {where}")
        raise
