"""CPU benchmark: smelt against onnxruntime (ORT_ENABLE_ALL, same threads) and numpy,
in one run, median of repeated runs (alternating blocks, see `compare_ms`); prints
a table of ratios. smelt runs the preset of `--level` with `threads`
(loop-parallelize) for each thread count.

    python benchmarks/cpu.py                      # every case, 1 and 2 threads
    python benchmarks/cpu.py --cases mlp gemm --threads 1 --repeat 20
    python benchmarks/cpu.py --cpus host x86-64-v3   # the AVX2 code too

Unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE in the command that runs it (they slow
a current numpy); the header says which OpenBLAS kernel ran.

A ratio below 1 means smelt is faster than the peer: `ratio` divides the two
medians, `paired` is the median ratio of adjacent blocks (see `compare_ms`).
Absolute times on a shared machine mean little; ratios measured side by side are
the number.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

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


PAUSE_S = 0.2
"""Between blocks: longer than an idle OpenBLAS worker spins (2^28 cycles, about
70 ms here) before it sleeps. With 50 ms, numpy's spinning worker took one of the
two cores from smelt's first runs at 2 threads (smelt's 1024^3 GEMM read 9.2 ms at
2 threads, as at 1, though 4.6 ms alone)."""


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
        cases["mlp"] = models.mlp_gelu_model  # 64 × 1024 → 4096 → 1024, erf-GELU
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


def compile_cpu(model, level: str, threads: int, cpu: str = "host"):
    """smelt's CPU preset `level` for `cpu`, parallel loops on `threads` threads;
    (compiled model, compile seconds)."""
    import smelt

    t0 = time.perf_counter()
    compiled = smelt.compile(model, "cpu", level=level, threads=threads, cpu=cpu)
    return compiled, time.perf_counter() - t0


@dataclass
class Row:
    case: str
    cpu: str
    threads: int
    smelt_ms: float
    peer: str
    peer_ms: float
    paired: float
    compile_s: float = float("nan")
    error: float = float("nan")  # max |smelt - peer| / max |peer|
    note: str = ""


def rel_error(ours: dict, theirs: dict) -> float:
    worst = 0.0
    for name, ref in theirs.items():
        got = ours[name].astype(np.float64)
        worst = max(worst, float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30)))
    return worst


def bench_model(name, build, threads, repeat, level, cpus):
    from smelt.compiler.cli import random_inputs

    model = build()
    rows = []
    for cpu in cpus:
        for t in threads:
            compiled, seconds = compile_cpu(model, level, t, cpu)
            feeds = random_inputs(compiled)
            sess = ort_session(model, t)
            names = [o.name for o in sess.get_outputs()]
            error = rel_error(compiled.run(feeds), dict(zip(names, sess.run(names, feeds))))
            ort_ms, smelt_ms, ratio = compare_ms(
                lambda s=sess, f=feeds: s.run(None, f),
                lambda c=compiled, f=feeds: c.run(f),
                repeat,
            )
            rows.append(Row(name, cpu, t, smelt_ms, "onnxruntime", ort_ms, ratio,
                            seconds, error))  # fmt: skip
            del compiled, sess
    return rows


def bench_gemm(threads, repeat, level, cpus, n=1024):
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    rows = []
    for cpu in cpus:
        for t in threads:
            compiled, seconds = compile_cpu(gemm_model(n), level, t, cpu)
            with threadpool_limits(t):
                error = rel_error(compiled.run({"a": a, "b": b}), {"c": a @ b})
                np_ms, smelt_ms, ratio = compare_ms(
                    lambda: a @ b, lambda c=compiled: c.run({"a": a, "b": b}), repeat
                )
            flops = 2 * n**3
            note = (f"smelt {flops / smelt_ms / 1e6:.0f} GFLOP/s, numpy "
                    f"{flops / np_ms / 1e6:.0f}: {np_ms / smelt_ms:.0%} of OpenBLAS")
            rows.append(Row(f"gemm {n}^3", cpu, t, smelt_ms, "numpy", np_ms, ratio,
                            seconds, error, note))  # fmt: skip
            del compiled
    return rows


def threaded_copy(src: np.ndarray, dst: np.ndarray, threads: int):
    """np.copyto over `threads` equal slices, one Python thread each (copyto
    releases the GIL): the host's copy bandwidth at that thread count."""
    from concurrent.futures import ThreadPoolExecutor

    if threads == 1:
        return lambda: np.copyto(dst, src), None
    pool = ThreadPoolExecutor(threads)
    parts = [(s, d) for s, d in zip(np.array_split(src, threads),
                                    np.array_split(dst, threads))]  # fmt: skip

    def run():
        for f in [pool.submit(np.copyto, d, s) for s, d in parts]:
            f.result()

    return run, pool


