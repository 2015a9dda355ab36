"""What `smelt explore` makes of its records: each candidate's kernels against the
base pipeline's (by hash), the table, the passes' remarks counted by reason, and
the files of the results folder (`candidates.jsonl`, `table.txt`,
`tradeoffs.png`)."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence

from smelt.errors import SmeltError


def compare_kernels(records: Sequence[dict]) -> None:
    """Adds to each compiled record (but the base's, candidate 0) `kernels_vs_base`:
    its kernels whose hash the base's kernels lack (`differ`, by name), how many
    it shares with the base (`same`), how many of the base's it lacks
    (`base_only`), and the shared kernels called a different number of times
    (`calls_differ`: name → [calls here, calls in the base]); and `kernels_new` =
    len(differ) to its metrics."""
    base = next((r for r in records if r["candidate"] == 0), None)
    if base is None or "kernel_hashes" not in base:
        return
    base_calls = _calls_by_hash(base)
    for r in records:
        hashes = r.get("kernel_hashes")
        if r is base or hashes is None:
            continue
        differ = sorted(name for name, h in hashes.items() if h not in base_calls)
        calls = _calls_by_hash(r)
        r["kernels_vs_base"] = {
            "differ": differ,
            "same": len(hashes) - len(differ),
            "base_only": len(base_calls.keys() - calls.keys()),
            "calls_differ": {
                name: [calls[h], base_calls[h]] for name, h in sorted(hashes.items())
                if h in base_calls and calls[h] != base_calls[h]
            },
        }  # fmt: skip
        r["metrics"]["kernels_new"] = len(differ)


def _calls_by_hash(record: dict) -> dict[str, int]:
    calls = record.get("kernel_calls", {})
    out: dict[str, int] = {}
    for name, h in record["kernel_hashes"].items():
        out[h] = out.get(h, 0) + calls.get(name, 0)
    return out


COLUMNS = (
    ("kernels", "kernels", "{:d}", 1),
    ("kernels_new", "not base's", "{:d}", 1),
    ("latency_ms", "ms", "{:.3f}", 1),
    ("arena_bytes", "arena MB", "{:.2f}", 1e-6),
    ("bytes_written", "MB written", "{:.2f}", 1e-6),
    ("compile_s", "compile s", "{:.2f}", 1),
)


def format_table(records: Sequence[dict], explored: Sequence[str]) -> str:
    """The records as a table (one row per candidate), the numbering of the
    explored passes, and the errors of the candidates that failed."""
    head = f"{'#':>3} {'status':<13}" + "".join(f"{t:>11}" for _, t, _, _ in COLUMNS)
    lines = [head + "  order / options"]
    for r in records:
        m = r["metrics"]
        cells = "".join(
            f"{fmt.format(m[key] * scale if scale != 1 else m[key]):>11}"
            if m.get(key) is not None else f"{'-':>11}"
            for key, _, fmt, scale in COLUMNS
        )  # fmt: skip
        order = " ".join(map(str, r["order"])) or "(none)"
        order = "base" if r["candidate"] == 0 else order
        opts = " ".join(f"{k.rsplit('.', 1)[1]}={v}" for k, v in r["options"].items())
        lines.append(f"{r['candidate']:>3} {r['status']:<13}{cells}  {order}  {opts}")
    lines.append("passes: " + "  ".join(f"{i}={p}" for i, p in enumerate(explored, 1)))
    lines += _summary(records)
    for r in records:
        if r["error"]:
            lines.append(f"  #{r['candidate']} {r['status']}: {r['error']}")
    return "\n".join(lines)


def _summary(records: Sequence[dict]) -> list[str]:
    timed = [r for r in records if r["metrics"].get("latency_ms") is not None]
    counts: dict[str, int] = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = [
        f"{len(records)} candidates: "
        + ", ".join(f"{n} {status}" for status, n in counts.items())
    ]
    if timed:
        kernels = sorted({r["metrics"]["kernels"] for r in timed})
        fast = min(timed, key=lambda r: r["metrics"]["latency_ms"])
        slow = max(timed, key=lambda r: r["metrics"]["latency_ms"])
        lines.append(
            f"kernel counts seen: {', '.join(map(str, kernels))}; latency "
            f"{fast['metrics']['latency_ms']:.3f} ms (#{fast['candidate']}) to "
            f"{slow['metrics']['latency_ms']:.3f} ms (#{slow['candidate']})"
        )
    return lines


def format_remarks(records: Sequence[dict]) -> str:
    """The passes' remarks (why each left an op alone) of every compiled candidate,
    counted by pass and reason, each count against the base's (candidate 0)."""
    counted = {
        r["candidate"]: Counter(f"{m['pass_name']}: {m['reason']}" for m in r["remarks"])
        for r in records if "remarks" in r
    }  # fmt: skip
    base = counted.get(0, Counter())
    lines = ["remarks (why a pass left an op alone), by pass and reason:"]
    for number, counts in counted.items():
        title = "base" if number == 0 else f"vs base {counts.total() - base.total():+d}"
        lines.append(f"  #{number}: {counts.total()} remarks ({title})")
        for text in sorted(counts.keys() | (base.keys() if number else set())):
            n, delta = counts[text], counts[text] - base[text]
            change = f"  ({delta:+d})" if number and delta else ""
            lines.append(f"    {n:6d}  {text}{change}")
    return "\n".join(lines)


def write_outputs(
    records: Sequence[dict], table: str, folder: str, title: str
) -> list[str]:
    """candidates.jsonl, table.txt and (with matplotlib) tradeoffs.png in
    `folder`; the paths written."""
    from smelt.compiler.explore_plot import plot_tradeoffs

    try:
        os.makedirs(folder, exist_ok=True)
        paths = [os.path.join(folder, n) for n in ("candidates.jsonl", "table.txt")]
        with open(paths[0], "w") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in records)
        with open(paths[1], "w") as f:
            f.write(table + "\n")
    except OSError as e:
        raise SmeltError(f"cannot write the results to '{folder}': {e}") from None
    png = os.path.join(folder, "tradeoffs.png")
    if plot_tradeoffs(records, png, title):
        paths.append(png)
    return paths
