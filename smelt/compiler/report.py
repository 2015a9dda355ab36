"""`smelt report`: what each pass did — op count, kernel count, intermediate traffic."""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from smelt.compiler.instrument import Instrumentation
from smelt.compiler.runner import lower
from smelt.compiler.stats import Stats, stats


def report(
    module: ModuleOp, spec: str, instrument: Instrumentation | None = None
) -> list[tuple[str, Stats]]:
    """Runs pipeline `spec` on `module` (with `instrument`'s dumps), returning the
    stats after each pass."""
    rows = [("(imported)", stats(module))]

    def callback(prev, mod, _next):
        if prev is not None:
            rows.append((prev.name, stats(mod)))

    lower(module, spec, callback, instrument, source="import")
    return rows


def format_rows(rows: list[tuple[str, Stats]]) -> str:
    def mb(n: int) -> str:
        return f"{n / 1e6:.2f}"

    lines = [f"{'after pass':<26}{'ops':>6}{'kernels':>9}{'MB written':>12}{'MB read':>10}"]
    for name, s in rows:
        lines.append(
            f"{name:<26}{s.ops:>6}{s.kernels:>9}{mb(s.bytes_written):>12}{mb(s.bytes_read):>10}"
        )
    return "\n".join(lines)
