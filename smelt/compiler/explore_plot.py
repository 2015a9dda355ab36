"""The trade-off picture of a `smelt explore` search: latency against kernel count,
arena bytes and compile time, one point per candidate, the Pareto front drawn."""

from __future__ import annotations

import sys
from collections.abc import Sequence

AXES = (
    ("kernels", "kernels", 1.0),
    ("arena_bytes", "arena", 1.0),
    ("compile_s", "compile time (s)", 1.0),
)


Point = tuple[float, float, int]  # x, latency, candidate number


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points (x, y, id) that no other point beats on both x and y (smaller is
    better), by increasing x."""
    front: list[Point] = []
    for x, y, i in sorted(points):
        if not front or y < front[-1][1]:
            front.append((x, y, i))
    return front


def _byte_unit(sizes: Sequence[int]) -> tuple[str, float]:
    """An axis label and scale for byte counts of these sizes."""
    for unit, scale in (("GB", 1e-9), ("MB", 1e-6), ("KB", 1e-3)):
        if max(sizes, default=0) * scale >= 1:
            return f"arena ({unit})", scale
    return "arena (bytes)", 1.0


def _labels(points: Sequence[Point]) -> dict[tuple[float, float], list[int]]:
    """One label per cluster of points at the same x and within 5% in latency
    (a label each would print over one another)."""
    labels: dict[tuple[float, float], list[int]] = {}
    for x, y, i in sorted(points):
        near = next((k for k in labels if k[0] == x and abs(k[1] - y) <= 0.05 * y),
                    None)  # fmt: skip
        labels.setdefault(near or (x, y), []).append(i)
    return labels


def plot_tradeoffs(records: Sequence[dict], path: str, title: str) -> bool:
    """Writes the PNG at `path`; False (and a note on stderr) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no tradeoffs.png: matplotlib is not installed "
              "(pip install 'smelt[explore]')", file=sys.stderr)
        return False
    timed = [r for r in records if r["metrics"].get("latency_ms") is not None]
    fig, axes = plt.subplots(1, len(AXES), figsize=(16, 4.8))
    for ax, (key, label, scale) in zip(axes, AXES, strict=True):
        if key == "arena_bytes":
            label, scale = _byte_unit([r["metrics"].get(key) or 0 for r in timed])
        points = [
            (r["metrics"][key] * scale, r["metrics"]["latency_ms"], r["candidate"])
            for r in timed if r["metrics"].get(key) is not None
        ]  # fmt: skip
        wrong = {r["candidate"] for r in timed if r["status"] != "ok"}
        for x, y, i in points:
            bad = i in wrong
            ax.scatter(x, y, c="tab:red" if bad else "tab:blue",
                       marker="x" if bad else "o", s=36, zorder=3)
        for (x, y), ids in _labels(points).items():
            ax.annotate(" ".join(f"#{i}" for i in ids), (x, y), fontsize=8,
                        textcoords="offset points", xytext=(4, 4))
        latencies = [p[1] for p in points]
        if latencies and max(latencies) > 20 * max(min(latencies), 1e-9):
            ax.set_yscale("log")
        front = pareto([p for p in points if p[2] not in wrong])
        if len(front) > 1:
            ax.step([p[0] for p in front], [p[1] for p in front], where="post",
                    color="tab:green", alpha=0.6, label="Pareto front", zorder=2)
            ax.legend(loc="best", fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("latency (ms, median)")
        ax.grid(True, alpha=0.3)
    failed = len(records) - len(timed)
    wrong_count = sum(r["status"] == "wrong" for r in timed)
    fig.suptitle(f"{title}: {len(timed) - wrong_count} ok, {wrong_count} wrong "
                 f"(red x), {failed} failed (not drawn)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
