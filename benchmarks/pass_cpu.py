"""CPU time (time.process_time, so a loaded machine inflates it far less than
wall time) of each pass of a pipeline on the whole module, in order, and
optionally a cProfile of some of them: to compare a pass before and after a
change, run it with each tree on PYTHONPATH (the script's own folder comes
first on sys.path, so run the copy inside the tree being measured).

    python benchmarks/pass_cpu.py light_resnet50
    python benchmarks/pass_cpu.py light_densenet121 --profile loop-unroll loop-promote
    PYTHONPATH=/tmp/old python /tmp/old/benchmarks/pass_cpu.py light_resnet50

The pipeline defaults to the CPU O2 preset for the host (`smelt pipelines`),
every pass run on the whole module as `smelt-opt -p` does (no deferral into
code generation), with the compile's GC setting.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from smelt.compiler import pipelines
from smelt.compiler.cli_inputs import resolve_model
from smelt.compiler.runner import fewer_collections, import_graph, parse_pipeline
from smelt.universe import make_context

OPTIONS = ("loop", "step", "jam", "factor", "tail", "hint")
"""Pass fields shown next to the name (tells the loop-unroll runs apart)."""


def _label(p) -> str:
    fields = ",".join(f"{k}={v}" for k, v in vars(p).items() if k in OPTIONS)
    return f"{p.name}{{{fields}}}" if fields else p.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a path or a light_* name")
    ap.add_argument("--pipeline", help="default: the CPU O2 preset for the host")
    ap.add_argument("--profile", nargs="*", default=[], help="passes to profile")
    ap.add_argument("--top", type=int, default=30, help="functions shown")
    a = ap.parse_args()
    spec = a.pipeline or pipelines.preset("cpu", "O2")
    t = time.process_time()
    module = import_graph(resolve_model(a.model))
    print(f"{time.process_time() - t:8.3f}  import")
    ctx, prof, total = make_context(), cProfile.Profile(), 0.0
    with fewer_collections():
        for p in parse_pipeline(spec).passes:
            label = _label(p)
            on = any(s in label for s in a.profile)
            t = time.process_time()
            if on:
                prof.enable()
            p.apply(ctx, module)
            if on:
                prof.disable()
            dt = time.process_time() - t
            total += dt
            print(f"{dt:8.3f}  {label}")
    print(f"{total:8.3f}  passes")
    if a.profile:
        out = io.StringIO()
        stats = pstats.Stats(prof, stream=out)
        stats.sort_stats("tottime").print_stats(a.top)
        stats.sort_stats("cumulative").print_stats(a.top)
        print(out.getvalue())


if __name__ == "__main__":
    main()
