"""An ONNX graph run with torch ops (the ops of the light CNNs and the encoder
layer), the torch peer of `benchmarks/gpu.py`: eager, and what torch.compile
compiles; shape subgraphs run on Python ints, so torch.compile sees static code."""

from __future__ import annotations

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper


class NoTorchOp(Exception):
    """The graph has an op this runner does not know."""


def rebatch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy with batch `batch`: input/output dim 0 and Reshape shapes that fix 1."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name: t for t in m.graph.initializer}
    for v in list(m.graph.input) + list(m.graph.output):
        dims = v.type.tensor_type.shape.dim
        if v.name not in inits and len(dims):
            dims[0].ClearField("dim_param")
            dims[0].dim_value = batch
    del m.graph.value_info[:]
    for node in m.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            t = inits[node.input[1]]
            shape = numpy_helper.to_array(t).astype(np.int64).copy()
            if shape.size and shape[0] == 1:
                shape[0] = batch
                t.CopyFrom(numpy_helper.from_array(shape, t.name))
    return m


class OnnxTorch(torch.nn.Module):
    """Runs an ONNX graph with torch ops (the ops of the light CNNs and the encoder
    layer); shape subgraphs run on Python ints, so torch.compile sees static code."""

    def __init__(self, model: onnx.ModelProto, device: str = "cuda"):
        super().__init__()
        self.device = device
        opset = next((o.version for o in model.opset_import
                      if o.domain in ("", "ai.onnx")), 1)  # fmt: skip
        self.steps = [
            (node.op_type, list(node.input), list(node.output),
             {"_opset": opset, **{a.name: _attribute(a) for a in node.attribute}})
            for node in model.graph.node
        ]  # fmt: skip
        self.consts = {}
        for t in model.graph.initializer:
            a = numpy_helper.to_array(t)
            self.consts[t.name] = (
                a.tolist()
                if a.dtype.kind == "i"
                else torch.from_numpy(a.copy()).to(device)
            )
        inits = set(self.consts)
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]

    def forward(self, *xs):
        env = dict(self.consts)
        env.update(zip(self.input_names, xs))
        for op, inputs, outputs, attrs in self.steps:
            out = _run_node(op, [env[i] if i else None for i in inputs], attrs,
                            self.device)
            env[outputs[0]] = out
        return tuple(env[name] for name in self.output_names)


def _attribute(a: onnx.AttributeProto):
    """Plain Python values (ints, floats, lists, strings), not protobuf objects."""
    value = helper.get_attribute_value(a)
    if isinstance(value, onnx.TensorProto):
        return value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list | tuple) or hasattr(value, "__iter__"):
        return [v for v in value]
    return value


def _run_node(op: str, x: list, a: dict, device: str):
    if op == "Conv":
        p = a.get("pads", [0, 0, 0, 0])
        return F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, a.get("strides", 1),
                        (p[0], p[1]), a.get("dilations", 1), a.get("group", 1))  # fmt: skip
    if op == "BatchNormalization":
        return F.batch_norm(
            x[0], x[3], x[4], x[1], x[2], False, 0.0, a.get("epsilon", 1e-5)
        )
    if op == "Relu":
        return torch.relu(x[0])
    if op in ("MaxPool", "AveragePool"):
        k, p = a["kernel_shape"], a.get("pads", [0, 0, 0, 0])
        s = a.get("strides", k)
        if op == "MaxPool":
            return F.max_pool2d(x[0], k, s, (p[0], p[1]))
        return F.avg_pool2d(
            x[0],
            k,
            s,
            (p[0], p[1]),
            count_include_pad=bool(a.get("count_include_pad", 0)),
        )
    if op == "GlobalAveragePool":
        return x[0].mean(dim=(2, 3), keepdim=True)
    if op in ("Add", "Sub", "Mul", "Div"):
        fn = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[
            op
        ]
        return fn(x[0], x[1])
    if op == "MatMul":
        return x[0] @ x[1]
    if op == "Gemm":
        m1 = x[0].T if a.get("transA") else x[0]
        m2 = x[1].T if a.get("transB") else x[1]
        y = a.get("alpha", 1.0) * (m1 @ m2)
        return y + a.get("beta", 1.0) * x[2] if len(x) > 2 else y
    if op == "Softmax":
        if a["_opset"] >= 13:
            return torch.softmax(x[0], a.get("axis", -1))
        # before opset 13: over all the dims from `axis` (default 1) on, flattened
        axis = a.get("axis", 1) % x[0].dim()
        flat = x[0].reshape(*x[0].shape[:axis], -1)
        return torch.softmax(flat, -1).reshape(x[0].shape)
    if op == "Erf":
        return torch.erf(x[0])
    if op == "Transpose":
        return x[0].permute(*a["perm"])
    if op == "Reshape":
        shape = [int(d) for d in x[1]]
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return x[0].reshape(shape)
    if op == "Flatten":
        return x[0].flatten(a.get("axis", 1))
    if op == "Shape":
        return list(x[0].shape)
    if op == "Gather":
        return x[0][x[1]] if isinstance(x[1], int) else [x[0][i] for i in x[1]]
    if op == "Unsqueeze":
        return [x[0]] if isinstance(x[0], int) else x[0].unsqueeze(x[1][0])
    if op == "Concat":
        if isinstance(x[0], list):
            return [d for part in x for d in part]
        return torch.cat(x, a["axis"])
    if op == "LayerNormalization":
        return F.layer_norm(
            x[0], x[0].shape[a.get("axis", -1) :], x[1], x[2], a.get("epsilon", 1e-5)
        )
    if op == "Sum":
        return sum(x[1:], x[0])
    if op == "ConstantOfShape":
        value = (
            numpy_helper.to_array(a["value"])
            if "value" in a
            else np.zeros(1, np.float32)
        )
        return torch.full(
            [int(d) for d in x[0]], float(value.reshape(-1)[0]), device=device
        )
    if op in ("Dropout", "Identity"):
        return x[0]
    if op == "LRN":
        return F.local_response_norm(
            x[0],
            a["size"],
            a.get("alpha", 1e-4),
            a.get("beta", 0.75),
            a.get("bias", 1.0),
        )
    raise NoTorchOp(f"benchmarks/onnx_torch.py: no torch version of ONNX op {op}")
