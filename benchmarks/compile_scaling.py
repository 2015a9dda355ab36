"""Compile time and peak memory of smelt's CPU path: synthetic chains of N nodes
(compile time should grow linearly with N) and the light_* models (peak RSS
against the weight bytes). Each compile runs in a fresh process so that its peak
RSS is its own.

    python benchmarks/compile_scaling.py --chains 1000 4000 16000 --models light_vgg19
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def chain_model(nodes: int, width: int = 64) -> onnx.ModelProto:
    """x[1, width] through `nodes` ops: MatMul by a small weight, Add, Tanh in turn
    (each a separate kernel unless fused), as a deep narrow net."""
    rng = np.random.default_rng(0)
    inits, graph_nodes, prev = [], [], "x"
    for i in range(nodes):
        out = f"t{i}"
        kind = i % 3
        if kind == 0:
            w = rng.standard_normal((width, width)).astype(np.float32) / 8
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            graph_nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out]))
        elif kind == 1:
            b = rng.standard_normal(width).astype(np.float32)
            inits.append(numpy_helper.from_array(b, f"b{i}"))
            graph_nodes.append(helper.make_node("Add", [prev, f"b{i}"], [out]))
        else:
            graph_nodes.append(helper.make_node("Tanh", [prev], [out]))
        prev = out
    graph = helper.make_graph(
        graph_nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, width])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def child(spec: str) -> None:
    """Compiles one model in this process; prints seconds, stage times, peak RSS."""
    import resource
    import time

    import smelt

    kind, _, arg = spec.partition(":")
    if kind == "chain":
        model = chain_model(int(arg))
    else:
        from smelt.compiler.cli import resolve_model

        model = onnx.load(resolve_model(arg))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    compiled = smelt.compile(model, "cpu")
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # the compiled weight blob: light models make their weights at import
    # (Constant nodes), so the initializers say little
    weights = compiled.program.weight_bytes
    print(json.dumps({
        "case": spec, "seconds": seconds, "stages": compiled.info["seconds"],
        "nodes": len(model.graph.node), "weight_mb": weights / 2**20,
        "rss_before_mb": base / 1024, "peak_rss_mb": peak / 1024,
    }))  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chains", nargs="*", type=int, default=[1000, 4000, 16000])
    parser.add_argument("--models", nargs="*", default=["light_resnet50", "light_vgg19"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    specs = [f"chain:{n}" for n in args.chains] + [f"model:{m}" for m in args.models]
    print("| case | onnx nodes | compile s | import / passes / codegen s | s per 1k nodes "
          "| weights MB | RSS before MB | peak RSS MB | (peak - before) / weights |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in specs:
        out = subprocess.run([sys.executable, __file__, "--child", spec], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        r = json.loads(out.strip().splitlines()[-1])
        st = r["stages"]
        growth = (r["peak_rss_mb"] - r["rss_before_mb"]) / max(r["weight_mb"], 1e-9)
        print(f"| {r['case']} | {r['nodes']} | {r['seconds']:.1f} | {st['import']:.1f} / "
              f"{st['passes']:.1f} / {st['codegen']:.1f} | "
              f"{r['seconds'] / r['nodes'] * 1000:.2f} | {r['weight_mb']:.0f} | "
              f"{r['rss_before_mb']:.0f} | {r['peak_rss_mb']:.0f} | {growth:.2f} |",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
