"""Graph inputs fixed to values by the user (`constants={"sr": 16000}`, `--constant
sr=16000`): they become initializers before import, so the If conditions and the
shapes that depend on them fold; and which inputs decide a shape (`SHAPE_OPERANDS`),
so a caller that has the values (the ONNX backend API, the conformance harness)
knows which to fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from smelt.errors import SmeltError

# smelt compiles for static shapes: an operand that decides a shape (Reshape's shape,
# Slice's starts, a reduction's axes, ...) must be known at compile time. A caller
# that feeds one as a graph input fixes that input to its value (`constants=`, as a
# user would with a real model); every other input stays a run-time input.
SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Slice": (1, 2, 3, 4),
    "Pad": (1, 3),
    "Split": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "ReduceMean": (1,),
    "ReduceSum": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "TopK": (1,),
    "OneHot": (1,),
    "Range": (0, 1, 2),
    "AffineGrid": (1,),  # the output grid's size
    "Loop": (0, 1),  # trip count and condition: the scan outputs' length
    "DFT": (1, 2),  # dft_length and (opset 20) axis
    "STFT": (1, 3),  # frame_step and frame_length: the frames and bins
    "CenterCropPad": (1,),  # the output shape
    "HannWindow": (0,),  # the window's length
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
    "Col2Im": (1, 2),  # image_shape and block_shape
    "MaxUnpool": (2,),  # output_shape
    "MelWeightMatrix": (0, 1),  # num_mel_bins and dft_length
}
# Ops whose outputs do not depend on their inputs' values, only on their shapes.
_SHAPE_ONLY = ("Shape", "Size")


def shape_inputs(model: onnx.ModelProto) -> set[str]:
    """Names of the graph inputs whose values reach a shape-deciding operand
    (`SHAPE_OPERANDS`), directly or through the nodes that compute it (an op's
    function body written out computes Pad's pads from a CenterCropPad's shape
    input), subgraphs included: an If's or a Loop's outputs come from its
    branches' or body's outputs. A Shape or Size node passes on no values."""
    nodes = list(_nodes(model.graph))
    producer = {o: n for n in nodes for o in n.output if o}
    stack = [
        node.input[i]
        for node in nodes
        for i in SHAPE_OPERANDS.get(node.op_type, ())
        if i < len(node.input) and node.input[i]
    ]
    names: set[str] = set()
    while stack:
        name = stack.pop()
        if name in names:
            continue
        names.add(name)
        node = producer.get(name)
        if node is None or node.op_type in _SHAPE_ONLY:
            continue
        stack.extend(i for i in node.input if i)
        for sub in _subgraphs(node):
            stack.extend(o.name for o in sub.output)
    initializers = {t.name for t in model.graph.initializer}
    tensors = {
        i.name for i in model.graph.input if i.type.WhichOneof("value") == "tensor_type"
    }
    return names & (tensors - initializers)


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs = []
    for a in node.attribute:
        graphs += [a.g] if a.HasField("g") else list(a.graphs)
    return graphs


def _nodes(graph: onnx.GraphProto):
    """The nodes of `graph` and of its subgraphs, at every depth."""
    for node in graph.node:
        yield node
        for sub in _subgraphs(node):
            yield from _nodes(sub)


def fix_inputs(
    model: onnx.ModelProto,
    constants: Mapping[str, Any],
    input_shapes: Mapping[str, Sequence[int]],
) -> onnx.ModelProto:
    """A copy of `model` whose inputs named in `constants` are initializers holding
    those values, in each input's element type (and declared shape, where the
    value has as many elements)."""
    inputs = {i.name: i for i in model.graph.input}
    unknown = sorted(set(constants) - set(inputs))
    if unknown:
        # name the inputs a caller feeds: not the initializers that older models
        # also list as graph inputs (the light models' weights, their `…__SHAPE`)
        inits = {t.name for t in model.graph.initializer}
        real = [name for name in inputs if name not in inits]
        one = len(unknown) == 1
        raise SmeltError(
            f"constants names {', '.join(repr(n) for n in unknown)}, which "
            f"{'is not a model input' if one else 'are not model inputs'} "
            f"(the model's inputs: {', '.join(real) or 'none'})"
        )
    both = sorted(set(constants) & set(input_shapes))
    if both:
        raise SmeltError(
            f"{', '.join(both)}: given in both constants and input_shapes; a "
            "constant's shape is its value's"
        )
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    kept = [t for t in graph.initializer if t.name not in constants]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for name, value in constants.items():
        array = constant_array(inputs[name], value)
        graph.initializer.append(onnx.numpy_helper.from_array(array, name))
    return fixed


def constant_array(info: onnx.ValueInfoProto, value: Any) -> np.ndarray:
    """`value` as graph input `info` takes it: its element type, and its declared
    shape where the value has as many elements (SmeltError when it cannot be)."""
    from smelt.frontend.onnx import element_type  # (onnx.py imports this file)

    what = f"constants['{info.name}']"
    if info.type.WhichOneof("value") != "tensor_type":
        raise SmeltError(f"{what}: input '{info.name}' is not a tensor")
    tt = info.type.tensor_type
    element_type(tt.elem_type, f"input '{info.name}'")  # refuses unsupported ones
    np_dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
    try:
        given = np.asarray(value)
        array = given.astype(np_dtype)
    except (TypeError, ValueError) as e:
        raise SmeltError(
            f"{what}: {value!r} is not a {np_dtype} tensor ({e})"
        ) from None
    if given.dtype.kind == "f" and np_dtype.kind in "iub" and not np.array_equal(
        array, given
    ):
        raise SmeltError(
            f"{what}: {value!r} is not a whole number; the input is {np_dtype}"
        )
    if not tt.HasField("shape"):
        return array
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if len(dims) == array.ndim and all(
        d is None or d == n for d, n in zip(dims, array.shape)
    ):
        return array
    if None not in dims and int(np.prod(dims)) == array.size:
        return array.reshape(dims)
    raise SmeltError(
        f"{what}: a value of shape {list(array.shape)} does not fit input "
        f"'{info.name}' of shape {[d if d is not None else '?' for d in dims]}"
    )


