"""CPU benchmark: smelt against onnxruntime and OpenVINO (each at smelt's thread count,
f32, latency settings: see benchmarks/peers.py) on models, and against numpy on a
GEMM and an elementwise chain, in one process; median of repeated runs timed in
interleaved blocks whose order rotates each round (see `peers.interleaved_ms`).
Every runtime writes into preallocated output arrays: smelt's run(..., outputs=),
onnxruntime's IOBinding, OpenVINO's infer request with preset output tensors.
smelt runs the preset of `--level` with `threads` (loop-parallelize).

    python benchmarks/cpu.py                      # every case, 1 and 2 threads
    python benchmarks/cpu.py --cases mlp gemm --threads 1 --repeat 20
    python benchmarks/cpu.py --cpus host x86-64-v3   # the AVX2 code too
    python benchmarks/cpu.py --quick --cases light_squeezenet   # smoke: outputs match

Unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE in the command that runs it (they slow
a current numpy); the header says which OpenBLAS kernel ran. Without OpenVINO
installed the models run against onnxruntime alone (the header says so).

Ratios below 1 mean the first-named runtime is faster: smelt / onnxruntime,
OpenVINO / onnxruntime and smelt / OpenVINO are each the median over rounds of
the two block medians' ratio (blocks a moment apart: slow drifts of a shared
machine cancel out); the ms columns are medians over all timed runs. Every
model's outputs are checked against each other before timing: error = max|a - b|
/ max|b|, above --tolerance (1e-4) the row says MISMATCH and the exit status is 1.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peers
from cpu_report import report
from peers import ORT, OV, RATIOS, TIMING, interleaved_ms, ort_session  # quant.py too


def compare_ms(peer, smelt, repeat: int, block: int | None = None) -> tuple[float, ...]:
    """(peer ms, smelt ms, ratio): medians over `repeat` runs each, timed in
    interleaved blocks (`peers.interleaved_ms`: a pause before each block, so one
    runtime's spinning worker threads have gone to sleep before the other one
    starts; the order alternates). The ratio is the median over rounds of smelt's
    block median / the peer's."""
    timing = interleaved_ms({"peer": peer, "smelt": smelt}, repeat,
                            block or TIMING["block"], TIMING["pause"])
    return timing.ms("peer"), timing.ms("smelt"), timing.paired("smelt", "peer")


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


@dataclass
class ModelRow:
    """One model at one CPU and thread count against every peer."""

    case: str
    cpu: str
    threads: int
    compile_s: float
    ms: dict[str, float] = field(default_factory=dict)  # median per runtime
    paired: dict[tuple[str, str], float] = field(default_factory=dict)  # RATIOS
    error: dict[tuple[str, str], float] = field(default_factory=dict)  # RATIOS
    settings: dict[str, str] = field(default_factory=dict)  # per peer


def rel_error(ours: dict, theirs: dict) -> float:
    """max |ours - theirs| / max |theirs| over the outputs of `theirs`; inf where
    either holds a NaN (a preallocated output nobody wrote)."""
    worst = 0.0
    for name, ref in theirs.items():
        diff = np.abs(ours[name].astype(np.float64) - ref)
        if np.isnan(diff).any():
            return math.inf
        worst = max(worst, float(np.max(diff)) / max(float(np.max(np.abs(ref))), 1e-30))
    return worst


def bench_model(name, build, args) -> list[ModelRow]:
    """`name` at every --cpus and --threads: smelt, onnxruntime and (if installed)
    OpenVINO, each writing into preallocated outputs, checked against each other,
    then timed side by side."""
    from smelt.compiler.cli import random_inputs

    model = build()
    rows = []
    for cpu in args.cpus:
        for t in args.threads:
            compiled, seconds = compile_cpu(model, args.level, t, cpu)
            feeds = random_inputs(compiled)
            outputs = {"smelt": peers.nan_like(compiled.run(feeds))}
            fns = {"smelt": lambda c=compiled, f=feeds, o=outputs["smelt"]:
                     c.run(f, outputs=o)}  # fmt: skip
            sess = ort_session(model, t)
            fns[ORT], outputs[ORT] = peers.ort_bound(sess, feeds)
            row = ModelRow(name, cpu, t, seconds, settings={ORT: peers.ort_settings()})
            if args.openvino:
                ov_model = peers.ov_compile(model, t, args.ov_pinning)
                fns[OV], outputs[OV] = peers.ov_bound(ov_model, feeds,
                                                      compiled.output_names)  # fmt: skip
                row.settings[OV] = peers.ov_settings(ov_model)
            for fn in fns.values():
                fn()
            for a, b in RATIOS:
                if a in outputs and b in outputs:
                    row.error[a, b] = rel_error(outputs[a], outputs[b])
            timing = interleaved_ms(fns, args.repeat, **TIMING)
            row.ms = {n: timing.ms(n) for n in fns}
            row.paired = {(a, b): timing.paired(a, b) for a, b in RATIOS
                          if a in fns and b in fns}  # fmt: skip
            rows.append(row)
            del compiled, sess, fns
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
            run = lambda c=compiled, y=y: c.run({"x": x}, outputs={"y": y})
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="*", default=[],
                        help="gemm, chain, mlp, encoder, light_* (default: all)")
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--cpus", nargs="*", default=["host"],
                        help="CPUs to compile for (host, x86-64-v3, ...)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed runs per runtime and case (default 40; >= 20 to "
                             "report; --quick: 3)")  # fmt: skip
    parser.add_argument("--level", default="O3")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3 runs, blocks of 1, short pauses (times "
                             "meaningless: checks that every peer runs and matches)")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="max |a - b| / max |b| allowed between runtimes' outputs")
    parser.add_argument("--no-openvino", action="store_true", help="onnxruntime only")
    parser.add_argument("--ov-pinning", action="store_true",
                        help="OpenVINO ENABLE_CPU_PINNING=True (default False, like "
                             "smelt and onnxruntime, which pin nothing)")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args(argv)
    if args.quick:
        TIMING.update(block=1, pause=0.01)
    args.repeat = args.repeat or (3 if args.quick else 40)
    args.openvino = False
    if args.no_openvino:
        args.no_openvino_reason = "left out (--no-openvino)"
    elif peers.openvino() is None:
        args.no_openvino_reason = "not installed (pip install openvino)"
        print("OpenVINO not installed (pip install openvino): models run against "
              "onnxruntime alone", file=sys.stderr)  # fmt: skip
    else:
        args.openvino = True
    rows: list[Row] = []
    model_rows: list[ModelRow] = []
    wanted = set(args.cases)
    if not wanted or "gemm" in wanted:
        rows += bench_gemm(args.threads, args.repeat, args.level, args.cpus)
    if not wanted or "chain" in wanted:
        rows += bench_chain(args.threads, args.repeat, args.level, args.cpus)
    model_names = wanted - {"gemm", "chain"}
    models = model_cases(model_names) if model_names or not wanted else {}
    unknown = model_names - set(models)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}")
    for name, build in models.items():
        model_rows += bench_model(name, build, args)
        print(f"  done {name}", file=sys.stderr)
    lines = report(rows, model_rows, args)
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    bad = [r for r in model_rows if any(e > args.tolerance for e in r.error.values())]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
