"""The text of one generated Triton function: indented lines, fresh names."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class Writer:
    """Lines of a function body at the current depth, and fresh local names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self.count = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def assign(self, expr: str, prefix: str = "v") -> str:
        name = self.fresh(prefix)
        self.line(f"{name} = {expr}")
        return name

    @contextmanager
    def indented(self, header: str) -> Iterator[None]:
        self.line(header)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
