"""GPU benchmark: smelt's triton target against torch eager and torch.compile, in one
run on one CUDA device (written for an H200; under 5 minutes there).

    python benchmarks/gpu.py                     # check everything, then time it
    python benchmarks/gpu.py --cases softmax mlp --no-torch-compile

First every case is checked: smelt's output against torch's on the GPU (per-dtype
tolerances). Any mismatch stops the run with exit status 1 before anything is timed.
Then each case is timed with triton.testing.do_bench (smelt replays its CUDA graph;
torch eager and torch.compile run the same computation) and the table prints the
times, smelt's ratio to each peer (below 1: smelt is faster) and the throughput it
achieved: TB/s for memory-bound cases, TFLOP/s for contractions.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))

import torch
import torch.nn.functional as F
from onnx_torch import NoTorchOp, OnnxTorch, rebatch  # noqa: E402

from smelt.compiler import pipelines
from smelt.compiler.driver import import_graph, lower
from smelt.lowering.triton.runtime import TritonProgram
from smelt.universe import make_context

DEVICE = "cuda"
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 5e-2}


class CheckFailed(Exception):
    pass


@dataclass
class Case:
    """One benchmark: smelt's program, a torch function of the same inputs, and
    how much work one run does (bytes moved or flops)."""

    name: str
    program: TritonProgram
    inputs: list[torch.Tensor]
    torch_fn: Callable[..., torch.Tensor]
    bytes_moved: float = 0.0
    flops: float = 0.0
    tolerance: float = 2e-2


# --- graph-level modules for the kernel cases ---------------------------------------


def _t(shape: tuple[int, ...], dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>"


def _program(text: str) -> TritonProgram:
    from xdsl.parser import Parser

    module = Parser(make_context(), text).parse_module()
    lower(module, pipelines.preset("gpu"))
    return TritonProgram(module, DEVICE)


def _onnx_program(model: onnx.ModelProto) -> TritonProgram:
    module = import_graph(model)
    lower(module, pipelines.preset("gpu"))
    return TritonProgram(module, DEVICE)


def _main(args: list[tuple[str, tuple[int, ...], str]], out: tuple, body: str) -> str:
    sig = ", ".join(f"%{n}: {_t(s, d)}" for n, s, d in args)
    names = ", ".join(f'"{n}"' for n, _, _ in args)
    return (
        f"func.func @main({sig}) -> {_t(*out)} attributes {{smelt.input_names = "
        f'[{names}], smelt.output_names = ["y"]}} {{\n{body}\n}}'
    )


def _gelu_ops(x: str, shape: tuple[int, ...], dt: str, prefix: str) -> tuple[str, str]:
    """0.5 * x * (1 + erf(x / sqrt 2)) as graph ops on %x; returns (text, result)."""
    t, s = _t(shape, dt), _t((1,), dt)
    p = prefix
    text = f"""
  %{p}c0 = graph.constant dense<1.41421354> : {s}
  %{p}c1 = graph.constant dense<1.0> : {s}
  %{p}c2 = graph.constant dense<0.5> : {s}
  %{p}0 = graph.div %{x}, %{p}c0 : ({t}, {s}) -> {t}
  %{p}1 = graph.erf %{p}0 : ({t}) -> {t}
  %{p}2 = graph.add %{p}1, %{p}c1 : ({t}, {s}) -> {t}
  %{p}3 = graph.mul %{x}, %{p}2 : ({t}, {t}) -> {t}
  %{p}4 = graph.mul %{p}3, %{p}c2 : ({t}, {s}) -> {t}"""
    return text, f"{p}4"


def torch_gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def gelu_case(n: int = 1 << 26, width: int = 4096) -> Case:
    """gelu(x * w + b), fp16, x of n elements as [n / width, width]."""
    shape, vec = (n // width, width), (width,)
    t, v = _t(shape, "f16"), _t(vec, "f16")
    gelu, y = _gelu_ops("m1", shape, "f16", "g")
    body = f"""
  %m0 = graph.mul %x, %w : ({t}, {v}) -> {t}
  %m1 = graph.add %m0, %b : ({t}, {v}) -> {t}{gelu}
  func.return %{y} : {t}"""
    program = _program(
        _main(
            [("x", shape, "f16"), ("w", vec, "f16"), ("b", vec, "f16")],
            (shape, "f16"),
            body,
        )
    )
    x = torch.randn(shape, device=DEVICE, dtype=torch.float16)
    w = torch.randn(vec, device=DEVICE, dtype=torch.float16)
    b = torch.randn(vec, device=DEVICE, dtype=torch.float16)
    return Case(
        "gelu(x*w+b) fp16 64M", program, [x, w, b],
        lambda x, w, b: torch_gelu(x * w + b), bytes_moved=2 * n * 2,
    )  # fmt: skip


def layernorm_gelu_case(rows: int = 8192, cols: int = 4096) -> Case:
    shape, vec = (rows, cols), (cols,)
    t, v, st = _t(shape, "bf16"), _t(vec, "bf16"), _t((rows, 1), "bf16")
    gelu, y = _gelu_ops("n", shape, "bf16", "g")
    body = f"""
  %n, %mean, %inv = graph.layer_norm %x, %s, %b {{axis = 1 : i64, epsilon = 1.000000e-05 : f32}} : ({t}, {v}, {v}) -> ({t}, {st}, {st}){gelu}
  func.return %{y} : {t}"""
    program = _program(
        _main(
            [("x", shape, "bf16"), ("s", vec, "bf16"), ("b", vec, "bf16")],
            (shape, "bf16"),
            body,
        )
    )
    x = torch.randn(shape, device=DEVICE, dtype=torch.bfloat16)
    s = torch.rand(vec, device=DEVICE, dtype=torch.bfloat16) + 0.5
    b = torch.randn(vec, device=DEVICE, dtype=torch.bfloat16)
    return Case(
        "layernorm+gelu bf16 8192x4096", program, [x, s, b],
        lambda x, s, b: torch_gelu(F.layer_norm(x, (cols,), s, b, 1e-5)),
        bytes_moved=2 * rows * cols * 2, tolerance=TOLERANCE[torch.bfloat16],
    )  # fmt: skip


def softmax_case(rows: int = 16384, cols: int = 4096) -> Case:
    shape = (rows, cols)
    t = _t(shape, "f16")
    body = f"""
  %y = graph.softmax %x {{axis = 1 : i64}} : ({t}) -> {t}
  func.return %y : {t}"""
    program = _program(_main([("x", shape, "f16")], (shape, "f16"), body))
    x = torch.randn(shape, device=DEVICE, dtype=torch.float16)
    return Case(
        "softmax fp16 16384x4096", program, [x],
        lambda x: torch.softmax(x, dim=-1), bytes_moved=2 * rows * cols * 2,
    )  # fmt: skip


def mlp_case(m: int = 8192, d: int = 4096, hidden: int = 16384) -> Case:
    """x @ w1 + b1 -> gelu -> @ w2 + b2, bf16 (weights are inputs). Only on a GPU:
    Triton's interpreter multiplies the bit patterns of bf16 `tl.dot` operands
    (triton-lang/triton#11584; a hand-written bf16 dot is as wrong there)."""
    xs, w1s, w2s = (m, d), (d, hidden), (hidden, d)
    tx, th, ty = _t(xs, "bf16"), _t((m, hidden), "bf16"), _t((m, d), "bf16")
    gelu, g = _gelu_ops("h1", (m, hidden), "bf16", "g")
    body = f"""
  %h0 = graph.matmul %x, %w1 : ({tx}, {_t(w1s, "bf16")}) -> {th}
  %h1 = graph.add %h0, %b1 : ({th}, {_t((hidden,), "bf16")}) -> {th}{gelu}
  %o0 = graph.matmul %{g}, %w2 : ({th}, {_t(w2s, "bf16")}) -> {ty}
  %y = graph.add %o0, %b2 : ({ty}, {_t((d,), "bf16")}) -> {ty}
  func.return %y : {ty}"""
    args = [("x", xs, "bf16"), ("w1", w1s, "bf16"), ("b1", (hidden,), "bf16"),
            ("w2", w2s, "bf16"), ("b2", (d,), "bf16")]  # fmt: skip
    program = _program(_main(args, ((m, d), "bf16"), body))
    bf = torch.bfloat16
    x = torch.randn(xs, device=DEVICE, dtype=bf)
    w1 = torch.randn(w1s, device=DEVICE, dtype=bf) / math.sqrt(d)
    w2 = torch.randn(w2s, device=DEVICE, dtype=bf) / math.sqrt(hidden)
    b1 = torch.randn(hidden, device=DEVICE, dtype=bf) * 0.1
    b2 = torch.randn(d, device=DEVICE, dtype=bf) * 0.1
    return Case(
        "MLP bf16 8192x4096->16384->4096", program, [x, w1, b1, w2, b2],
        lambda x, w1, b1, w2, b2: torch_gelu(x @ w1 + b1) @ w2 + b2,
        flops=2 * 2 * m * d * hidden, tolerance=TOLERANCE[bf],
    )  # fmt: skip


def conv_case(n: int = 64, c: int = 256, hw: int = 56) -> Case:
    """conv3x3(pad 1) + batchnorm + relu, fp16 NCHW; the BN folds into the conv."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((c, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float16)
    bias = (rng.standard_normal(c) * 0.1).astype(np.float16)
    scale = (rng.random(c) + 0.5).astype(np.float16)
    shift = (rng.standard_normal(c) * 0.1).astype(np.float16)
    mean = (rng.standard_normal(c) * 0.1).astype(np.float16)
    var = (rng.random(c) + 0.5).astype(np.float16)
    n_ = helper.make_node
    nodes = [
        n_("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        n_("BatchNormalization", ["c", "s", "sh", "mu", "var"], ["bn"]),
        n_("Relu", ["bn"], ["y"]),
    ]
    inits = [numpy_helper.from_array(a, k) for k, a in
             [("w", w), ("b", bias), ("s", scale), ("sh", shift), ("mu", mean), ("var", var)]]  # fmt: skip
    graph = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [n, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [n, c, hw, hw])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = _onnx_program(model)
    tw = [torch.from_numpy(a).to(DEVICE) for a in (w, bias, scale, shift, mean, var)]
    x = torch.randn((n, c, hw, hw), device=DEVICE, dtype=torch.float16)

    def reference(x):
        y = F.conv2d(x, tw[0], tw[1], padding=1)
        y = F.batch_norm(y, tw[4], tw[5], tw[2], tw[3], False, 0.0, 1e-5)
        return torch.relu(y)

    return Case(
        "conv3x3+bn+relu fp16 64x256x56x56", program, [x], reference,
        flops=2 * n * c * hw * hw * c * 9,
    )  # fmt: skip


def gemm_f16_case(m: int = 8192, n: int = 8192, k: int = 8192) -> Case:
    """A plain fp16 GEMM (both operands inputs): smelt's tl.dot kernel against
    cuBLAS (torch's `a @ b`), the issue's "GEMM >= 90% of cuBLAS" line."""
    ta, tb, ty = _t((m, k), "f16"), _t((k, n), "f16"), _t((m, n), "f16")
    body = f"""
  %y = graph.matmul %a, %b : ({ta}, {tb}) -> {ty}
  func.return %y : {ty}"""
    program = _program(_main([("a", (m, k), "f16"), ("b", (k, n), "f16")],
                             ((m, n), "f16"), body))  # fmt: skip
    a = torch.randn((m, k), device=DEVICE, dtype=torch.float16)
    b = torch.randn((k, n), device=DEVICE, dtype=torch.float16) / math.sqrt(k)
    return Case(
        f"GEMM fp16 {m}x{n}x{k}", program, [a, b], lambda a, b: a @ b,
        flops=2 * m * n * k, tolerance=TOLERANCE[torch.float16],
    )  # fmt: skip


def gemm_int8_case(m: int = 8192, n: int = 4096, k: int = 4096) -> Case:
    """ONNX MatMulInteger, s8 x s8 -> s32 (both operands inputs), against
    torch._int_mm (cuBLASLt's int8 GEMM); integers: must match exactly. Its
    rate column counts int8 operations as FLOP."""
    n_ = helper.make_node
    graph = helper.make_graph(
        [n_("MatMulInteger", ["a", "b"], ["y"])], "int8_gemm",
        [helper.make_tensor_value_info("a", TensorProto.INT8, [m, k]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [k, n])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = _onnx_program(model)
    a = torch.randint(-128, 128, (m, k), device=DEVICE, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), device=DEVICE, dtype=torch.int8)
    return Case(
        f"GEMM int8 {m}x{n}x{k} (s32 out)", program, [a, b], torch._int_mm,
        flops=2 * m * n * k, tolerance=0.0,
    )  # fmt: skip


# --- whole models: the ONNX graph run by torch ops -----------------------------------


def model_case(name: str, model: onnx.ModelProto, flops: float) -> Case:
    program = _onnx_program(model)
    net = OnnxTorch(model, DEVICE)
    inputs = []
    for info in model.graph.input:
        if info.name in net.consts:
            continue
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        inputs.append(torch.randn(shape, device=DEVICE, dtype=torch.float32))
    return Case(
        name, program, inputs, net, flops=flops, tolerance=TOLERANCE[torch.float32]
    )


def resnet_case(batch: int = 32) -> Case:
    from models import light_model_path, random_weights

    # the shipped weights are constant fills: random ones make the check meaningful
    model = rebatch(
        random_weights(onnx.load(light_model_path("light_resnet50"))), batch
    )
    return model_case(
        f"light resnet50 fp32/tf32 batch {batch}", model, 2 * 4.1e9 * batch
    )


def encoder_case(
    batch: int = 32, seq: int = 128, hidden: int = 768, ffn: int = 3072
) -> Case:
    from models import encoder_layer_model

    model = rebatch(encoder_layer_model(seq=seq, hidden=hidden, ffn=ffn), batch)
    flops = batch * (2 * seq * hidden * hidden * 4 + 2 * 2 * seq * seq * hidden
                     + 2 * 2 * seq * hidden * ffn)  # fmt: skip
    return model_case(f"encoder layer fp32/tf32 batch {batch}", model, flops)


CASES = {
    "gelu": gelu_case,
    "layernorm": layernorm_gelu_case,
    "softmax": softmax_case,
    "mlp": mlp_case,
    "conv": conv_case,
    "gemm_f16": gemm_f16_case,
    "gemm_int8": gemm_int8_case,
    "resnet50": resnet_case,
    "encoder": encoder_case,
}


# --- checking and timing -------------------------------------------------------------


def check(case: Case) -> float:
    """max over outputs of max |smelt - torch| / max |torch|; raises CheckFailed
    past the case's tolerance."""
    got_all = [t.clone() for t in case.program.run_torch(case.inputs)]
    with torch.no_grad():
        want_all = case.torch_fn(*case.inputs)
    if isinstance(want_all, torch.Tensor):
        want_all = (want_all,)
    if len(got_all) != len(want_all):
        raise CheckFailed(
            f"{case.name}: {len(got_all)} outputs, torch gives {len(want_all)}"
        )
    worst = 0.0
    for i, (got, want) in enumerate(zip(got_all, want_all)):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise CheckFailed(
                f"{case.name}: output {i} is {got.dtype} {tuple(got.shape)}, torch "
                f"gives {want.dtype} {tuple(want.shape)}"
            )
        if not want.is_floating_point():  # integers: exactly
            wrong = int((got != want).sum())
            if wrong:
                raise CheckFailed(f"{case.name}: output {i} differs in {wrong} elements")
            continue
        got, want = got.float(), want.float()
        if not torch.isfinite(got).all():
            raise CheckFailed(f"{case.name}: output {i} of smelt has NaN or inf")
        err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
        if not err <= case.tolerance:
            raise CheckFailed(
                f"{case.name}: output {i} relative error {err:.3e} > {case.tolerance:g}"
            )
        worst = max(worst, err)
    return worst


def bench_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=200))


def compiled_ms(case: Case, mode: str) -> float:
    """torch.compile of the case's torch function in `mode` ("default", or
    "reduce-overhead": replayed as a CUDA graph), timed after two warm-up calls."""
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(case.torch_fn, mode=mode)
    for _ in range(2):
        compiled(*case.inputs)
    return bench_ms(lambda: compiled(*case.inputs))


def run(names: list[str], with_compile: bool) -> int:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cases = []
    t0 = time.perf_counter()
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print("checking smelt against torch ...")
    for name in names:
        case = CASES[name]()
        err = check(case)
        print(
            f"  ok  {case.name:<38} rel err {err:.2e}  ({len(case.program.launches)} launches)"
        )
        cases.append(case)
    print(f"all {len(cases)} cases match torch ({time.perf_counter() - t0:.0f} s)\n")
    head = (f"{'case':<38} {'smelt ms':>9} {'eager ms':>9} {'compile ms':>10} "
            f"{'graphs ms':>9} {'vs eager':>8} {'vs compile':>10} {'vs graphs':>9} "
            f"{'smelt':>12}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for case in cases:
        with torch.no_grad():
            smelt_ms = bench_ms(case.program.replay)
            eager_ms = bench_ms(lambda c=case: c.torch_fn(*c.inputs))
            compile_ms = graphs_ms = math.nan
            if with_compile:  # default mode, and CUDA graphs as smelt replays one
                compile_ms = compiled_ms(case, "default")
                graphs_ms = compiled_ms(case, "reduce-overhead")
        rate = (
            f"{case.bytes_moved / smelt_ms / 1e9:.2f} TB/s" if case.bytes_moved
            else f"{case.flops / smelt_ms / 1e9:.1f} TFLOP/s"
        )  # fmt: skip
        print(
            f"{case.name:<38} {smelt_ms:>9.3f} {eager_ms:>9.3f} {compile_ms:>10.3f} "
            f"{graphs_ms:>9.3f} {smelt_ms / eager_ms:>8.2f} "
            f"{smelt_ms / compile_ms:>10.2f} {smelt_ms / graphs_ms:>9.2f} {rate:>12}"
        )
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; ratio = smelt time / peer time; "
          "compile = torch.compile default mode, graphs = mode='reduce-overhead' "
          "(CUDA graphs, as smelt replays one)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--no-torch-compile", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py needs a CUDA device (smelt aot checks kernels without one)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        return run(args.cases, not args.no_torch_compile)
    except (CheckFailed, NoTorchOp) as e:
        print(f"\nCHECK FAILED: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
