"""`smelt show`: a model's graph before and after fusion, each fused kernel a group
in its own colour, shapes and bytes on the edges.

    smelt show light_resnet50 -o resnet.svg      # both graphs side by side
    smelt show model.onnx -p PIPELINE -o g.html  # the same, with a kernel table
    smelt show model.onnx -o g.json              # Google Model Explorer's graph JSON
    smelt show model.onnx -o g.dot               # Graphviz: dot -Tsvg g.dot

The pipeline is `smelt run`'s for the same flags (default: the O2 CPU preset for
this host; --level, --cpu, --threads, --precision or -p choose another), and the
output names it. The "before" picture is the graph just before its first
graph-fuse, "after" the graph after its last graph pass; the loop passes then run
too, so that the kernel count printed is `smelt run`'s and `smelt report`'s
(calls in @main after the whole pipeline). The SVG is laid out here (layered, no Graphviz needed); the .dot
file is for Graphviz's own layout. The JSON holds one Model Explorer `Graph` per
picture (`{"graphs": [...]}`, fields as in model_explorer/graph_builder.py): a
kernel's ops share a `namespace` (the kernel's name), so Model Explorer draws each
kernel as a collapsible layer; `outputsMetadata` gives each result's shape and
bytes; `style.backgroundColor` the kernel's colour.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from smelt.errors import SmeltError

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


def _graph_end(specs: list[str]) -> int:
    return next((i for i, s in enumerate(specs) if s.startswith("convert-")), len(specs))


def loop_spec(pipeline: str | None) -> list[str]:
    """The passes of `pipeline` after its graph passes (from its first convert-)."""
    from smelt.compiler import pipelines
    from smelt.compiler.instrument import pass_specs

    specs = pass_specs(pipeline or pipelines.GRAPH_OPT_NHWC)
    return specs[_graph_end(specs) :]


def graph_spec(pipeline: str | None) -> tuple[list[str], list[str]]:
    """The graph passes of `pipeline` (default: O2's graph part for the cpu
    target), split before its first graph-fuse: (before, rest)."""
    from smelt.compiler import pipelines
    from smelt.compiler.instrument import pass_specs

    specs = pass_specs(pipeline or pipelines.GRAPH_OPT_NHWC)
    specs = specs[: _graph_end(specs)]
    fuse = next((i for i, s in enumerate(specs) if s.startswith("graph-fuse")), None)
    if fuse is None:
        return specs, []
    return specs[:fuse], specs[fuse:]


def pictures(module: Any, pipeline: str | None) -> list[Picture]:
    """Before and after fusion (only one picture when the pipeline does not fuse)."""
    from smelt.compiler.driver import lower

    before, rest = graph_spec(pipeline)
    if before:
        lower(module, ",".join(before))
    if not rest:
        return [picture(module, "no graph-fuse in the pipeline")]
    first = picture(module, "before fusion")
    lower(module, ",".join(rest))
    return [first, picture(module, "after fusion")]


def summary(pic: Picture) -> str:
    """"N ops, K graph-level kernels (F fused)": a kernel is a group or an op
    outside one that is not a view (the lowering may split some in several, e.g.
    a padded conv: `smelt run` counts the loop-level ones)."""
    ops = [n for n in pic.nodes if n.kind in ("op", "view")]
    alone = sum(n.kind == "op" and n.group is None for n in ops)
    fused = len(pic.groups)
    return f"{len(ops)} ops, {alone + fused} graph-level kernels ({fused} fused)"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def edge_label(edge: Edge) -> str:
    return edge.type + ("" if edge.inner else f" · {_size(edge.bytes)}")


def to_dot(pics: list[Picture]) -> str:
    """Graphviz text: one digraph per picture, a filled cluster per kernel."""
    out = []
    for pic in pics:
        lines = [f"digraph {json.dumps(pic.title)} {{", "  rankdir=TB;",
                 '  node [shape=box style="rounded,filled" fillcolor=white '
                 "fontname=Helvetica fontsize=10];",
                 "  edge [fontname=Helvetica fontsize=8];"]  # fmt: skip
        for g in pic.groups:
            lines.append(f"  subgraph cluster_{g.id} {{")
            lines.append(f'    label="{g.id} {g.kind}"; style="rounded,filled"; '
                         f'fillcolor="{g.color}"; color="#666666";')
            lines += [f"    {n};" for n in g.nodes]
            lines.append("  }")
        for n in pic.nodes:
            shape = {"input": "ellipse", "output": "ellipse"}.get(n.kind, "box")
            style = ', style="dashed,rounded"' if n.kind == "view" else ""
            lines.append(f"  {n.id} [label={json.dumps(node_text(n))} "
                         f"shape={shape}{style}];")
        for e in pic.edges:
            style = " style=dashed color=gray" if e.inner else ""
            lines.append(f"  {e.src} -> {e.dst} [label={json.dumps(edge_label(e))}"
                         f"{style}];")
        lines.append("}")
        out.append("\n".join(lines))
    return "\n".join(out) + "\n"


def node_text(node: Node) -> str:
    """The op, its ONNX node (shortened), its weight bytes: one per line."""
    lines = [node.label]
    if node.onnx:
        name = ", ".join(node.onnx)
        lines.append(name if len(name) <= 24 else name[:23] + "…")
    if node.weight_bytes:
        lines.append(f"weights {_size(node.weight_bytes)}")
    return "\n".join(lines)


def to_model_explorer(pics: list[Picture]) -> dict:
    """Model Explorer's graph JSON: {"graphs": [Graph, ...]} (see module doc)."""
    graphs = []
    for pic in pics:
        colors = {g.id: g.color for g in pic.groups}
        incoming: dict[str, list[dict]] = {}
        for e in pic.edges:
            incoming.setdefault(e.dst, []).append({
                "sourceNodeId": e.src, "sourceNodeOutputId": str(e.src_port),
                "targetNodeInputId": str(e.dst_port),
            })  # fmt: skip
        nodes = []
        for n in pic.nodes:
            attrs = [{"key": "op", "value": n.op or n.kind}]
            if n.onnx:
                attrs.append({"key": "onnx_nodes", "value": ", ".join(n.onnx)})
            if n.weight_bytes:
                attrs.append({"key": "weight_bytes", "value": str(n.weight_bytes)})
            node = {
                "id": n.id, "label": n.label, "namespace": n.group or "",
                "attrs": attrs, "incomingEdges": incoming.get(n.id, []),
                "outputsMetadata": [
                    {"id": str(i), "attrs": [{"key": "tensor_shape", "value": t},
                                             {"key": "bytes", "value": str(b)}]}
                    for i, (t, b) in enumerate(n.outputs)
                ],
            }  # fmt: skip
            if n.group:
                node["style"] = {"backgroundColor": colors[n.group]}
            nodes.append(node)
        groups = {g.id: {"kind": g.kind, "ops": str(len(g.nodes))} for g in pic.groups}
        graphs.append({"id": pic.title, "nodes": nodes, "groupNodeAttributes": groups})
    return {"graphs": graphs}


