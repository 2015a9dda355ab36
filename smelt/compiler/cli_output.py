"""What `smelt run` prints after compiling: the outputs (and an .npz of them), the
per-kernel profile with its ONNX nodes, and the check against onnxruntime."""

from __future__ import annotations

import time

import numpy as np

from smelt.compiler.cli_oracle import onnxruntime_outputs, same_kind
from smelt.errors import SmeltError


def run_and_show(model, feeds: dict, output: str | None) -> dict:
    """Runs `model` once, prints the time and the head of each output, and writes
    them to the .npz `output` when given; returns them."""
    t0 = time.perf_counter()
    outputs = model.run(feeds)
    print(f"ran in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    for name, value in outputs.items():
        flat = value.reshape(-1)
        head = np.array2string(flat[:5], precision=5, separator=", ")
        more = " …" if flat.size > 5 else ""
        print(f"  {name}: {value.dtype}{list(value.shape)} {head}{more}")
    if output:
        try:
            np.savez(output, **outputs)
        except OSError as e:
            raise SmeltError(f"cannot write the outputs to '{output}': {e}") from None
        print(f"wrote {output}")
    return outputs


def print_profile(model, feeds, runs: int, top: int = 25) -> None:
    """Per-kernel time of `runs` more runs (after the first), slowest first."""
    model.profile()  # drop the first run (page faults, pool start)
    t0 = time.perf_counter()
    for _ in range(runs):
        model.run(feeds)
    wall = (time.perf_counter() - t0) / runs
    rows = model.profile()
    total = max(sum(row.seconds for row in rows) / runs, 1e-12)
    print(f"profile over {runs} runs: {wall * 1e3:.2f} ms per run, "
          f"{total * 1e3:.2f} ms in {len(rows)} kernels")
    print(f"  {'kernel':<40} {'calls':>5} {'ms/run':>8} {'share':>6}  onnx nodes")
    for row in rows[:top]:
        ms = row.seconds / runs * 1e3
        share = row.seconds / runs / total
        print(f"  {row.kernel:<40} {row.calls:>5} {ms:>8.3f} {share:>6.1%}  "
              f"{_node_list(row.nodes)}")
    if len(rows) > top:
        rest = sum(row.seconds for row in rows[top:]) / runs
        print(f"  {f'({len(rows) - top} more)':<40} {'':>5} {rest * 1e3:>8.3f} "
              f"{rest / total:>6.1%}")


def _node_list(nodes, limit: int = 6) -> str:
    """A profile line's ONNX nodes: the first `limit`, then how many more."""
    shown = ", ".join(nodes[:limit])
    return shown + (f" (+{len(nodes) - limit} more)" if len(nodes) > limit else "")


# --check's default tolerance per --precision (max |smelt - onnxruntime| over max
# |onnxruntime|): f32 1e-4. A 16-bit float stores every value between kernels
# rounded to its p significant bits (bf16 8, f16 11): one rounding is off by up to
# 2^-p relative, and the logits before a softmax carry that error times their size
# into its output (light_bvlc_alexnet / light_vgg19 with random weights, bf16:
# logits 0.004-0.006, probabilities 0.035). So a 16-bit float is allowed 16
# roundings' worth, 2^(4-p): bf16 2^-4, f16 2^-7.
CHECK_TOLERANCE = {"f32": 1e-4, "bf16": 2.0**-4, "f16": 2.0**-7}
TOLERANCE_WHY = {
    "f32": "f32",
    "bf16": "bf16: 8 significant bits, 16 roundings of 2^-8 = 2^-4",
    "f16": "f16: 11 significant bits, 16 roundings of 2^-11 = 2^-7",
}


def check_tolerance(given: float | None, precision: str) -> tuple[float, str]:
    """--check's tolerance and how it was chosen: `given` (--tolerance), else the
    precision's (`CHECK_TOLERANCE`)."""
    if given is not None:
        return given, "--tolerance"
    return CHECK_TOLERANCE[precision], TOLERANCE_WHY[precision]


def check_against_onnxruntime(
    path,
    feeds,
    outputs,
    tolerance: float,
    constants: dict | None = None,
    why: str = "",
) -> int:
    """--check of a float model: max |smelt - onnxruntime| / max |onnxruntime| per
    output within `tolerance` (a quantized model: compiler/check_quant.py)."""
    expected = onnxruntime_outputs(path, feeds, constants)
    worst, mismatched = 0.0, False
    for name, value in outputs.items():
        ref = np.asarray(expected[name])
        if not same_kind(name, value, ref):
            mismatched = True
            continue
        scale = max(float(np.max(np.abs(ref))), 1e-30) if ref.size else 1.0
        err = float(np.max(np.abs(value.astype(np.float64) - ref))) / scale if ref.size else 0.0
        worst = max(worst, err)
        print(f"  vs onnxruntime {name}: max relative error {err:.2e}")
    ok = worst <= tolerance and not mismatched
    because = f" for {why}" if why else ""
    print(f"check {'PASSED' if ok else 'FAILED'} (tolerance {tolerance:.3g}{because})")
    return 0 if ok else 2


def check_outputs(
    source, feeds: dict, outputs: dict, tolerance: float | None, precision: str,
    constants: dict | None,
) -> int:  # fmt: skip
    """`--check`: smelt's `outputs` against an oracle's for the model `source` (a
    path or its bytes): in output quantization steps on a quantized model
    (compiler/check_quant.py), else relative to onnxruntime's within the
    tolerance of `--tolerance` or the precision (`check_tolerance`)."""
    # here, not at the top: check_quant imports onnx, which `smelt run FILE.smelt`
    # does not (artifact_cli) unless it checks
    from smelt.compiler.check_quant import check_in_steps, quantized_model

    quantized = quantized_model(source)
    if quantized is not None:  # in output steps, against an exact int8 oracle
        return check_in_steps(
            source, quantized, feeds, outputs, tolerance,
            check_tolerance(None, precision), constants,
        )  # fmt: skip
    bound, why = check_tolerance(tolerance, precision)
    return check_against_onnxruntime(source, feeds, outputs, bound, constants, why)
