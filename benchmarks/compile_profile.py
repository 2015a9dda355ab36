"""Where a cold CPU compile spends its time: one fresh process per model that
times its imports, compiles once as `smelt.compile` does by default (no cache,
the kernel-local passes deferred into code generation) with the target stage
split into its parts, then compiles twice more in the same (now warm) process:
once with the pass timer (`--time-passes`: every pass on the whole module, in
order) and once under cProfile (shares by package and the hottest functions).
A fresh-process onnxruntime session on the same file is the reference.

    python benchmarks/compile_profile.py light_resnet50 light_densenet121 > out.md
    python benchmarks/compile_profile.py --reuse-ab light_resnet50 light_squeezenet
    python benchmarks/compile_profile.py --share light_resnet50 --orders 8

Times on a loaded machine are relative; the kernel counts are exact.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time


def _timed(owner: object, attr: str, totals: dict, key: str) -> None:
    """Wraps owner.attr so that its wall time adds up in totals[key]."""
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - t0

    setattr(owner, attr, wrapper)


def _target_parts(totals: dict, events: dict) -> None:
    """Splits the target stage: the deferred kernel passes, Python's LLVM IR
    emission, printing the parts, the memory plan, LLVM (on worker threads),
    the wait for LLVM after the last part, MCJIT's link."""
    from smelt.compiler import deferred
    from smelt.lowering.llvm import emit, emit_kernel, jit, split

    _timed(deferred.Deferred, "kernel", totals, "kernel passes (deferred)")
    _timed(deferred.Deferred, "entry", totals, "entry passes (buffer-plan)")
    _timed(emit_kernel.KernelEmitter, "emit", totals, "LLVM IR emission (Python)")
    _timed(emit, "plan_memory", totals, "memory plan")
    _timed(split.PartStream, "_flush", totals, "printing the parts")
    _timed(jit, "load_objects", totals, "MCJIT link")
    llvm_part = jit._object

    def part(*args, **kwargs):
        t0, cpu = time.perf_counter(), time.thread_time()
        try:
            return llvm_part(*args, **kwargs)
        finally:  # wall and this thread's CPU: a loaded host inflates the wall
            events["parts"].append((time.perf_counter() - t0, time.thread_time() - cpu))

    jit._object = part
    finish = split.PartStream.finish

    def finished(self, module):
        finish(self, module)
        events["emitted"] = time.perf_counter()

    split.PartStream.finish = finished
    link = jit.load_objects

    def linked(*args, **kwargs):
        events["llvm_done"] = time.perf_counter()
        return link(*args, **kwargs)

    jit.load_objects = linked


AREAS = (
    ("smelt/passes/", "smelt passes"),
    ("smelt/lowering/llvm/", "smelt llvm emitter"),
    ("smelt/lowering/", "smelt convert-graph-to-loop"),
    ("smelt/frontend/", "smelt onnx import"),
    ("smelt/", "smelt (other)"),
    ("xdsl/", "xdsl (IR objects, walks, clones)"),
    ("llvmlite/", "llvmlite (Python side)"),
    ("numpy/", "numpy"),
    ("onnx/", "onnx"),
    ("importlib", "imports"),
)


def _area(filename: str, function: str) -> str:
    if function.startswith("<built-in method _imp."):
        return "imports"
    for marker, area in AREAS:
        if marker in filename:
            return area
    return "builtins / other" if filename == "~" else "other Python"


def _profile_rows(profile: cProfile.Profile, top: int) -> tuple[list, list, float]:
    stats = pstats.Stats(profile)
    areas: dict[str, float] = collections.defaultdict(float)
    functions = []
    rows = stats.stats.items()  # type: ignore[attr-defined]
    for (filename, line, name), row in rows:
        tottime, cumtime = row[2], row[3]
        areas[_area(filename, name)] += tottime
        short = filename.split("site-packages/")[-1].split("/work/main/")[-1]
        functions.append((tottime, cumtime, f"{short}:{line}({name})"))
    functions.sort(reverse=True)
    total = sum(areas.values())
    return sorted(areas.items(), key=lambda kv: -kv[1]), functions[:top], total


