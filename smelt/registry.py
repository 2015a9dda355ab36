"""Per-module tables of functions keyed by op (ONNX op type or graph op class), and
their merge into one registry that lists its modules visibly."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class Table(dict):
    """One module's entries, added with the `register` decorator."""

    def register(self, *keys: Hashable) -> Callable[[Any], Any]:
        def add(fn: Any) -> Any:
            for key in keys:
                self[key] = fn
            return fn

        return add


def merge(*tables: Table) -> dict:
    """One dict of every table's entries; a key in two tables is a programming
    error (which handler would win would depend on import order)."""
    merged: dict = {}
    for table in tables:
        twice = merged.keys() & table.keys()
        if twice:
            raise RuntimeError(f"registered twice: {sorted(map(str, twice))}")
        merged.update(table)
    return merged
