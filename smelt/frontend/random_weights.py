"""Seeded random weights for an ONNX model: the light_* models in the onnx package
ship constant fills (their outputs are nearly uniform, so a check on them proves
little); with these weights their outputs carry information. Used by `smelt run
--random-weights`, the benchmarks and the tests."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def with_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` that also outputs the input of each Softmax that makes a
    graph output (the logits: well-conditioned where the probabilities are not)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    outputs = {o.name for o in m.graph.output}
    for node in m.graph.node:
        if node.op_type == "Softmax" and node.output[0] in outputs:
            m.graph.output.append(helper.make_empty_tensor_value_info(node.input[0]))
    for o in m.graph.output:
        if not o.type.HasField("tensor_type"):
            o.type.tensor_type.elem_type = TensorProto.FLOAT
    return m


def _consumers(model: onnx.ModelProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    users: dict[str, list] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            users.setdefault(name, []).append((node, i))
    return users


def _role(name: str, users: dict) -> str:
    """How a weight is used: "scale" (must stay near 1), "matrix" (with its fan-in
    axis) or "shift"; follows Unsqueeze/Reshape chains to the real consumer."""
    for node, i in users.get(name, []):
        if node.op_type in ("Unsqueeze", "Reshape", "Identity", "Squeeze") and i == 0:
            return _role(node.output[0], users)
        if node.op_type == "BatchNormalization":
            return "scale" if i in (1, 4) else "shift"
        if node.op_type in ("Mul", "LayerNormalization") and i != 2:
            return "scale"
        if node.op_type == "Gemm" and i == 1:
            transposed = any(a.name == "transB" and a.i for a in node.attribute)
            return "matrix1" if transposed else "matrix0"
        if node.op_type == "MatMul" and i == 1:
            return "matrix0"
        if node.op_type == "Conv" and i == 1:
            return "matrix1"
    return "shift"


def _random_array(shape, role: str, rng: np.random.Generator) -> np.ndarray:
    """Uniform weights: positive for scales, He-scaled for matrices, small shifts."""
    if role.startswith("matrix") and len(shape) >= 2:
        fan_in = shape[0] if role == "matrix0" else math.prod(shape[1:])
        std = math.sqrt(2.0 / max(fan_in, 1))  # He init keeps deep nets in range
    else:
        std = 0.1
    a = rng.random(shape, np.float32)  # uniform in [0, 1), scaled in place
    if role == "scale":  # in [0.25, 0.75): deep residual nets stay in range
        a *= np.float32(0.5)
        a += np.float32(0.25)
    else:
        a -= np.float32(0.5)
        a *= np.float32(std * math.sqrt(12))  # the variance of U(-1/2, 1/2) is 1/12
    return a


def random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of `model` whose float weights (initializers and ConstantOfShape fills
    of a constant shape) are random initializers of the same shapes; BatchNorm
    scale/var and other multiplicative weights stay positive; the pre-softmax logits
    are an extra output (see `with_logits`)."""
    rng = np.random.default_rng(seed)
    m = with_logits(model)
    users = _consumers(m)
    inits = {t.name: t for t in m.graph.initializer}
    weights: dict[str, np.ndarray] = {}
    for t in m.graph.initializer:
        if t.data_type == TensorProto.FLOAT and t.name in users:
            weights[t.name] = _random_array(tuple(t.dims), _role(t.name, users), rng)
    kept_nodes = []
    for node in m.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(numpy_helper.to_array(inits[node.input[0]]).astype(int))
            name = node.output[0]
            weights[name] = _random_array(shape, _role(name, users), rng)
        else:
            kept_nodes.append(node)
    used = {n for node in kept_nodes for n in node.input}
    keep = [
        t for t in m.graph.initializer
        if t.name not in weights and t.name in used
    ]  # fmt: skip
    del m.graph.node[:]
    m.graph.node.extend(kept_nodes)
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    for name, array in weights.items():
        t = m.graph.initializer.add()  # filled in place: no copy of a big proto
        t.name, t.data_type = name, TensorProto.FLOAT
        t.dims.extend(array.shape)
        t.raw_data = array.tobytes()
    graph_inputs = [i for i in m.graph.input if i.name in used or i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(graph_inputs)
    return m