HEAVY = ("torch", "triton", "matplotlib", "onnxruntime")
"""What a CPU compile should never import."""


def plain(name: str) -> None:
    """`import smelt; smelt.compile(path)` and nothing else (the fresh-process
    compile that the onnxruntime session is compared with)."""
    import smelt
    from smelt.compiler.cli_inputs import resolve_model

    smelt.compile(resolve_model(name), cache=False)


def child(name: str, top: int) -> None:
    """One model in this (fresh) process; prints a JSON record."""
    t0 = time.perf_counter()
    import smelt  # noqa: F401  (what `import smelt` costs, onnx and xdsl with it)
    from smelt.compiler import driver  # noqa: F401

    imports = time.perf_counter() - t0
    from smelt.compiler.cli_inputs import resolve_model
    from smelt.compiler.instrument import DumpOptions

    path = resolve_model(name)
    totals: dict[str, float] = collections.defaultdict(float)
    events: dict = {"parts": []}
    _target_parts(totals, events)
    t0, cpu = time.perf_counter(), time.process_time()
    compiled = smelt.compile(path, cache=False)
    cold, cold_cpu = time.perf_counter() - t0, time.process_time() - cpu
    llvm_wait = events.get("llvm_done", 0.0) - events.get("emitted", 0.0)
    target_parts, llvm_parts = dict(totals), list(events["parts"])  # this compile's
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    with tempfile.TemporaryDirectory() as folder:
        timing = os.path.join(folder, "passes.json")
        t0 = time.perf_counter()
        smelt.compile(path, cache=False, dump=DumpOptions(time_json=timing))
        timed_wall = time.perf_counter() - t0
        with open(timing) as f:
            passes = json.load(f)
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.runcall(smelt.compile, path, cache=False)
    profiled_wall = time.perf_counter() - t0
    areas, functions, profiled_total = _profile_rows(profile, top)
    print(json.dumps({
        "model": name, "imports": imports, "cold": cold, "cold_cpu": cold_cpu,
        "stages": compiled.info["seconds"], "stats": compiled.info["stats"],
        "target_parts": target_parts, "llvm_parts": llvm_parts,
        "llvm_wait": llvm_wait, "heavy_imports": heavy,
        "timed_wall": timed_wall, "passes": passes,
        "profiled_wall": profiled_wall, "profiled_total": profiled_total,
        "areas": areas, "functions": functions,
    }))  # fmt: skip


REUSE = "loop-dedup-kernels"


def reuse_child(name: str, reuse: bool) -> None:
    """One compile with the preset, or the preset without loop-dedup-kernels,
    timed as `--time-passes` times it, then one plain compile; prints JSON."""
    import smelt
    from smelt.compiler.cli_inputs import resolve_model
    from smelt.compiler.instrument import DumpOptions
    from smelt.compiler.options import CompileOptions

    path, spec = resolve_model(name), CompileOptions().resolved_pipeline()
    if not reuse:
        spec = spec.replace(f",{REUSE},", ",")
    with tempfile.TemporaryDirectory() as folder:
        timing = os.path.join(folder, "passes.json")
        compiled = smelt.compile(path, pipeline=spec, cache=False,
                                 dump=DumpOptions(time_json=timing))  # fmt: skip
        with open(timing) as f:
            passes = json.load(f)
    t0 = time.perf_counter()
    smelt.compile(path, pipeline=spec, cache=False)
    print(json.dumps({
        "kernels": compiled.info["stats"]["distinct_kernels"],
        "calls": compiled.info["stats"]["kernels"],
        "passes": passes["total_seconds"], "target": passes["stages"]["target"],
        "plain": time.perf_counter() - t0,
    }))  # fmt: skip


