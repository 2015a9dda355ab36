"""Every model through smelt's gpu target against onnxruntime on the CPU, before
`benchmarks/gpu.py` times anything: the light_* models (seeded random weights, the
logits before the softmax exposed), the MLP and the BERT-base encoder layer, and any
.onnx files given (the zoo: exported beforehand by `benchmarks/gpu_zoo.py`, each
with its feeds).

    python benchmarks/gpu_check.py --jobs 8         # on cuda, f32 products
    python benchmarks/gpu_check.py --tf32           # as the benchmark runs them
    TRITON_INTERPRET=1 python benchmarks/gpu_check.py --device cpu mlp_small
    python benchmarks/gpu_check.py default wheels/zoo/*.onnx  # and the zoo

Each output's error is max |smelt - onnxruntime| / max |onnxruntime|. The tolerance
is 1e-4 with f32 products (`tf32=False`: `tl.dot(..., input_precision="ieee")`):
only the summation order differs from onnxruntime, and a wrong epsilon, bias or
scale moves an output by far more. With `--tf32` each product keeps a 10-bit
mantissa (relative error up to 2^-11 per product, partly averaging out over a
dot product of thousands and compounding over a network's depth): 2e-2, the
bound gpu.py uses for its tf32 cases. Exit status 1 when any model fails; every
model is tried and reported first.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import numpy as np
import onnx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))

import models  # noqa: E402

import smelt  # noqa: E402


def named_models() -> dict:
    """name -> a function making the model (built here: no files to carry)."""
    out = {
        name: (lambda n=name: models.with_logits(
            models.random_weights(onnx.load(models.light_model_path(n)))))
        for name in models.LIGHT_MODELS
    }  # fmt: skip
    out["mlp"] = lambda: models.mlp_model(batch=64, d_in=1024, hidden=4096, d_out=1024)
    out["mlp_gelu"] = models.mlp_gelu_model
    out["encoder"] = models.encoder_layer_model
    out["mlp_small"] = lambda: models.mlp_model(batch=4, d_in=16, hidden=32, d_out=10)
    return out


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in models.real_inputs(model):
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        feeds[info.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def check(
    model: onnx.ModelProto, device: str, tf32: bool, feeds: dict | None = None
) -> tuple:
    """(worst error, seconds to compile, launches) of one model on `feeds`
    (default: `feeds_for`); raises on failure."""
    feeds = feeds if feeds is not None else feeds_for(model)
    t0 = time.perf_counter()
    compiled = smelt.compile(model, "gpu", device=device, tf32=tf32)
    seconds = time.perf_counter() - t0
    got = compiled.run(feeds)
    want = models.run_onnxruntime(model, feeds)
    worst = 0.0
    for out, ref in want.items():
        value = np.asarray(got[out])
        if value.shape != ref.shape:  # exactly: no reshape before comparing
            raise AssertionError(f"output {out}: shape {value.shape}, onnxruntime "
                                 f"{ref.shape}")  # fmt: skip
        if not np.isfinite(value).all():
            raise AssertionError(f"output {out} has NaN or inf")
        worst = max(worst, models.rel_error(value, ref))
    return worst, seconds, len(compiled.program.launches)


def check_one(name: str, device: str, tf32: bool, tolerance: float) -> tuple:
    """(passed, the report line) of one model, by name or .onnx path; never raises
    (a worker of the process pool runs it too)."""
    try:
        known = named_models()
        model = onnx.load(name) if name.endswith(".onnx") else known[name]()
        err, seconds, launches = check(model, device, tf32, saved_feeds(name))
        ok = err <= tolerance
        line = (f"  {'ok  ' if ok else 'FAIL'} {name:<24} error {err:.2e}  compile "
                f"{seconds:5.1f} s  {launches} launches")  # fmt: skip
        return ok, line
    except Exception as e:  # noqa: BLE001 (reported, then the next model)
        trace = traceback.format_exc(limit=3)
        return False, f"  FAIL {name:<24} {type(e).__name__}: {str(e)[:300]}\n{trace}"


def saved_feeds(name: str) -> dict[str, np.ndarray] | None:
    """The feeds saved beside an .onnx file (`NAME.npz`, as benchmarks/gpu_zoo.py
    writes them: token ids, masks), else None."""
    path = name[: -len(".onnx")] + ".npz" if name.endswith(".onnx") else ""
    if not os.path.exists(path):
        return None
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def main(argv=None) -> int:
    known = named_models()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help=f"names ({', '.join(known)}), "
                        ".onnx paths (with NAME.npz beside it: its feeds) or "
                        "'default': the light models, mlp, mlp_gelu, encoder (also "
                        "when none is given)")  # fmt: skip
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tf32", action="store_true",
                        help="tf32 products (the benchmark's setting)")
    parser.add_argument("--budget", type=float, default=0, metavar="SECONDS",
                        help="stop after this long (0: no limit); the models not "
                        "checked by then are listed")
    parser.add_argument("--jobs", type=int, default=1,
                        help="models checked at once, each in a process of its own "
                        "(Triton compiles on the CPU: the H200 machine has 16 cores)")
    args = parser.parse_args(argv)
    first = ["light_resnet50", "encoder", "mlp", "mlp_gelu"]  # the timed ones
    default = first + [n for n in known if n not in (*first, "mlp_small")]
    names = [m for name in args.models or ["default"]
             for m in (default if name == "default" else [name])]  # fmt: skip
    names = list(dict.fromkeys(names))
    tolerance = 2e-2 if args.tf32 else 1e-4
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device (use --device cpu under TRITON_INTERPRET=1)",
                  file=sys.stderr)  # fmt: skip
            return 2
        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"f32 products: {'tf32' if args.tf32 else 'ieee'}; tolerance {tolerance:g} "
          "(max |smelt - onnxruntime| / max |onnxruntime|)", flush=True)
    results = run_all(names, args, tolerance)
    failed = [n for n, (ok, _) in results.items() if not ok]
    skipped = [n for n in names if n not in results]
    print(f"{len(results) - len(failed)} of {len(results)} models match"
          + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; not checked (budget): {', '.join(skipped)}" if skipped else ""),
          flush=True)  # fmt: skip
    return 1 if failed else 0


def run_all(names: list[str], args, tolerance: float) -> dict[str, tuple]:
    """name -> (passed, line) for the models checked within the budget, each line
    printed as its model finishes."""
    t0, results = time.perf_counter(), {}
    if args.jobs <= 1:
        for name in names:
            if args.budget and time.perf_counter() - t0 > args.budget:
                break
            results[name] = check_one(name, args.device, args.tf32, tolerance)
            print(results[name][1], flush=True)
        return results
    import concurrent.futures as cf
    import multiprocessing

    pool = cf.ProcessPoolExecutor(args.jobs, multiprocessing.get_context("spawn"))
    futures = {pool.submit(check_one, n, args.device, args.tf32, tolerance): n
               for n in names}  # fmt: skip
    try:
        for done in cf.as_completed(futures, timeout=args.budget or None):
            results[futures[done]] = done.result()
            print(results[futures[done]][1], flush=True)
    except cf.TimeoutError:
        # the budget is spent: stop the workers still compiling (left running,
        # they would hold the output pipe, and the device, until they finished)
        for process in list(getattr(pool, "_processes", {}).values()):
            process.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        return results
    pool.shutdown()
    return results


if __name__ == "__main__":
    sys.exit(main())
