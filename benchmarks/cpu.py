"""CPU benchmark: smelt against onnxruntime (ORT_ENABLE_ALL, same threads) and numpy,
in one run, median of repeated runs (alternating blocks, see `compare_ms`); prints
a table of ratios. smelt runs the preset of `--level` with `threads`
(loop-parallelize) for each thread count.

    python benchmarks/cpu.py                      # every case, 1 and 2 threads
    python benchmarks/cpu.py --cases mlp gemm --threads 1 --repeat 20

A ratio below 1 means smelt is faster than the peer: `ratio` divides the two
medians, `paired` is the median ratio of adjacent blocks (see `compare_ms`).
Absolute times on a shared machine mean little; ratios measured side by side are
the number.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))


def compare_ms(peer, smelt, repeat: int, block: int = 4) -> tuple[float, float, float]:
    """(peer ms, smelt ms, ratio): medians over `repeat` runs each (after a warm-up
    run), timed in alternating blocks of `block` runs with a pause between blocks,
    so one runtime's spinning worker threads (onnxruntime's, smelt's) have gone to
    sleep before the other one starts. The ratio is the median over block pairs of
    smelt's block median / the peer's: the two blocks of a pair run a moment apart,
    so slow drifts of this shared machine (seconds long) cancel out."""
    times: tuple[list[float], list[float]] = ([], [])
    ratios = []
    while len(times[1]) < repeat:
        medians = []
        for fn, out in zip((peer, smelt), times):
            time.sleep(PAUSE_S)
            fn()
            runs = []
            for _ in range(min(block, repeat - len(out))):
                t0 = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - t0)
            out.extend(runs)
            medians.append(statistics.median(runs))
        ratios.append(medians[1] / medians[0])
    peer_ms, smelt_ms = (statistics.median(t) * 1e3 for t in times)
    return peer_ms, smelt_ms, statistics.median(ratios)


PAUSE_S = 0.05


def gemm_model(n: int) -> onnx.ModelProto:
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm", [a, b], [c]
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def chain_model(n: int) -> onnx.ModelProto:
    """y = tanh(x * 1.5 + 0.5) * x — one fused elementwise kernel."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    consts = [
        helper.make_tensor("s", TensorProto.FLOAT, [], [1.5]),
        helper.make_tensor("b", TensorProto.FLOAT, [], [0.5]),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["t0"]),
        helper.make_node("Add", ["t0", "b"], ["t1"]),
        helper.make_node("Tanh", ["t1"], ["t2"]),
        helper.make_node("Mul", ["t2", "x"], ["y"]),
    ]
    g = helper.make_graph(nodes, "chain", [x], [y], initializer=consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def model_cases(names):
    import models

    cases = {}
    for name in models.LIGHT_MODELS:
        if not names or name in names:
            cases[name] = lambda name=name: models.random_weights(
                onnx.load(models.light_model_path(name)), seed=0
            )
    if not names or "mlp" in names:
        cases["mlp"] = models.mlp_model
    if not names or "encoder" in names:
        cases["encoder"] = models.encoder_layer_model
    return cases


def ort_session(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )


def compile_cpu(model, level: str, threads: int):
    """smelt's CPU preset `level` running parallel loops on `threads` threads."""
    import smelt
    from smelt.compiler import pipelines

    pipeline = pipelines.preset("cpu", level, threads)
    return smelt.compile(model, "cpu", pipeline=pipeline)


def bench_model(name, build, threads, repeat, level):
    from smelt.compiler.cli import random_inputs

    model = build()
    rows = []
    for t in threads:
        compiled = compile_cpu(model, level, t)
        feeds = random_inputs(compiled)
        sess = ort_session(model, t)
        ort_ms, smelt_ms, ratio = compare_ms(
            lambda s=sess, f=feeds: s.run(None, f),
            lambda c=compiled, f=feeds: c.run(f),
            repeat,
        )
        rows.append((name, t, smelt_ms, "onnxruntime", ort_ms, ratio))
    return rows


def bench_gemm(threads, repeat, level, n=1024):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    rows = []
    for t in threads:
        from threadpoolctl import threadpool_limits

        compiled = compile_cpu(gemm_model(n), level, t)

        with threadpool_limits(t):
            np_ms, smelt_ms, ratio = compare_ms(
                lambda: a @ b, lambda c=compiled: c.run({"a": a, "b": b}), repeat
            )
        rows.append((f"gemm {n}^3", t, smelt_ms, "numpy", np_ms, ratio))
    return rows


def bench_chain(threads, repeat, level, n=16 << 20):
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    out = np.empty_like(x)

    def numpy_chain():
        np.multiply(x, 1.5, out=out)
        np.add(out, 0.5, out=out)
        np.tanh(out, out=out)
        np.multiply(out, x, out=out)

    rows = []
    for t in threads:
        compiled = compile_cpu(chain_model(n), level, t)
        np_ms, smelt_ms, ratio = compare_ms(
            numpy_chain, lambda c=compiled: c.run({"x": x}), repeat
        )
        rows.append(("elementwise chain 16M", t, smelt_ms, "numpy", np_ms, ratio))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", nargs="*", default=[])
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--level", default="O3")
    args = parser.parse_args(argv)
    rows = []
    wanted = set(args.cases)
    if not wanted or "gemm" in wanted:
        rows += bench_gemm(args.threads, args.repeat, args.level)
    if not wanted or "chain" in wanted:
        rows += bench_chain(args.threads, args.repeat, args.level)
    model_names = wanted - {"gemm", "chain"}
    models = model_cases(model_names) if model_names or not wanted else {}
    for name, build in models.items():
        rows += bench_model(name, build, args.threads, args.repeat, args.level)
        print(f"  done {name}", file=sys.stderr)
    print(
        f"{'case':<24}{'thr':>4}{'smelt ms':>11}{'peer':>13}{'peer ms':>10}"
        f"{'ratio':>8}{'paired':>8}"
    )
    for name, t, s_ms, peer, p_ms, paired in rows:
        print(
            f"{name:<24}{t:>4}{s_ms:>11.2f}{peer:>13}{p_ms:>10.2f}"
            f"{s_ms / p_ms:>8.2f}{paired:>8.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
