"""Masked vector tails against scalar tails: the same smelt build of each model
with `loop-vectorize{tail=scalar}` (the preset's default) and with
`loop-vectorize{tail=auto}` (masked where the CPU has mask registers), in one
process: paired run-time ratio (median over alternating blocks, see
benchmarks/cpu.py `compare_ms`), compile seconds and LLVM IR size of each.

    python benchmarks/masked_tails.py --repeat 24 --threads 1
    python benchmarks/masked_tails.py --cases light_shufflenet odd_conv

A ratio below 1: masked tails are faster.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
from cpu import compare_ms  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "test", "numerics"))
from models import light_inputs, light_model_path, random_weights  # noqa: E402

import smelt  # noqa: E402
from smelt.compiler import pipelines  # noqa: E402

MODELS = [
    "light_shufflenet", "light_inception_v1", "light_squeezenet",
    "light_densenet121", "light_resnet50", "odd_conv", "odd_mlp",
]  # fmt: skip


def odd_conv() -> onnx.ModelProto:
    """Three 3x3 convs of 24, 40 and 17 output channels on 28x28 (none a multiple
    of 16 f32 lanes)."""
    rng = np.random.default_rng(0)
    nodes, inits, c, x = [], [], 3, "x"
    for k, cout in enumerate([24, 40, 17]):
        w = (rng.standard_normal((cout, c, 3, 3)) * 0.2).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], pads=[1] * 4))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        x, c = f"r{k}", cout
    return _model(nodes, [1, 3, 28, 28], x, [1, c, 28, 28], inits)


def odd_mlp() -> onnx.ModelProto:
    """x[64, 100] @ W[100, 200] @ W[200, 31]: odd widths, batch 64."""
    rng = np.random.default_rng(1)
    shapes = [(100, 200), (200, 31)]
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.1,
             f"w{k}") for k, s in enumerate(shapes)]  # fmt: skip
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["h"]),
        helper.make_node("Tanh", ["h"], ["t"]),
        helper.make_node("MatMul", ["t", "w1"], ["y"]),
    ]
    return _model(nodes, [64, 100], "y", [64, 31], inits)


def _model(nodes, in_shape, out, out_shape, inits) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def case(name: str):
    if name in ("odd_conv", "odd_mlp"):
        m = globals()[name]()
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        return m, {"x": x}
    m = random_weights(onnx.load(light_model_path(name)), seed=0)
    return m, light_inputs(m)


def build(model, threads: int, cpu: str, tail: str):
    spec = pipelines.preset("cpu", "O3", threads=threads, cpu=cpu)
    if tail:
        assert "loop-vectorize," in spec
        spec = spec.replace("loop-vectorize,", f"loop-vectorize{{tail={tail}}},")
    t0 = time.perf_counter()
    compiled = smelt.compile(model, "cpu", pipeline=spec, cpu=cpu)
    return compiled, time.perf_counter() - t0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", nargs="*", default=MODELS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cpu", default="host")
    parser.add_argument("--repeat", type=int, default=24)
    args = parser.parse_args(argv)
    print(f"{'case':22} {'scalar ms':>9} {'masked ms':>9} {'paired':>7} "
          f"{'compile s sc/ma':>16} {'max diff':>9}")  # fmt: skip
    build(odd_mlp(), args.threads, args.cpu, "auto")  # warm-up: imports, LLVM
    for name in args.cases:
        model, feeds = case(name)
        # compile seconds: the better of two builds each, in the order s m m s
        scalar, cs = build(model, args.threads, args.cpu, "scalar")
        masked, cm = build(model, args.threads, args.cpu, "auto")
        cm = min(cm, build(model, args.threads, args.cpu, "auto")[1])
        cs = min(cs, build(model, args.threads, args.cpu, "scalar")[1])
        a, b = scalar.run(feeds), masked.run(feeds)
        diff = max(float(np.max(np.abs(a[k] - b[k]), initial=0)) for k in a)
        s_ms, m_ms, paired = compare_ms(
            lambda: scalar.run(feeds), lambda: masked.run(feeds), args.repeat, 2
        )
        print(f"{name:22} {s_ms:9.2f} {m_ms:9.2f} {paired:7.3f} "
              f"{cs:7.1f} / {cm:6.1f} {diff:9.2e}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