def kernel_rows(pic: Picture) -> list[tuple[str, str, int, int, int]]:
    """(kernel, kind, ops, bytes read from memory, bytes written) per group."""
    rows = []
    for g in pic.groups:
        members = set(g.nodes)
        read = sum(e.bytes for e in pic.edges if e.dst in members and not e.inner)
        wrote = {(e.src, e.src_port): e.bytes for e in pic.edges
                 if e.src in members and e.dst not in members}  # fmt: skip
        rows.append((g.id, g.kind, len(g.nodes), read, sum(wrote.values())))
    return rows


def to_html(pics: list[Picture], title: str) -> str:
    from smelt.compiler.show_svg import render

    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}"
             "</title><style>body{font-family:sans-serif} .p{display:inline-block;"
             "vertical-align:top;margin:8px} td,th{padding:2px 8px;text-align:right}"
             "</style>", f"<h2>{html.escape(title)}</h2>"]  # fmt: skip
    parts += [f"<div class='p'>{render(pic)}</div>" for pic in pics]
    rows = kernel_rows(pics[-1])
    if rows:
        parts.append("<h3>kernels (after fusion)</h3><table><tr><th>kernel</th>"
                     "<th>kind</th><th>ops</th><th>read</th><th>written</th></tr>")
        for k, kind, ops, read, wrote in rows:
            color = next(g.color for g in pics[-1].groups if g.id == k)
            parts.append(f"<tr><td style='background:{color}'>{k}</td><td>{kind}"
                         f"</td><td>{ops}</td><td>{_size(read)}</td>"
                         f"<td>{_size(wrote)}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"


FORMATS = (".svg", ".html", ".json", ".dot")


def write(pics: list[Picture], path: str, title: str) -> None:
    """`pics` in the format that `path`'s suffix names (FORMATS)."""
    from smelt.compiler.show_svg import render_all

    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".svg":
        text = render_all(pics, title)
    elif suffix == ".html":
        text = to_html(pics, title)
    elif suffix == ".json":
        text = json.dumps(to_model_explorer(pics), indent=1)
    elif suffix == ".dot":
        text = to_dot(pics)
    else:
        raise SmeltError(
            f"cannot tell the format of '{path}': end it with {', '.join(FORMATS)}"
        )
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise SmeltError(f"cannot write '{path}': {e}") from None


def cmd_show(args: argparse.Namespace) -> int:
    from smelt.compiler.cli_inputs import (
        check_input_names,
        parse_constants,
        parse_shapes,
        resolve_model,
    )
    from smelt.compiler.cli_options import pipeline_of
    from smelt.compiler.driver import import_graph, lower
    from smelt.compiler.report import kernel_count

    path = resolve_model(args.model)
    shapes, constants = parse_shapes(args.input_shape), parse_constants(args.constant)
    check_input_names(path, shapes, constants)
    module = import_graph(
        path, shapes, constants=constants, check_model=not args.no_check_model
    )
    spec = pipeline_of(args)
    pics = pictures(module, spec)
    name = os.path.basename(path)
    write(pics, args.output, name)
    counts = "; ".join(f"{p.title}: {summary(p)}" for p in pics)
    print(f"wrote {args.output} ({name}: {counts})")
    if rest := loop_spec(spec):  # for the count `smelt run` prints
        lower(module, ",".join(rest))
    print(f"  {kernel_count(module)}  [pipeline: {spec}]")
    return 0


def add_show_parser(sub: Any) -> None:
    s = sub.add_parser(
        "show", help="draw the graph before and after fusion (svg, html, json, dot)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    from smelt.compiler.cli_options import INSPECT, add_compile_options

    s.add_argument("model", help="an .onnx path or a light_* model name")
    s.add_argument("-o", "--output", required=True,
                   help=f"the file to write: {', '.join(FORMATS)}")
    add_compile_options(s, INSPECT)
    s.set_defaults(func=cmd_show)
