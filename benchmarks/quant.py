"""Quantized and low-precision inference against onnxruntime, in one run:

* INT8: each model quantized by onnxruntime's own `quantize_static` (QDQ,
  per-channel int8 weights, uint8 activations, minmax) and by `smelt quantize`
  (minmax, and entropy: `--methods`), then run by onnxruntime and by smelt;
  smelt's int8 / fp32 ratio and the weights' size against fp32 too.
* BF16: smelt `precision="bf16"` against smelt fp32 (cosine against fp32).

Latencies: interleaved blocks, median of --repeat runs (benchmarks/cpu.py).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/quant.py
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))

import models  # noqa: E402
from cpu import compare_ms, compile_cpu, ort_session  # noqa: E402
from hostinfo import header_lines  # noqa: E402

from smelt.quantize.calibration import METHODS  # noqa: E402
from smelt.quantize.qdq import weight_bytes  # noqa: E402

MODELS = {
    # 64x1024 -> 4096 -> 1024: ReLU (then softmax), and erf-GELU as torch exports it
    "mlp": lambda: models.mlp_model(batch=64, d_in=1024, hidden=4096, d_out=1024),
    "mlp_gelu": lambda: models.mlp_gelu_model(),
    "encoder": lambda: models.encoder_layer_model(),  # seq 128, hidden 768
    "resnet50": lambda: models.random_weights(
        onnx.load(models.light_model_path("light_resnet50"))
    ),
}


def samples(model: onnx.ModelProto, n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        feeds = {}
        for info in models.real_inputs(model):
            shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
            feeds[info.name] = rng.standard_normal(shape).astype(np.float32)
        out.append(feeds)
    return out


def ort_quantized(
    src: str, dst: str, calib: list[dict], reduce_range: bool = False
) -> None:
    """onnxruntime's quantize_static of `src` (QDQ, per channel, u8 activations),
    old-opset models (the light_* ones: opset 9, weights listed as graph inputs)
    brought to opset 13 with constant weights first."""
    from quant_ort_models import ort_quantize

    from smelt.quantize import upgrade_for_quantization

    model = upgrade_for_quantization(onnx.load(src))
    onnx.save(ort_quantize(model, calib, "u8", reduce_range), dst)


def smelt_quantized(
    src: str, dst: str, calib: list[dict], method: str, reduce_range: bool = False
) -> None:
    import smelt

    data = os.path.join(os.path.dirname(dst), "calib.npz")
    np.savez(data, **{k: np.stack([c[k] for c in calib]) for k in calib[0]})
    smelt.quantize(src, calibration=data, output=dst, method=method,
                   reduce_range=reduce_range)


def writers(methods: list[str], reduce_range: bool) -> list[tuple[str, Callable]]:
    """(label, write(src, dst, calib)) per quantized file: onnxruntime's, then
    smelt's for each calibration method (`smelt-qdq` is minmax)."""
    ort = functools.partial(ort_quantized, reduce_range=reduce_range)
    out: list[tuple[str, Callable]] = [("ort-qdq", ort)]
    for method in methods:
        label = "smelt-qdq" if method == "minmax" else f"smelt-{method}"
        write = functools.partial(smelt_quantized, method=method,
                                  reduce_range=reduce_range)  # fmt: skip
        out.append((label, write))
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--calibration", type=int, default=8)
    parser.add_argument("--cpu", default="host",
                        help="the CPU smelt compiles for (x86-64-v3: the AVX2 int8 path)")
    parser.add_argument("--methods", nargs="+", default=["minmax", "entropy"],
                        choices=METHODS,
                        help="calibration methods of smelt's own files (put the "
                        "models first: python benchmarks/quant.py mlp --methods "
                        "minmax)")
    parser.add_argument("--reduce-range", action="store_true",
                        help="every file with 7-bit weights (what CPUs without "
                        "VNNI multiply fastest: vpmaddubsw)")
    parser.add_argument("models", nargs="*", default=list(MODELS))
    args = parser.parse_args(argv)
    for line in header_lines():
        print(line)
    print(f"median of {args.repeat} runs, {args.calibration} calibration samples, "
          f"smelt compiles for cpu {args.cpu}"
          + (", 7-bit weights (reduce_range)" if args.reduce_range else "") + "\n")
    print("| model | file | threads | ort int8 ms | smelt int8 ms | smelt / ort "
          "| smelt fp32 ms | smelt int8 / fp32 | cos(smelt int8, fp32) "
          "| cos(ort int8, fp32) | max abs(smelt - ort int8) | weights fp32 / int8 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    bf16_rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in args.models:
            fp32 = MODELS[name]()
            src = os.path.join(d, f"{name}.onnx")
            onnx.save(fp32, src)
            calib = samples(fp32, args.calibration)
            feeds = samples(fp32, 1, seed=99)[0]
            files = {}
            for label, write in writers(args.methods, args.reduce_range):
                path = os.path.join(d, f"{name}.{label}.onnx")
                try:
                    write(src, path, calib)
                    files[label] = path
                except Exception as e:  # noqa: BLE001 (reported in the table)
                    print(f"| {name} | {label} | - | quantizing failed: "
                          f"{type(e).__name__}: {str(e)[:80]} |", flush=True)
            for threads in args.threads:
                ref, _ = compile_cpu(fp32, "O2", threads, args.cpu)
                want = next(iter(ref.run(feeds).values()))
                for label, path in files.items():
                    qmodel = onnx.load(path)
                    smaller = weight_bytes(fp32) / max(1, weight_bytes(qmodel))
                    ours, _ = compile_cpu(qmodel, "O2", threads, args.cpu)
                    session = ort_session(qmodel, threads)
                    got = next(iter(ours.run(feeds).values()))
                    theirs = session.run(None, feeds)[0]
                    ort_ms, smelt_ms, ratio = compare_ms(
                        lambda: session.run(None, feeds), lambda: ours.run(feeds),
                        args.repeat,
                    )
                    fp32_ms, _, q_ratio = compare_ms(
                        lambda: ref.run(feeds), lambda: ours.run(feeds), args.repeat
                    )
                    print(f"| {name} | {label} | {threads} | {ort_ms:.3f} "
                          f"| {smelt_ms:.3f} | {ratio:.2f} | {fp32_ms:.3f} "
                          f"| {q_ratio:.2f} | {cosine(got, want):.5f} "
                          f"| {cosine(theirs, want):.5f} "
                          f"| {np.max(np.abs(got - theirs)):.2e} | {smaller:.2f} |",
                          flush=True)  # fmt: skip
                if name in ("mlp", "mlp_gelu", "encoder"):
                    import smelt

                    low = smelt.compile(fp32, "cpu", threads=threads, precision="bf16",
                                        cpu=args.cpu)
                    got = next(iter(low.run(feeds).values()))
                    fp_ms, bf_ms, r = compare_ms(
                        lambda: ref.run(feeds), lambda: low.run(feeds), args.repeat
                    )
                    bf16_rows.append(
                        f"| {name} | {threads} | {fp_ms:.3f} | {bf_ms:.3f} "
                        f"| {1 / r:.2f} | {cosine(got, want):.6f} |"
                    )
    print("\n| model | threads | smelt fp32 ms | smelt bf16 ms | speed-up "
          "| cos(bf16, fp32) |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(bf16_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
