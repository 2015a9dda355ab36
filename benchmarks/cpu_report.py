"""The report of benchmarks/cpu.py: a header naming the command, commit, host, ISA,
both peers' versions and settings (as read back), the GEMM / chain table against
numpy, the model table (smelt / onnxruntime, OpenVINO / onnxruntime, smelt /
OpenVINO) and per-CPU, per-thread-count geometric means."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import peers
from peers import ORT, OV, RATIOS, TIMING

LABEL = {"smelt": "smelt", ORT: "onnxruntime", OV: "OpenVINO"}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)), check=False,
        )  # fmt: skip
    except OSError:
        return "?"
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
        text=True, cwd=os.path.dirname(os.path.abspath(__file__)), check=False,
    ).stdout.strip()  # fmt: skip
    return (done.stdout.strip() or "?") + (" (with uncommitted changes)" if dirty else "")


def header(args, model_rows) -> list[str]:
    from hostinfo import header_lines

    from smelt.targets.cpu_spec import CpuSpec

    command = " ".join(["python", "benchmarks/cpu.py", *sys.argv[1:]])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"`{command}` at {commit()}, {when}"]
    lines += header_lines()
    lines += [f"compiled for --cpus {c}: {CpuSpec.parse(c)}"
              for c in args.cpus if c != "host"]  # fmt: skip
    lines.append(f"onnxruntime settings: {peers.ort_settings()}")
    if args.openvino:
        seen = dict.fromkeys(r.settings.get(OV, "") for r in model_rows) or {"": 0}
        read_back = " | ".join(s or "no model run" for s in seen)
        lines.append(f"openvino settings (CPU plugin on '{peers.ov_device()}', read "
                     f"back from the compiled models): {read_back}")  # fmt: skip
    else:
        lines.append(f"openvino: {args.no_openvino_reason}: the models run against "
                     "onnxruntime alone")  # fmt: skip
    lines.append(f"level {args.level}, {args.repeat} timed runs per runtime and case, "
                 f"interleaved blocks of {TIMING['block']} (order rotating each "
                 f"round, {TIMING['pause']:.2f} s pause and one warm-up run before "
                 "each block); ratios: median over rounds of the block medians' "
                 "ratio, below 1 the first-named is faster; error = max|a - b| / "
                 "max|b|")  # fmt: skip
    if args.repeat < 20:
        lines.append(f"SMOKE RUN ({args.repeat} < 20 runs): the times mean nothing, "
                     "the errors are the point")  # fmt: skip
    return lines


def numpy_table(rows) -> list[str]:
    head = ("| case | cpu | thr | smelt ms | peer | peer ms | ratio | paired | "
            "compile s | error | note |")  # fmt: skip
    out = ["", head, "|---" * 11 + "|"]
    out += [f"| {r.case} | {r.cpu} | {r.threads} | {r.smelt_ms:.2f} | {r.peer} | "
            f"{r.peer_ms:.2f} | {r.smelt_ms / r.peer_ms:.2f} | {r.paired:.2f} | "
            f"{r.compile_s:.1f} | {r.error:.1e} | {r.note} |" for r in rows]  # fmt: skip
    return out


def model_table(model_rows, names, ratios, tolerance) -> list[str]:
    pair = [f"{LABEL[a]} / {LABEL[b]}" for a, b in ratios]
    errs = [f"err {LABEL[a]}-{LABEL[b]}" for a, b in ratios]
    head = (f"| case | cpu | thr | {' | '.join(LABEL[n] + ' ms' for n in names)} | "
            f"{' | '.join(pair)} | compile s | {' | '.join(errs)} |")  # fmt: skip
    out = ["", head, "|---" * (4 + len(names) + 2 * len(ratios)) + "|"]
    for r in model_rows:
        bad = any(e > tolerance for e in r.error.values())
        out.append(
            f"| {r.case} | {r.cpu} | {r.threads} | "
            + " | ".join(f"{r.ms[n]:.2f}" for n in names) + " | "
            + " | ".join(f"{r.paired[p]:.2f}" for p in ratios)
            + f" | {r.compile_s:.1f} | "
            + " | ".join(f"{r.error[p]:.1e}" for p in ratios)
            + (" MISMATCH |" if bad else " |")
        )  # fmt: skip
    return out


def summary(model_rows, ratios, tolerance) -> list[str]:
    out = [""]
    for cpu in dict.fromkeys(r.cpu for r in model_rows):
        for t in dict.fromkeys(r.threads for r in model_rows):
            mine = [r for r in model_rows if r.cpu == cpu and r.threads == t]
            if not mine:
                continue
            means = ", ".join(
                f"{LABEL[a]} / {LABEL[b]} {geomean([r.paired[a, b] for r in mine]):.2f}"
                for a, b in ratios
            )  # fmt: skip
            worst = max(mine, key=lambda r: r.paired["smelt", ORT])
            over = [r.case for r in mine if r.paired["smelt", ORT] > 1.1]
            out.append(f"models, cpu {cpu}, {t} thread(s), {len(mine)} models: "
                       f"geometric mean {means}; worst smelt / onnxruntime "
                       f"{worst.paired['smelt', ORT]:.2f} ({worst.case}); above 1.1 x "
                       f"onnxruntime: {', '.join(over) or 'none'}")  # fmt: skip
    worst = {p: max(r.error[p] for r in model_rows) for p in ratios}
    errors = ", ".join(f"{LABEL[a]} vs {LABEL[b]} {e:.1e}" for (a, b), e in worst.items())
    out.append(f"max error over the models (max|a - b| / max|b|): {errors} "
               f"(tolerance {tolerance:g})")  # fmt: skip
    return out


def report(rows, model_rows, args) -> list[str]:
    """The whole report, markdown, one string per line."""
    out = [f"# {line}" for line in header(args, model_rows)]
    if rows:
        out += numpy_table(rows)
    if model_rows:
        names = ["smelt", ORT] + ([OV] if args.openvino else [])
        ratios = [p for p in RATIOS if p[0] in names and p[1] in names]
        out += model_table(model_rows, names, ratios, args.tolerance)
        out += summary(model_rows, ratios, args.tolerance)
    return out
