"""`smelt run --check` of a quantized (QDQ) model: an oracle exact on this host,
and the comparison in output quantization steps.

A QDQ model's outputs are only defined to within a step of their last quantizer:
two correct int8 runs that round one accumulator differently land one step apart,
which is far more than --check's float tolerance (1e-4 relative). So the check
counts output elements within one step (1.001, for the float rounding of the
step itself) and passes when at least 99.9% are, as the suite's quant tests do.

The oracle (see test/numerics/int8_oracle.py for the measurements):
- onnxruntime's default run (its QDQ fusions into int8 kernels) when those are
  exact on this machine: the host has VNNI (`vpdpbusd`), or every constant int8
  weight of a contraction fits 7 bits (|w| <= 64), so that the two u8·s8 products
  `vpmaddubsw` adds in 16 bits cannot saturate (2 · 255 · 64 = 32,640 < 2^15);
- else, for a graph with integer contractions of its own (MatMulInteger,
  ConvInteger, QLinearConv, QLinearMatMul: int8 kernels even unoptimized), onnx's
  reference evaluator (numpy's exact int32; slow on large convs);
- else onnxruntime with graph optimizations off (`ORT_DISABLE_ALL`): the QDQ
  graph as written, dequantize → float op → quantize, no int8 kernel.
onnxruntime's kernels follow the machine it runs on, not `--cpu`, so the choice
reads the real host (`cpu_spec.host()`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from smelt.compiler.cli_inputs import onnx_load
from smelt.compiler.cli_oracle import onnxruntime_outputs, oracle_feeds, same_kind
from smelt.errors import SmeltError

WITHIN = 1.001
"""One output step, and the float rounding of the step itself."""
MIN_FRACTION = 0.999
"""The share of output elements that must be within a step."""
VNNI = ("avx512vnni", "avxvnni")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
WEIGHT_OPERAND = {
    "Conv": 1, "ConvTranspose": 1, "MatMul": 1, "Gemm": 1,
    "MatMulInteger": 1, "ConvInteger": 1, "QLinearConv": 3, "QLinearMatMul": 3,
}  # fmt: skip
"""The operand onnxruntime's u8·s8 kernels read as the signed 8-bit side."""
INTEGER_CONTRACTIONS = ("MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul")
LAYOUT_OPS = ("Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
"""Ops a weight may pass through between its DequantizeLinear and its use."""


@dataclass(frozen=True)
class Oracle:
    """Which run to compare with, and why it is exact here."""

    kind: str  # "onnxruntime", "onnxruntime-unoptimized" or "onnx-reference"
    why: str

    @property
    def name(self) -> str:
        reference = self.kind == "onnx-reference"
        return "onnx's reference evaluator" if reference else "onnxruntime"

    def describe(self) -> str:
        return f"{self.name} ({self.why})"


def quantized_model(source: str | bytes) -> onnx.ModelProto | None:
    """The model at `source` (a path or its bytes) when it has QuantizeLinear /
    DequantizeLinear nodes, else None."""
    try:
        model = onnx_load(source, external_data=False)
    except Exception:  # noqa: BLE001 (unreadable: the float check reports it)
        return None
    if not any(n.op_type in QDQ_OPS for n in model.graph.node):
        return None
    return model if isinstance(source, bytes) else onnx_load(source)


def _constants(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    found = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    found[node.output[0]] = attr.t
    return found


def output_steps(model: onnx.ModelProto) -> dict[str, float | None]:
    """Each graph output's quantization step: the scale of the DequantizeLinear
    that makes it, else of the nearest QuantizeLinear / DequantizeLinear before it
    (producers' inputs, nearest first; a weight's DequantizeLinear is no output's
    step). A Softmax output gets its logits' step: a softmax moves by at most its
    input's change. A per-channel scale counts as its largest; an integer output
    (a QuantizeLinear's) has step 1; None: no quantizer before the output."""
    consts = _constants(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    integer = {
        o.name for o in model.graph.output
        if o.type.tensor_type.elem_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    }  # fmt: skip
    steps: dict[str, float | None] = {}
    for out in model.graph.output:
        steps[out.name] = 1.0 if out.name in integer else None
        frontier, seen = [out.name], set()
        while frontier and out.name not in integer:
            name = frontier.pop(0)
            node = producer.get(name)
            if node is None or name in seen:
                continue
            seen.add(name)
            is_weight = node.op_type == "DequantizeLinear" and node.input[0] in consts
            if node.op_type in QDQ_OPS and not is_weight and node.input[1] in consts:
                scale = numpy_helper.to_array(consts[node.input[1]])
                steps[out.name] = float(np.max(np.abs(scale)))
                break
            frontier.extend(i for i in node.input if i and i not in consts)
    return steps


def _weight(model: onnx.ModelProto, name: str) -> np.ndarray | None:
    """The stored integer weight behind operand `name` (through layout ops and a
    DequantizeLinear), or None when it is computed at run time."""
    consts = _constants(model)
    producer = {o: n for n in model.graph.node for o in n.output}
    while name not in consts:
        node = producer.get(name)
        if node is None:
            return None
        if node.op_type not in (*LAYOUT_OPS, "DequantizeLinear"):
            return None
        name = node.input[0]
    return numpy_helper.to_array(consts[name])


def weights_fit_7_bits(model: onnx.ModelProto) -> bool:
    """Whether every contraction's quantized weight operand is a constant int8
    tensor with |w| <= 64; a uint8 or run-time quantized operand is not known to
    be exact on onnxruntime's kernels, so it answers False."""
    producer = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        index = WEIGHT_OPERAND.get(node.op_type)
        if index is None or index >= len(node.input):
            continue
        operand = node.input[index]
        source = producer.get(operand)
        while source is not None and source.op_type in LAYOUT_OPS:
            source = producer.get(source.input[0])
        quantized = node.op_type in INTEGER_CONTRACTIONS or (
            source is not None and source.op_type == "DequantizeLinear"
        )
        if not quantized:
            continue  # a float operand: no int8 kernel reads it
        w = _weight(model, operand)
        if w is None or w.dtype != np.int8:
            return False
        if w.size and int(np.max(np.abs(w.astype(np.int32)))) > 64:
            return False
    return True


def host_has_vnni() -> bool:
    """Whether this machine (onnxruntime's kernels follow it, not --cpu) has VNNI."""
    from smelt.targets.cpu_spec import host

    return any(f in host().features for f in VNNI)


def choose_oracle(model: onnx.ModelProto) -> Oracle:
    """The run of `model` that is exact on this host (module docstring)."""
    if host_has_vnni():
        return Oracle("onnxruntime", "its int8 kernels: exact on this host with VNNI")
    if weights_fit_7_bits(model):
        return Oracle(
            "onnxruntime",
            "its int8 kernels: exact without VNNI since every int8 weight fits 7 bits",
        )
    if any(n.op_type in INTEGER_CONTRACTIONS for n in model.graph.node):
        return Oracle(
            "onnx-reference",
            "exact integer numpy: onnxruntime's int8 kernels are not exact on this "
            "host without VNNI",
        )
    return Oracle(
        "onnxruntime-unoptimized",
        "QDQ graph as written: int8 kernels are not exact on this host without VNNI",
    )


def oracle_outputs(
    oracle: Oracle,
    source: str | bytes,
    model: onnx.ModelProto,
    feeds: dict,
    constants: dict | None,
) -> dict[str, np.ndarray]:
    """The oracle's outputs by name."""
    if oracle.kind == "onnx-reference":
        from onnx.reference import ReferenceEvaluator

        names = [o.name for o in model.graph.output]
        full = oracle_feeds(source, feeds, constants)
        got = ReferenceEvaluator(_reference_opset(model)).run(None, full)
        return {n: np.asarray(v) for n, v in zip(names, got)}
    optimized = oracle.kind == "onnxruntime"
    return onnxruntime_outputs(source, feeds, constants, optimized=optimized)


def _reference_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` at opset >= 19 (onnx's evaluator has no QuantizeLinear /
    DequantizeLinear before it), through onnx's version converter."""
    version = next(
        (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0
    )
    if version >= 19:
        return model
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, 19)
    except Exception as e:  # noqa: BLE001 (the converter's own errors vary)
        raise SmeltError(
            f"--check: this host has no VNNI, so onnxruntime's int8 kernels are no "
            f"exact oracle for this model, and onnx's reference evaluator needs it at "
            f"opset 19, which onnx could not convert it to ({e}); check it on a host "
            f"with VNNI"
        ) from None


def check_in_steps(
    source: str | bytes,
    model: onnx.ModelProto,
    feeds: dict,
    outputs: dict,
    steps_allowed: float | None = None,
    float_tolerance: tuple[float, str] = (1e-4, "f32"),
    constants: dict | None = None,
) -> int:
    """--check of the QDQ `model` (read from `source`): prints per output the share
    within `steps_allowed` output steps (default 1, --tolerance) of the oracle and
    the worst; an output without a quantizer before it gets the float check
    (`float_tolerance`: bound, why). Returns 0 when it passes, else 2."""
    allowed = 1.0 if steps_allowed is None else steps_allowed
    if allowed <= 0:
        raise SmeltError("--tolerance on a quantized model counts output steps: > 0")
    oracle = choose_oracle(model)
    expected = oracle_outputs(oracle, source, model, feeds, constants)
    steps = output_steps(model)
    hits = total = 0
    worst = 0.0
    ok = True
    shown = []
    for name, value in outputs.items():
        ref = np.asarray(expected[name])
        if not same_kind(name, value, ref):
            ok = False
            continue
        diff = np.abs(value.astype(np.float64) - ref.astype(np.float64))
        step = steps.get(name)
        if step is None or step <= 0:
            scale = max(float(np.max(np.abs(ref), initial=0.0)), 1e-30)
            err = float(np.max(diff, initial=0.0)) / scale
            ok = ok and err <= float_tolerance[0]
            print(
                f"  vs {oracle.name} {name}: no quantizer before it: max relative error "
                f"{err:.2e} (tolerance {float_tolerance[0]:.3g} for "
                f"{float_tolerance[1]})"
            )
            continue
        off = diff / step
        near = int(np.count_nonzero(off <= allowed * WITHIN))
        far = float(np.max(off, initial=0.0))
        hits, total, worst = hits + near, total + off.size, max(worst, far)
        shown.append(f"{step:.4g}")
        print(
            f"  vs {oracle.name} {name}: {near / max(off.size, 1):.2%} of {off.size} within "
            f"{allowed:g} step ({step:.4g}), worst {far:.2f} steps"
        )
    fraction = hits / total if total else 1.0
    ok = ok and fraction >= MIN_FRACTION
    unit = "output step" if allowed == 1 else "output steps"
    of = f" ({', '.join(shown)})" if shown else ""
    print(
        f"check {'PASSED' if ok else 'FAILED'}: {fraction:.2%} of output elements "
        f"within {allowed:g} {unit}{of} of {oracle.describe()}; needs "
        f"{MIN_FRACTION:.1%}, worst {worst:.2f} steps"
    )
    return 0 if ok else 2
