"""The picture `smelt show` draws (smelt/compiler/show.py) and its SVG, DOT and
JSON writers read: a graph-level module's @main as nodes, edges and the fused
kernels' groups, with the labels every writer shows."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

PALETTE = (
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2",
    "#dbdb8d", "#9edae5", "#fdd0a2", "#c7e9c0", "#dadaeb",
)  # fmt: skip


@dataclass
class Node:
    id: str
    label: str
    kind: str  # op, view (no kernel of its own), input, output
    group: str | None = None  # the kernel it belongs to (after fusion)
    op: str = ""  # the graph op's full name
    outputs: list[tuple[str, int]] = field(default_factory=list)  # (type, bytes)
    weight_bytes: int = 0  # constant operands
    onnx: list[str] = field(default_factory=list)  # the ONNX nodes it came from


@dataclass
class Edge:
    src: str
    dst: str
    src_port: int
    dst_port: int
    type: str  # e.g. 1x64x56x56xf32
    bytes: int
    inner: bool = False  # inside one kernel: never stored to memory


@dataclass
class Group:
    id: str
    kind: str  # the anchor: conv2d, matmul, ..., elementwise
    color: str
    nodes: list[str] = field(default_factory=list)


@dataclass
class Picture:
    title: str
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    def node(self, id: str) -> Node:
        return next(n for n in self.nodes if n.id == id)


def _type(t: Any) -> tuple[str, int]:
    from smelt.dialects import dtypes

    shape = tuple(t.get_shape())
    size = dtypes.byte_size(t.element_type) * math.prod(shape)
    return "x".join([*map(str, shape), str(t.element_type)]), size


def picture(module: Any, title: str) -> Picture:
    """The dataflow of graph-level `module`'s @main: ops, inputs and outputs as
    nodes (constants counted as their users' weight bytes), each `graph.fused` a
    group of its ops."""
    from xdsl.dialects import func

    from smelt.dialects import graph, locations, program
    from smelt.dialects.program import main_func

    main = main_func(module)
    pic = Picture(title)
    source: dict[Any, tuple[str, int]] = {}  # value → (node id, result index)
    constants: set[Any] = set()

    def add(label: str, kind: str, results, op=None, group=None) -> Node:
        node = Node(f"n{len(pic.nodes)}", label, kind, group, op.name if op else "")
        node.outputs = [_type(r.type) for r in results]
        node.onnx = locations.names(op) if op else []
        for i, r in enumerate(results):
            source[r] = (node.id, i)
        pic.nodes.append(node)
        return node

    def connect(node: Node, values, inner: bool = False) -> None:
        for port, v in enumerate(values):
            if v in constants:
                node.weight_bytes += _type(v.type)[1]
            elif v in source:
                src, index = source[v]
                text, size = _type(v.type)
                internal = inner and pic.node(src).group == node.group
                pic.edges.append(Edge(src, node.id, index, port, text, size, internal))

    names = program.io_names(main, program.INPUT_NAMES_ATTR) or []
    for name, arg in zip(names, main.body.block.args, strict=False):
        add(name, "input", [arg])
    for op in main.body.ops:
        if isinstance(op, graph.ConstantOp):
            constants.add(op.result)
        elif isinstance(op, func.ReturnOp):
            out = program.io_names(main, program.OUTPUT_NAMES_ATTR) or []
            for name, value in zip(out, op.operands, strict=False):
                connect(add(name, "output", []), [value])
        elif isinstance(op, graph.FusedOp):
            group = Group(f"k{len(pic.groups) + 1}", op.kind.data, "")
            group.color = PALETTE[len(pic.groups) % len(PALETTE)]
            pic.groups.append(group)
            block = op.body.block
            for arg, outer in zip(block.args, op.operands, strict=True):
                if outer in constants:
                    constants.add(arg)
                elif outer in source:
                    source[arg] = source[outer]
            for inner in block.ops:
                if isinstance(inner, graph.YieldOp):
                    for result, value in zip(op.results, inner.operands, strict=True):
                        source[result] = source[value]
                    continue
                node = add(_label(inner), "op", inner.results, inner, group.id)
                group.nodes.append(node.id)
                connect(node, inner.operands, inner=True)
        else:
            kind = "view" if getattr(op, "KERNEL_FREE", False) else "op"
            connect(add(_label(op), kind, op.results, op), op.operands)
    return pic


def _label(op: Any) -> str:
    return op.name.removeprefix("graph.")


def summary(pic: Picture) -> str:
    """"N ops, K graph-level kernels (F fused)": a kernel is a group or an op
    outside one that is not a view (the lowering may split some in several, e.g.
    a padded conv: `smelt run` counts the loop-level ones)."""
    ops = [n for n in pic.nodes if n.kind in ("op", "view")]
    alone = sum(n.kind == "op" and n.group is None for n in ops)
    fused = len(pic.groups)
    return f"{len(ops)} ops, {alone + fused} graph-level kernels ({fused} fused)"


def size_text(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def edge_label(edge: Edge) -> str:
    return edge.type + ("" if edge.inner else f" · {size_text(edge.bytes)}")


def node_text(node: Node) -> str:
    """The op, its ONNX node (shortened), its weight bytes: one per line."""
    lines = [node.label]
    if node.onnx:
        name = ", ".join(node.onnx)
        lines.append(name if len(name) <= 24 else name[:23] + "…")
    if node.weight_bytes:
        lines.append(f"weights {size_text(node.weight_bytes)}")
    return "\n".join(lines)
