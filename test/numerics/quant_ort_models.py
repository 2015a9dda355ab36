"""onnxruntime's QDQ models compiled by smelt, against onnxruntime's run of the
same file: the onnx package's 9 light_* models (random weights) and the MLP and
encoder layer of models.py, each quantized by onnxruntime's `quantize_static`
(QDQ format, per-channel int8 weights) with uint8 ("u8": QUInt8 activations,
QInt8 weights) and int8 ("s8": S8S8) activations.

Per model and activation type: the fraction of output elements (every graph
output: the light models' probabilities and logits) within one quantization step
of onnxruntime's result, run unoptimized (ORT_DISABLE_ALL: the QDQ graph as
written, in float: the fair oracle of its semantics) and with onnxruntime's default
optimizations (its own QDQ fusions into integer kernels, which round differently),
the most steps off, how far onnxruntime's two runs are from each other, how many
convs / gemms / matmuls became integer kernels and how many stayed float, and
smelt's compile time at O2 (a busy 2-core machine: noisy).

The step of an output: the scale of the DequantizeLinear that makes it, else the
scale of the last QuantizeLinear before it (walking back through the producers'
inputs, nearest first); for a Softmax output that is the logits' step (a softmax
moves by at most its input's change).

    python test/numerics/quant_ort_models.py [--write] [MODEL ...] [--act u8 s8]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(__file__))

import models  # noqa: E402
from int8_oracle import ort_outputs as ort_run  # noqa: E402

ACTS = ("u8", "s8")
LIGHT = [
    "light_resnet50", "light_vgg19", "light_densenet121", "light_inception_v1",
    "light_inception_v2", "light_squeezenet", "light_shufflenet",
    "light_bvlc_alexnet", "light_zfnet512",
]  # fmt: skip
MODELS = [*LIGHT, "mlp", "encoder"]
CALIBRATION = 2  # random samples
CONTRACTIONS = ("graph.conv2d", "graph.matmul", "graph.gemm", "quant.qgemm")


def float_model(name: str) -> onnx.ModelProto:
    """The fp32 model `name` at opset >= 13, weights as constants (seed 0)."""
    from smelt.quantize import upgrade_for_quantization

    if name == "mlp":
        return models.mlp_model()
    if name == "encoder":
        return models.encoder_layer_model()
    model = models.random_weights(onnx.load(models.light_model_path(name)), seed=0)
    return upgrade_for_quantization(model)


def input_batches(model: onnx.ModelProto, n: int, seed: int) -> list[dict]:
    """`n` feeds of standard-normal inputs (a dimension without a size: 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        feeds = {}
        for info in models.real_inputs(model):
            shape = [d.dim_value or 1 for d in info.type.tensor_type.shape.dim]
            feeds[info.name] = rng.standard_normal(shape).astype(np.float32)
        out.append(feeds)
    return out


def ort_quantize(
    model: onnx.ModelProto, calib: list[dict], act: str, reduce_range: bool = False
):
    """`model` through onnxruntime's quantize_static (QDQ, per channel, int8
    weights; `act` activations: u8 = QUInt8, s8 = QInt8; `reduce_range`: 7-bit
    weights, what onnxruntime advises for CPUs without VNNI)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    logging.getLogger().setLevel(logging.ERROR)  # its pre-processing advice
    activation = {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}[act]
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, activation_type=activation,
                        weight_type=QuantType.QInt8,
                        reduce_range=reduce_range)  # fmt: skip
        return onnx.load(dst)


def output_steps(model: onnx.ModelProto) -> dict[str, float]:
    """Each graph output's quantization step (see the module docstring)."""
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}

    def scale(node: onnx.NodeProto) -> float:
        return float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0])

    steps = {}
    for out in model.graph.output:
        frontier, seen = [out.name], set()
        while frontier:
            node = producer.get(frontier.pop(0))
            if node is None or node.name in seen and node.name:
                continue
            seen.add(node.name)
            if node.op_type in ("DequantizeLinear", "QuantizeLinear"):
                steps[out.name] = scale(node)
                break
            frontier.extend(i for i in node.input if i and i not in inits)
        else:
            raise ValueError(f"no QuantizeLinear before output '{out.name}'")
    return steps


def within(ours: list, theirs: list, steps: list[float]) -> tuple[float, float]:
    """(fraction of all output elements within one step, the most steps off)."""
    hits, total, worst = 0, 0, 0.0
    for a, b, step in zip(ours, theirs, steps):
        off = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) / step
        hits += int(np.count_nonzero(off <= 1.001))
        total += off.size
        worst = max(worst, float(off.max(initial=0)))
    return hits / max(total, 1), worst