def reuse_table(names: list[str]) -> str:
    """Kernels compiled and times with and without loop-dedup-kernels."""
    lines = [
        f"## Kernel reuse ({REUSE}) on and off", "",
        "Fresh process each; `--time-passes` totals (every pass on the whole "
        "module), then a second, plain compile in the same process.", "",
        "| model | calls | kernels compiled, off → on | pass total s, off → on "
        "| target s (--time-passes), off → on | plain compile s, off → on |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        off, on = (
            json.loads(_fresh([__file__, "--reuse", f"{flag}:{name}"])[1]
                       .strip().splitlines()[-1])
            for flag in ("off", "on")
        )  # fmt: skip
        lines.append(
            f"| {name} | {on['calls']} | {off['kernels']} → {on['kernels']} | "
            f"{off['passes']:.2f} → {on['passes']:.2f} | {off['target']:.2f} → "
            f"{on['target']:.2f} | {off['plain']:.2f} → {on['plain']:.2f} |"
        )
    return "\n".join(lines) + "\n"


SHARE_PASSES = (
    "graph-fold-batchnorm,graph-convert-layout{layout=nhwc},graph-simplify,graph-fuse"
)


def share_table(name: str, orders: int, passes: str = SHARE_PASSES) -> str:
    """How many of the kernels of `smelt explore NAME --passes P --orders N`'s
    candidates are the same kernel (its IR after loop-dedup-kernels, SSA and
    kernel names aside): what a kernel cache across compiles could reuse."""
    import io
    import re

    from xdsl.printer import Printer

    from smelt.compiler.cli_inputs import resolve_model
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.explore_space import candidates
    from smelt.compiler.pipelines import preset
    from smelt.dialects.loop import is_kernel

    path, seen, rows = resolve_model(name), set(), []
    for c in candidates(preset("cpu", level="O3"), passes, orders, seed=0):
        head = c.pipeline[: c.pipeline.index(f",{REUSE}") + len(REUSE) + 1]
        module, texts = lower(import_graph(path), head), set()
        for kernel in (op for op in module.ops if is_kernel(op)):
            text = io.StringIO()
            Printer(stream=text).print_op(kernel)
            body = text.getvalue().replace(f"@{kernel.sym_name.data}", "@k", 1)
            texts.add(re.sub(r"%[A-Za-z_][\w.$-]*", "%v", body))
        new = len(texts - seen)
        seen |= texts
        rows.append(f"| {c.order} | {len(texts)} | {new} |")
    total = sum(int(r.split("|")[2]) for r in rows)
    return "\n".join([
        f"## Kernels shared by `smelt explore {name} --passes {passes} "
        f"--orders {orders}`", "",
        "| candidate (order) | distinct kernels | not in an earlier candidate |",
        "|---|---|---|", *rows,
        f"| all | {total} | {len(seen)} |", "",
    ])  # fmt: skip