def bench_chain(threads, repeat, level, cpus, n=16 << 20):
    """The fused chain against numpy, and against a plain copy of the same bytes
    (one read and one write of 64 MB) on as many threads: `paired` is the chain's
    time over the copy's, so 1.25 means 80% of the copy bandwidth."""
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    out = np.empty_like(x)

    def numpy_chain():
        np.multiply(x, 1.5, out=out)
        np.add(out, 0.5, out=out)
        np.tanh(out, out=out)
        np.multiply(out, x, out=out)

    numpy_chain()
    reference = {"y": out.astype(np.float64)}
    rows = []
    for cpu in cpus:
        for t in threads:
            compiled, seconds = compile_cpu(chain_model(n), level, t, cpu)
            y = np.empty_like(x)
            error = rel_error(compiled.run({"x": x}), reference)
            run = lambda c=compiled: c.run({"x": x}, outputs={"y": y})  # noqa: E731
            np_ms, smelt_ms, ratio = compare_ms(numpy_chain, run, repeat)
            rows.append(Row("elementwise chain 16M", cpu, t, smelt_ms, "numpy", np_ms,
                            ratio, seconds, error))  # fmt: skip
            copy, pool = threaded_copy(x, out, t)
            copy_ms, smelt_ms, ratio = compare_ms(copy, run, repeat)
            gbs = 2 * x.nbytes / 1e6
            note = (f"copy {gbs / copy_ms:.1f} GB/s, chain {gbs / smelt_ms:.1f} GB/s: "
                    f"{copy_ms / smelt_ms:.0%} of the copy bandwidth")
            rows.append(Row("chain vs copy 16M", cpu, t, smelt_ms, f"copy {t}T", copy_ms,
                            ratio, note=note))  # fmt: skip
            if pool is not None:
                pool.shutdown()
            del compiled
    return rows


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def print_table(rows: list[Row], args) -> None:
    from hostinfo import header_lines

    for line in header_lines():
        print(f"# {line}")
    print(f"# level {args.level}, {args.repeat} timed runs each, alternating blocks "
          f"of 4; paired = median over block pairs of smelt / peer (below 1: smelt "
          "faster); error = max|smelt - peer| / max|peer|")  # fmt: skip
    print()
    print("| case | cpu | thr | smelt ms | peer | peer ms | ratio | paired | compile s "
          "| error | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.case} | {r.cpu} | {r.threads} | {r.smelt_ms:.2f} | {r.peer} | "
              f"{r.peer_ms:.2f} | {r.smelt_ms / r.peer_ms:.2f} | {r.paired:.2f} | "
              f"{r.compile_s:.1f} | {r.error:.1e} | {r.note} |")  # fmt: skip
    models = [r for r in rows if r.peer == "onnxruntime"]
    print()
    for cpu in dict.fromkeys(r.cpu for r in models):
        for t in dict.fromkeys(r.threads for r in models):
            mine = [r for r in models if r.cpu == cpu and r.threads == t]
            worst = max(mine, key=lambda r: r.paired)
            print(f"models vs onnxruntime, cpu {cpu}, {t} thread(s): geometric mean "
                  f"{geomean([r.paired for r in mine]):.2f}, worst {worst.paired:.2f} "
                  f"({worst.case}), {len(mine)} models")  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", nargs="*", default=[])
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--cpus", nargs="*", default=["host"],
                        help="CPUs to compile for (host, x86-64-v3, ...)")
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--level", default="O3")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    wanted = set(args.cases)
    if not wanted or "gemm" in wanted:
        rows += bench_gemm(args.threads, args.repeat, args.level, args.cpus)
    if not wanted or "chain" in wanted:
        rows += bench_chain(args.threads, args.repeat, args.level, args.cpus)
    model_names = wanted - {"gemm", "chain"}
    models = model_cases(model_names) if model_names or not wanted else {}
    for name, build in models.items():
        rows += bench_model(name, build, args.threads, args.repeat, args.level,
                            args.cpus)  # fmt: skip
        print(f"  done {name}", file=sys.stderr)
    print_table(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