def contractions(model: onnx.ModelProto) -> tuple[int, int]:
    """(integer, float) convs / gemms / matmuls after the O2 preset's graph passes
    up to fusion: an op whose first operand is an integer tensor is integer."""
    from xdsl.dialects.builtin import IntegerType

    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.pipelines import preset

    module = import_graph(model)
    lower(module, preset("cpu", "O2").split(",graph-fuse")[0])
    ints = floats = 0
    for op in module.walk():
        if op.name in CONTRACTIONS:
            if isinstance(op.operands[0].type.element_type, IntegerType):
                ints += 1
            else:
                floats += 1
    return ints, floats


@dataclass
class Row:
    model: str
    act: str
    unopt: tuple[float, float] | None = None  # (fraction within, max steps)
    default: tuple[float, float] | None = None
    ort_self: tuple[float, float] | None = None  # ORT default vs ORT unoptimized
    kernels: tuple[int, int] | None = None  # (integer, float)
    compile_s: float = 0.0
    error: str = ""

    def cells(self) -> str:
        if self.error:
            return f"| {self.model} | {self.act} | {self.error} | | | | | | | | |"

        def pct(r):
            return f"{100 * r[0]:.3f}% | {r[1]:.2f}"

        return (f"| {self.model} | {self.act} | {pct(self.unopt)} "
                f"| {pct(self.default)} | {pct(self.ort_self)} "
                f"| {self.kernels[0]} | {self.kernels[1]} "
                f"| {self.compile_s:.1f} |")  # fmt: skip


HEADER = (
    "| model | act | within 1 step (ORT unopt) | max steps | within 1 step (ORT "
    "default) | max steps | ORT default vs unopt | max steps "
    "| integer convs/gemms | float | compile s (O2) |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def quantized_case(
    name: str, act: str, reduce_range: bool = False
) -> tuple[onnx.ModelProto, dict]:
    """(onnxruntime's QDQ model of `name`, a test feed): calibration seed 1, feed
    seed 99; `reduce_range`: 7-bit weights (see `ort_quantize`)."""
    fp32 = float_model(name)
    calib = input_batches(fp32, CALIBRATION, seed=1)
    qmodel = ort_quantize(fp32, calib, act, reduce_range)
    return qmodel, input_batches(fp32, 1, seed=99)[0]


def run_case(name: str, act: str) -> Row:
    import smelt
    from smelt.errors import SmeltError

    row = Row(name, act)
    qmodel, feeds = quantized_case(name, act)
    steps = output_steps(qmodel)
    t0 = time.perf_counter()
    try:
        compiled = smelt.compile(qmodel, "cpu", level="O2")
        row.compile_s = time.perf_counter() - t0
        got = compiled.run(feeds)
    except SmeltError as e:
        row.error = f"refused: {str(e)[:120]}"
        return row
    except Exception as e:  # noqa: BLE001 (a crash: reported in the table)
        traceback.print_exc()
        row.error = f"CRASH: {type(e).__name__}: {str(e)[:100]}"
        return row
    names = [o.name for o in qmodel.graph.output]
    ours = [got[n] for n in names]
    order = [steps[n] for n in names]
    unopt, default = ort_run(qmodel, feeds, False), ort_run(qmodel, feeds, True)
    row.unopt, row.default = within(ours, unopt, order), within(ours, default, order)
    row.ort_self = within(default, unopt, order)
    row.kernels = contractions(qmodel)
    return row


def write_table(rows: dict[tuple[str, str], str], command: str) -> str:
    """Merges `rows` into quant_ort_models.md (a row per model and activation
    type, in MODELS order; rows of other models kept) and returns its path."""
    path = os.path.join(os.path.dirname(__file__), "quant_ort_models.md")
    kept: dict[tuple[str, str], str] = {}
    commands: list[str] = []
    if os.path.exists(path):
        for line in open(path).read().splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 3 and cells[1] in MODELS and cells[2] in ACTS:
                kept[(cells[1], cells[2])] = line
            elif line.startswith("    python "):
                commands.append(line.strip())
    kept.update(rows)
    if command not in commands:
        commands.append(command)
    order = [(m, a) for m in MODELS for a in ACTS if (m, a) in kept]
    doc = __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0]
    with open(path, "w") as f:
        f.write("# onnxruntime's QDQ models: smelt against onnxruntime\n\n"
                f"{doc}\n\nRows written by (each run merges its rows):\n\n"
                + "".join(f"    {c}\n" for c in commands)
                + f"\n{HEADER}\n" + "\n".join(kept[k] for k in order) + "\n")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--act", nargs="+", default=list(ACTS), choices=ACTS)
    parser.add_argument("--write", action="store_true", help="merge into the .md")
    args = parser.parse_args(argv)
    words = sys.argv[1:] if argv is None else argv
    command = " ".join(["python test/numerics/quant_ort_models.py", *words])
    print(HEADER, flush=True)
    for name in args.models:
        for act in args.act:
            row = run_case(name, act).cells()
            print(row, flush=True)
            if args.write:  # row by row: a long run that stops keeps its rows
                write_table({(name, act): row}, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
