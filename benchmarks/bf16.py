"""`--precision bf16` against f32, smelt against smelt, on the onnx light models
(seeded random weights), for the host CPU and for an AVX2 CPU (x86-64-v3) on the
same machine: issue #36's acceptance is bf16 <= 1.05 x f32 where the ISA has no
bf16 dot and <= 0.7 x where it has avx512bf16.

Per model and CPU: both builds compiled in this process, then timed interleaved
(benchmarks/peers.interleaved_ms: blocks alternate, a pause before each), the
median of --repeat runs each and the paired ratio (median over rounds of bf16's
block median / f32's); the bf16 output's max |bf16 - f32| / max |f32| too. The
host is named in the header; on a shared machine the numbers are indicative.

    python benchmarks/bf16.py [--models light_resnet50 ...] [--cpus host x86-64-v3]
        [--repeat 20] [--threads 1] [--out benchmarks/results/bf16.txt]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))

import models  # noqa: E402
from hostinfo import header_lines  # noqa: E402
from peers import interleaved_ms  # noqa: E402

CPUS = ["host", "x86-64-v3"]  # this machine, and an AVX2 CPU without bf16 dot
BF16_HOST_BOUND = 0.7


def bound(cpu: str) -> float:
    """The acceptance bound for `cpu`: 0.7 where smelt's TargetSpec has
    avx512bf16, else 1.05."""
    from smelt.targets.bf16_path import FEATURE
    from smelt.targets.cpu_spec import CpuSpec, host

    spec = host() if cpu == "host" else CpuSpec.named(cpu)
    return BF16_HOST_BOUND if spec.has(FEATURE) else 1.05


def dot_rates(iterations: int = 200_000) -> str:
    """ns per zmm `vdpbf16ps` and per zmm FMA on this host, 4 and 16 independent
    accumulators (registers only): whether the bf16 dot can beat f32 here
    (`bf16_path.fast_dot`); '' without avx512bf16."""
    import ctypes

    import llvmlite.binding as llvm

    from smelt.lowering.llvm.jit import target_machine
    from smelt.targets.cpu_spec import host

    spec = host()
    if not spec.has("avx512bf16"):
        return ""
    dp = ("call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %a{i},"
          " <32 x bfloat> %x, <32 x bfloat> %x)")  # fmt: skip
    fma = "call <16 x float> @llvm.fma.v16f32(<16 x float> %f, <16 x float> %f, " \
          "<16 x float> %a{i})"  # fmt: skip
    buf, keep, out = (ctypes.c_float * 16)(*[0.5] * 16), [], []
    for name, op in (("vdpbf16ps", dp), ("fma", fma)):
        for n in (4, 16):
            lines = [
                "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>,"
                " <32 x bfloat>, <32 x bfloat>)",
                "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>,"
                " <16 x float>)",
                "define float @f(i64 %n, ptr %p) {", "entry:",
                "  %x = load <32 x bfloat>, ptr %p, align 4",
                "  %f = load <16 x float>, ptr %p, align 4", "  br label %loop",
                "loop:", "  %i = phi i64 [0, %entry], [%j, %loop]",
                *(f"  %a{i} = phi <16 x float> [zeroinitializer, %entry], "
                  f"[%b{i}, %loop]" for i in range(n)),
                *(f"  %b{i} = " + op.format(i=i) for i in range(n)),
                "  %j = add i64 %i, 1", "  %c = icmp ult i64 %j, %n",
                "  br i1 %c, label %loop, label %done", "done:",
                *(f"  %s{i} = extractelement <16 x float> %b{i}, i32 0"
                  for i in range(n)),
                "  %t0 = fadd float %s0, %s1",
                *(f"  %t{i} = fadd float %t{i - 1}, %s{i + 1}"
                  for i in range(1, n - 1)),
                f"  ret float %t{n - 2}", "}",
            ]  # fmt: skip
            mod = llvm.parse_assembly("\n".join(lines))
            engine = llvm.create_mcjit_compiler(mod, target_machine(spec))
            engine.finalize_object()
            keep.append(engine)
            fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_void_p)(
                engine.get_function_address("f")
            )
            best = min(_timed(fn, iterations, buf) for _ in range(7))
            out.append(f"{name} x{n} {best / iterations / n * 1e9:.2f} ns")
    return "zmm issue rate (ns per instruction; vdpbf16ps does 2x an FMA's flops): " \
        + ", ".join(out)  # fmt: skip


def _timed(fn, iterations, buf) -> float:
    import ctypes

    t0 = time.perf_counter()
    fn(iterations, ctypes.addressof(buf))
    return time.perf_counter() - t0


def feeds_for(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for info in models.real_inputs(model):
        shape = [d.dim_value or 1 for d in info.type.tensor_type.shape.dim]
        out[info.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def measure(name: str, cpu: str, args) -> str:
    import smelt

    model = models.random_weights(onnx.load(models.light_model_path(name)), seed=0)
    feeds = feeds_for(model)
    built, compile_s = {}, {}
    for precision in ("f32", "bf16"):
        t0 = time.perf_counter()
        built[precision] = smelt.compile(
            model, "cpu", threads=args.threads, cpu=cpu, precision=precision
        )
        compile_s[precision] = time.perf_counter() - t0
    ref = next(iter(built["f32"].run(feeds).values()))
    low = next(iter(built["bf16"].run(feeds).values()))
    err = float(np.abs(low - ref).max() / max(np.abs(ref).max(), 1e-30))
    timing = interleaved_ms(
        {p: (lambda c=c: c.run(feeds)) for p, c in built.items()}, args.repeat
    )
    ratio = timing.paired("bf16", "f32")
    limit = bound(cpu)
    verdict = "ok" if ratio <= limit else "OVER"
    return (
        f"{name:20s} {cpu:10s} f32 {timing.ms('f32'):9.2f} ms  bf16 "
        f"{timing.ms('bf16'):9.2f} ms  bf16/f32 {ratio:5.2f} (<= {limit}: {verdict})"
        f"  err {err:.2e}  compile f32 {compile_s['f32']:.1f} s bf16 "
        f"{compile_s['bf16']:.1f} s"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=models.LIGHT_MODELS)
    parser.add_argument("--cpus", nargs="*", default=CPUS)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="also append the table to this file")
    args = parser.parse_args(argv)
    lines = [
        *header_lines(),
        f"bf16 vs f32 (smelt O2, {args.threads} thread(s), interleaved, median of "
        f">= {args.repeat} runs each; paired ratio); load average "
        f"{os.getloadavg()[0]:.1f} at start",
    ]
    rates = dot_rates()
    if rates:
        lines.append(rates)
    for line in lines:
        print(line, flush=True)
    for name in args.models:
        for cpu in args.cpus:
            try:
                row = measure(name, cpu, args)
            except Exception as e:  # one model's failure is a row, not the end
                row = f"{name:20s} {cpu:10s} FAILED: {type(e).__name__}: {e}"[:300]
            print(row, flush=True)
            lines.append(row)
    lines.append(f"load average {os.getloadavg()[0]:.1f} at end")
    print(lines[-1])
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
