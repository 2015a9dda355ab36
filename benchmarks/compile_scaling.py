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


def wide_mlp(megabytes: int, width: int = 4096) -> onnx.ModelProto:
    """x[8, width] through MatMul + Add + Relu layers of [width, width] f32 weights
    (64 MiB each at width 4096), as many as make about `megabytes` of weights."""
    rng = np.random.default_rng(0)
    layers = max(1, round(megabytes * 2**20 / (4 * width * width)))
    inits, nodes, prev = [], [], "x"
    for i in range(layers):
        w = rng.standard_normal((width, width), dtype=np.float32) / np.float32(width**0.5)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}"))
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        prev = f"r{i}"
    graph = helper.make_graph(
        nodes, "wide_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, width])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [8, width])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def saved_with_external_data(model: onnx.ModelProto, folder: str) -> str:
    """`model` written to `folder` as model.onnx with its weights in weights.bin, as
    models above protobuf's 2 GB limit must be."""
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin")  # fmt: skip
    return path


def current_rss_kb() -> float:
    """This process's resident memory now (ru_maxrss is the peak so far, which
    making a synthetic model has already raised)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024


def child(spec: str) -> None:
    """Compiles one model in this process; prints seconds, stage times, peak RSS."""
    import resource
    import time

    import smelt

    kind, _, arg = spec.partition(":")
    if kind == "chain":
        model = chain_model(int(arg))
    elif kind == "file":  # a path: smelt reads the external data itself
        model = arg
    else:
        from smelt.compiler.cli import resolve_model

        model = onnx.load(resolve_model(arg))
    nodes = len(onnx.load(model, load_external_data=False).graph.node) if isinstance(
        model, str) else len(model.graph.node)  # fmt: skip
    base = current_rss_kb()
    t0 = time.perf_counter()
    compiled = smelt.compile(model, "cpu")
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # the compiled weight blob: light models make their weights at import
    # (Constant nodes), so the initializers say little
    weights = compiled.program.weight_bytes
    print(json.dumps({
        "case": spec, "seconds": seconds, "stages": compiled.info["seconds"],
        "nodes": nodes, "weight_mb": weights / 2**20,
        "rss_before_mb": base / 1024, "peak_rss_mb": peak / 1024,
    }))  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chains", nargs="*", type=int, default=[1000, 4000, 16000])
    parser.add_argument("--models", nargs="*", default=["light_resnet50", "light_vgg19"])
    parser.add_argument("--weights", nargs="*", type=int, default=[],
                        help="MiB of weights of synthetic wide MLPs, compiled from "
                        "a file with external data (e.g. 2048 4096)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--make", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    if args.make:
        megabytes, _, folder = args.make.partition(":")
        saved_with_external_data(wide_mlp(int(megabytes)), folder)
        return 0
    specs = [f"chain:{n}" for n in args.chains] + [f"model:{m}" for m in args.models]
    if args.weights:  # written by a process of their own: a child's peak RSS
        import tempfile  # (ru_maxrss) starts from its parent's at the fork

        for n in args.weights:
            folder = tempfile.mkdtemp(prefix=f"smelt-scaling-{n}-")
            subprocess.run([sys.executable, __file__, "--make", f"{n}:{folder}"],
                           check=True)  # fmt: skip
            specs.append(f"file:{os.path.join(folder, 'model.onnx')}")
    print("| case | onnx nodes | compile s | import / passes / codegen s | s per 1k nodes "
          "| weights MB | RSS before MB | peak RSS MB | (peak - before) / weights |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in specs:
        out = subprocess.run([sys.executable, __file__, "--child", spec], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        r = json.loads(out.strip().splitlines()[-1])
        st = r["stages"]
        growth = (r["peak_rss_mb"] - r["rss_before_mb"]) / max(r["weight_mb"], 1e-9)
        case = f"wide MLP, {r['weight_mb']:.0f} MB external" if spec.startswith(
            "file:") else r["case"]  # fmt: skip
        print(f"| {case} | {r['nodes']} | {r['seconds']:.1f} | {st['import']:.1f} / "
              f"{st['passes']:.1f} / {st['codegen']:.1f} | "
              f"{r['seconds'] / r['nodes'] * 1000:.2f} | {r['weight_mb']:.0f} | "
              f"{r['rss_before_mb']:.0f} | {r['peak_rss_mb']:.0f} | {growth:.2f} |",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
