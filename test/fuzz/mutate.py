"""Seeded generators of malformed ONNX models and bad run-time inputs.

`make_case(seed, index)` is a pure function of its arguments: the same pair
gives the same mutant on every machine, so a failing case replays from its
number. Three families of mutation:

* bytes: bit flips, byte overwrites, truncations and insertions in a serialized
  seed model;
* structure: nodes dropped, duplicated, reordered or made cyclic; inputs renamed
  to undefined or empty names, swapped; attributes of the wrong type, out of
  range, zero, negative or huge, unknown or missing; element types and dims
  changed (0, negative, 2**40); initializers whose data does not match their
  type; opset imports deleted or absurd; unknown ops and domains;
* inputs: wrong dtype or shape, NaN / Inf, empty and non-contiguous arrays,
  missing and unknown names, out-of-range indices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from seeds import Seed, make_feeds, seeds

HUGE = (2**31, 2**40, 2**62, -(2**62))
ODD_INTS = (0, -1, -7, 10, *HUGE)
ELEM_TYPES = (
    0, 999, -3, T.STRING, T.BOOL, T.FLOAT16, T.BFLOAT16, T.DOUBLE, T.INT8, T.UINT8,
    T.INT32, T.INT64, T.UINT64, T.COMPLEX64, T.FLOAT8E4M3FN, T.INT4,
)  # fmt: skip


@dataclass
class Case:
    """One fuzz case: a model (serialized) and the inputs to run it with."""

    index: int
    seed: str  # the seed model's name
    family: str  # bytes / structure / inputs / control
    kind: str  # the mutation
    detail: str  # what exactly was changed
    model: bytes
    feeds: dict[str, np.ndarray] | list | None
    as_proto: bool = True  # give smelt a ModelProto (else the bytes)
    feed_transform: str = ""  # applied at run time: "noncontig", "fortran", ...
    names: list[str] = field(default_factory=list)  # names an error may cite


Mutation = Callable[[onnx.ModelProto, np.random.Generator], str | None]


def _pick(rng: np.random.Generator, items):
    items = list(items)
    return items[int(rng.integers(len(items)))] if items else None


def _node(m: onnx.ModelProto, rng) -> tuple[int, onnx.NodeProto] | tuple[None, None]:
    if not m.graph.node:
        return None, None
    i = int(rng.integers(len(m.graph.node)))
    return i, m.graph.node[i]


# --- structural mutations: each edits `m` in place and says what it did -------


def drop_node(m, rng):
    i, node = _node(m, rng)
    if node is None:
        return None
    del m.graph.node[i]
    return f"dropped node {i} ({node.op_type})"


def duplicate_node(m, rng):
    i, node = _node(m, rng)
    if node is None:
        return None
    m.graph.node.insert(i + 1, node)
    return f"duplicated node {i} ({node.op_type})"


def shuffle_nodes(m, rng):
    if len(m.graph.node) < 2:
        return None
    nodes = list(m.graph.node)
    order = rng.permutation(len(nodes))
    del m.graph.node[:]
    m.graph.node.extend(nodes[j] for j in order)
    return f"nodes reordered {order.tolist()}"


def cycle(m, rng):
    if not m.graph.node or not m.graph.node[0].input:
        return None
    last = m.graph.node[-1]
    m.graph.node[0].input[0] = last.output[0]
    return f"node 0 input 0 reads the last node's output '{last.output[0]}'"


def undefined_input(m, rng):
    i, node = _node(m, rng)
    if node is None or not node.input:
        return None
    j = int(rng.integers(len(node.input)))
    node.input[j] = "no_such_value"
    return f"node {i} input {j} → undefined name"


def empty_name(m, rng):
    i, node = _node(m, rng)
    if node is None:
        return None
    where = _pick(rng, ["input", "output", "graph_input", "op_type"])
    if where == "input" and node.input:
        node.input[int(rng.integers(len(node.input)))] = ""
    elif where == "output":
        node.output[0] = ""
    elif where == "graph_input" and m.graph.input:
        m.graph.input[0].name = ""
    else:
        node.op_type = ""
    return f"empty name at {where} (node {i})"


def swap_inputs(m, rng):
    candidates = [n for n in m.graph.node if len(n.input) >= 2]
    node = _pick(rng, candidates)
    if node is None:
        return None
    a, b = rng.choice(len(node.input), 2, replace=False)
    node.input[a], node.input[b] = node.input[b], node.input[a]
    return f"{node.op_type} inputs {a} and {b} swapped"


def extra_input(m, rng):
    i, node = _node(m, rng)
    if node is None:
        return None
    node.input.append(_pick(rng, [node.input[0] if node.input else "x", "", "zz"]))
    return f"node {i} ({node.op_type}) given an extra input"


def attr_type(m, rng):
    candidates = [(n, a) for n in m.graph.node for a in n.attribute]
    pair = _pick(rng, candidates)
    if pair is None:
        return None
    node, attr = pair
    new = _pick(rng, ["float", "string", "ints", "int", "tensor", "type_only"])
    if new == "type_only":  # the type field lies about the value held
        attr.type = _pick(rng, [onnx.AttributeProto.INT, onnx.AttributeProto.FLOATS,
                                onnx.AttributeProto.GRAPH, 0])  # fmt: skip
        return f"{node.op_type}.{attr.name}: type field → {attr.type}"
    value = {
        "float": 1.5, "string": "bogus", "ints": [1, 2, 3], "int": 3,
        "tensor": onnx.numpy_helper.from_array(np.ones(2, np.float32)),
    }[new]  # fmt: skip
    attr.CopyFrom(h.make_attribute(attr.name, value))
    return f"{node.op_type}.{attr.name} → {new}"


def attr_value(m, rng):
    candidates = [(n, a) for n in m.graph.node for a in n.attribute]
    pair = _pick(rng, candidates)
    if pair is None:
        return None
    node, attr = pair
    odd = _pick(rng, ODD_INTS)
    if attr.type == onnx.AttributeProto.INT:
        attr.i = odd
    elif attr.type == onnx.AttributeProto.INTS:
        choice = _pick(rng, ["one", "empty", "longer"])
        if choice == "empty" or not attr.ints:
            del attr.ints[:]
        elif choice == "longer":
            attr.ints.extend([1, 1, 1])
        else:
            attr.ints[int(rng.integers(len(attr.ints)))] = odd
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = _pick(rng, [float("nan"), float("inf"), -1.0, 0.0, 1e30])
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = _pick(rng, [b"bogus", b"", b"\xff\xfe"])
    else:
        return None
    return f"{node.op_type}.{attr.name} value → {odd if attr.type < 3 else 'odd'}"


def attr_unknown_or_missing(m, rng):
    i, node = _node(m, rng)
    if node is None:
        return None
    if node.attribute and rng.random() < 0.5:
        name = node.attribute[0].name
        del node.attribute[0]
        return f"node {i} ({node.op_type}) lost attribute {name}"
    node.attribute.append(h.make_attribute("bogus_attr", 7))
    return f"node {i} ({node.op_type}) given unknown attribute"


def elem_type(m, rng):
    values = [*m.graph.input, *m.graph.output, *m.graph.value_info]
    target = _pick(rng, values)
    if target is None:
        return None
    new = int(_pick(rng, ELEM_TYPES))
    target.type.tensor_type.elem_type = new
    return f"value '{target.name}' element type → {new}"


def dims(m, rng):
    values = [v for v in [*m.graph.input, *m.graph.output]
              if v.type.tensor_type.HasField("shape")]  # fmt: skip
    target = _pick(rng, values)
    if target is None:
        return None
    shape = target.type.tensor_type.shape
    choice = _pick(rng, ["value", "value", "param", "drop_shape", "add_dim", "rank0"])
    if choice == "value" and shape.dim:
        dim = shape.dim[int(rng.integers(len(shape.dim)))]
        dim.dim_value = int(_pick(rng, [0, -1, -5, 2**40, 2**62, 1]))
    elif choice == "param" and shape.dim:
        shape.dim[0].dim_param = "N"
    elif choice == "drop_shape":
        target.type.tensor_type.ClearField("shape")
    elif choice == "add_dim":
        shape.dim.add().dim_value = 2
    else:
        del shape.dim[:]
    return f"value '{target.name}' dims: {choice}"


def initializer(m, rng):
    init = _pick(rng, m.graph.initializer)
    if init is None:
        return None
    choice = _pick(rng, ["data_type", "truncate", "grow", "dims", "dims_huge",
                         "undefined", "external", "rename_dup"])  # fmt: skip
    if not init.raw_data and choice in ("truncate", "grow"):
        choice = "dims"
    if choice == "data_type":
        init.data_type = int(_pick(rng, ELEM_TYPES))
    elif choice == "truncate":
        init.raw_data = init.raw_data[: len(init.raw_data) // 2]
    elif choice == "grow":
        init.raw_data = init.raw_data + b"\x00" * 12
    elif choice == "dims" and init.dims:
        init.dims[int(rng.integers(len(init.dims)))] += 1
    elif choice == "dims_huge" or choice == "dims":
        init.dims.append(2**40)
    elif choice == "undefined":
        init.data_type = 0
    elif choice == "external":
        init.data_location = T.EXTERNAL
        del init.external_data[:]
        entry = init.external_data.add()
        entry.key = "location"
        entry.value = _pick(rng, ["../../etc/passwd", "/dev/zero", "missing.bin"])
    else:
        dup = m.graph.initializer.add()
        dup.CopyFrom(init)
    return f"initializer '{init.name}': {choice}"


def opset(m, rng):
    choice = _pick(rng, ["delete", "zero", "one", "future", "huge", "domain", "ir"])
    if choice == "delete":
        del m.opset_import[:]
    elif choice == "domain":
        m.opset_import[0].domain = "com.evil"
    elif choice == "ir":
        m.ir_version = int(_pick(rng, [0, 1, 99]))
    else:
        m.opset_import[0].version = {"zero": 0, "one": 1, "future": 99,
                                     "huge": 2**40}[choice]  # fmt: skip
    return f"opset: {choice}"


def unknown_op(m, rng):
    i, node = _node(m, rng)
    if node is None:
        return None
    choice = _pick(rng, ["op", "domain", "lowercase"])
    if choice == "op":
        node.op_type = "NoSuchOp"
    elif choice == "domain":
        node.domain = "com.evil"
    else:
        node.op_type = node.op_type.lower()
    return f"node {i}: unknown {choice}"


def graph_io(m, rng):
    choice = _pick(rng, ["no_output", "undefined_output", "dup_input", "drop_input",
                         "dup_output"])  # fmt: skip
    if choice == "no_output":
        del m.graph.output[:]
    elif choice == "undefined_output":
        m.graph.output[0].name = "nowhere"
    elif choice == "dup_input" and m.graph.input:
        m.graph.input.append(m.graph.input[0])
    elif choice == "drop_input" and m.graph.input:
        del m.graph.input[0]
    else:
        m.graph.output.append(m.graph.output[0])
    return f"graph io: {choice}"


STRUCTURE: dict[str, Mutation] = {
    f.__name__: f
    for f in (
        drop_node, duplicate_node, shuffle_nodes, cycle, undefined_input, empty_name,
        swap_inputs, extra_input, attr_type, attr_value, attr_unknown_or_missing,
        elem_type, dims, initializer, opset, unknown_op, graph_io,
    )
}  # fmt: skip


# --- byte mutations -----------------------------------------------------------


def mutate_bytes(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    buf = bytearray(data)
    kind = _pick(rng, ["bit_flip", "byte_set", "truncate", "insert"])
    if kind == "bit_flip":
        for pos in rng.integers(0, len(buf), int(rng.integers(1, 9))):
            buf[pos] ^= 1 << int(rng.integers(8))
    elif kind == "byte_set":
        for pos in rng.integers(0, len(buf), int(rng.integers(1, 5))):
            buf[pos] = int(_pick(rng, [0, 0xFF, 0x7F, 0x80, int(rng.integers(256))]))
    elif kind == "truncate":
        buf = buf[: int(rng.integers(0, len(buf)))]
    else:
        pos = int(rng.integers(len(buf)))
        buf[pos:pos] = bytes(rng.integers(0, 256, int(rng.integers(1, 16))).tolist())
    return kind, bytes(buf)


# --- run-time input mutations ---------------------------------------------------


def mutate_feeds(feeds: dict, rng: np.random.Generator) -> tuple[str, object, str]:
    """(kind, feeds, transform): bad or unusual inputs for a valid model."""
    feeds = {k: v.copy() for k, v in feeds.items()}
    name = _pick(rng, sorted(feeds))
    kinds = ["dtype", "shape", "nan_inf", "empty", "noncontig", "fortran", "missing",
             "unknown", "not_a_dict", "list", "scalar", "indices"]  # fmt: skip
    kind = _pick(rng, kinds)
    if name is None:
        return "unknown", {"zz": np.zeros(1, np.float32)}, ""
    value = feeds[name]
    if kind == "dtype":
        feeds[name] = value.astype(_pick(rng, [np.float64, np.int32, np.float16,
                                               np.bool_, np.uint8]))  # fmt: skip
    elif kind == "shape":
        feeds[name] = _pick(rng, [value[None], value.reshape(-1), value[..., :1]])
    elif kind == "nan_inf" and value.dtype.kind == "f" and value.size:
        flat = value.reshape(-1)
        for pos in rng.integers(0, flat.size, max(1, flat.size // 4)):
            flat[pos] = _pick(rng, [np.nan, np.inf, -np.inf])
    elif kind == "empty":
        feeds[name] = np.zeros((0, *value.shape[1:]), value.dtype)
    elif kind in ("noncontig", "fortran"):
        return kind, feeds, kind
    elif kind == "missing":
        del feeds[name]
    elif kind == "unknown":
        feeds["zz_unknown"] = value
    elif kind == "not_a_dict":
        return kind, list(feeds.values()), ""
    elif kind == "list":
        return kind, feeds, "list"
    elif kind == "scalar":
        feeds[name] = np.asarray(value.reshape(-1)[:1].reshape(()))
    elif kind == "indices" and value.dtype.kind in "iu":
        flat = value.reshape(-1)
        if flat.size:
            odd = _pick(rng, [10**6, -(10**6), -1, 6, -7])
            flat[int(rng.integers(flat.size))] = odd
    else:
        kind = "plain"
    return kind, feeds, ""


def realize_feeds(case: Case):
    """The case's inputs with their run-time transform applied (non-contiguous
    views and Python lists cannot be pickled as such)."""
    feeds = case.feeds
    if not case.feed_transform or not isinstance(feeds, dict):
        return feeds
    out = {}
    for name, value in feeds.items():
        if case.feed_transform == "noncontig" and value.ndim:
            wide = np.repeat(value, 2, axis=-1)
            view = wide[..., ::2]
            out[name] = view
        elif case.feed_transform == "fortran":
            out[name] = np.asfortranarray(value)
        elif case.feed_transform == "list":
            out[name] = value.tolist()
        else:
            out[name] = value
    return out


# --- cases ----------------------------------------------------------------------

FAMILIES = (("bytes", 0.2), ("structure", 0.55), ("inputs", 0.2), ("control", 0.05))


def _names(model: onnx.ModelProto) -> list[str]:
    g = model.graph
    names = [n.name for n in g.node if n.name]
    names += [n for node in g.node for n in [*node.input, *node.output] if n]
    names += [v.name for v in [*g.input, *g.output, *g.initializer] if v.name]
    return sorted(set(names))


def make_case(seed: int, index: int, backend: bool = True) -> Case:
    """Case `index` of the run seeded `seed`."""
    rng = np.random.default_rng([seed, index])
    base: Seed = _pick(rng, seeds(backend))
    family = rng.choice([f for f, _ in FAMILIES], p=[p for _, p in FAMILIES])
    model = onnx.ModelProto()
    model.CopyFrom(base.model)
    feeds, transform, as_proto = base.feeds, "", True
    if family == "bytes":
        kind, data = mutate_bytes(model.SerializeToString(), rng)
        return Case(index, base.name, family, kind, kind, data, feeds, False,
                    names=_names(base.model))  # fmt: skip
    if family == "structure":
        kind = _pick(rng, sorted(STRUCTURE))
        detail = STRUCTURE[kind](model, rng)
        if detail is None:  # not applicable to this seed: a plain run
            kind, detail = "plain", "no mutation applied"
        fresh = make_feeds(model, rng)
        if fresh is not None and set(fresh) == set(feeds):
            feeds = fresh  # inputs that follow changed element types
        as_proto = bool(rng.random() < 0.7)
    elif family == "inputs":
        kind, feeds, transform = mutate_feeds(feeds, rng)
        detail = kind
    else:
        kind = detail = "plain"
    return Case(index, base.name, str(family), kind, detail,
                model.SerializeToString(), feeds, as_proto, transform,
                _names(base.model) + _names(model))  # fmt: skip