def _fresh(argv: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    return time.perf_counter() - t0, out


def _onnxruntime_session(name: str) -> float:
    from smelt.compiler.cli_inputs import resolve_model

    code = ("import onnxruntime as ort, sys; "
            "ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])")
    return _fresh(["-c", code, resolve_model(name)])[0]


def report(name: str, top: int) -> str:
    _, out = _fresh([__file__, "--child", name, "--top", str(top)])
    r = json.loads(out.strip().splitlines()[-1])
    process = _fresh([__file__, "--plain", name])[0]
    ort = _onnxruntime_session(name)
    interpreter = _fresh(["-c", "pass"])[0]
    st, stats = r["stages"], r["stats"]
    lines = [
        f"## {name}", "",
        f"A fresh process that imports smelt and compiles: {process:.2f} s; an "
        f"onnxruntime session in a fresh process {ort:.2f} s: ratio "
        f"{process / ort:.1f}x (a bare interpreter: {interpreter:.2f} s). In the "
        f"profiled process: `import smelt` {r['imports']:.2f} s, the cold compile "
        f"{r['cold']:.2f} s, using {r['cold_cpu']:.2f} s of CPU (all threads; "
        "on a quiet host the wall time is at most about that).",
        "",
        f"Kernels: {stats['kernels']} calls in @main, "
        f"{stats.get('distinct_kernels', '?')} distinct kernels scheduled, "
        "vectorized and compiled (loop-dedup-kernels).",
        "",
        "Heavy imports on this CPU path (torch, triton, matplotlib, onnxruntime): "
        f"{', '.join(r['heavy_imports']) or 'none'}.",
        "",
        "### Cold compile by stage (kernel passes deferred into the target stage)",
        "", "| stage | s |", "|---|---|",
        *(f"| {k} | {st[k]:.2f} |" for k in ("import", "graph", "loop", "target",
                                             "runtime")),
        "", "Target stage split (main thread, except LLVM: worker threads):", "",
        "| part | s |", "|---|---|",
        *(f"| {k} | {v:.2f} |" for k, v in sorted(r["target_parts"].items(),
                                                 key=lambda kv: -kv[1])),
        f"| LLVM parse, optimize, codegen: {len(r['llvm_parts'])} parts, sum of their "
        f"wall times | {sum(w for w, _ in r['llvm_parts']):.2f} |",
        f"| the same, CPU time of the LLVM threads | "
        f"{sum(c for _, c in r['llvm_parts']):.2f} |",
        f"| waiting for LLVM after the last part was emitted | {r['llvm_wait']:.2f} |",
        "",
        f"### Passes, whole module in order (`--time-passes`; warm process, "
        f"compile {r['timed_wall']:.2f} s)", "",
        "| pass | s | share |", "|---|---|---|",
    ]
    total = r["passes"]["total_seconds"] or 1e-12
    passes = sorted(r["passes"]["passes"], key=lambda p: -p["seconds"])
    lines += [f"| {p['spec'][:60]} | {p['seconds']:.3f} | {p['seconds'] / total:.1%} |"
              for p in passes if p["seconds"] >= 0.01 * total]
    lines += [f"| total of {len(passes)} passes | {total:.2f} | |"]
    lines += [f"| ({k}) | {v:.2f} | |" for k, v in r["passes"]["stages"].items()]
    lines += [
        "", f"### cProfile (warm process; the profiler slows Python ~2x: "
        f"{r['profiled_wall']:.2f} s; main thread only, LLVM's threads not seen)", "",
        "| area (self time) | s | share |", "|---|---|---|",
        *(f"| {a} | {s:.2f} | {s / r['profiled_total']:.1%} |" for a, s in r["areas"]),
        "", "| function | self s | cumulative s |", "|---|---|---|",
        *(f"| `{f}` | {t:.3f} | {c:.3f} |" for t, c, f in r["functions"]),
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("models", nargs="*", default=[])
    parser.add_argument("--top", type=int, default=15, help="hottest functions shown")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--reuse-ab", nargs="*", default=[],
                        help="models to compile with and without kernel reuse")
    parser.add_argument("--share", metavar="MODEL",
                        help="kernels shared by explore's candidates on MODEL")
    parser.add_argument("--orders", type=int, default=8, help="with --share")
    parser.add_argument("--plain", help=argparse.SUPPRESS)
    parser.add_argument("--reuse", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reuse:
        flag, _, name = args.reuse.partition(":")
        reuse_child(name, flag == "on")
        return 0
    if args.plain:
        plain(args.plain)
        return 0
    if args.child:
        child(args.child, args.top)
        return 0
    sys.path.insert(0, os.path.dirname(__file__))
    from hostinfo import cpu_model

    load = os.getloadavg()
    print(f"Host: {cpu_model()}, {os.cpu_count()} cores; load average "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the start.\n")
    for name in args.models:
        print(report(name, args.top), flush=True)
    if args.reuse_ab:
        print(reuse_table(args.reuse_ab), flush=True)
    if args.share:
        print(share_table(args.share, args.orders), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
