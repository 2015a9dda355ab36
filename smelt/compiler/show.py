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
import os
from typing import Any

from smelt.compiler.cli_inputs import (
    check_input_names,
    parse_constants,
    parse_shapes,
    resolve_model,
)
from smelt.compiler.cli_options import INSPECT, add_compile_options, pipeline_of
from smelt.compiler.show_picture import (  # test_show imports summary from here
    Picture,
    edge_label,
    node_text,
    picture,
    size_text,
    summary,
)
from smelt.compiler.show_svg import render, render_all
from smelt.errors import SmeltError


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
    from smelt.compiler.runner import lower

    before, rest = graph_spec(pipeline)
    if before:
        lower(module, ",".join(before))
    if not rest:
        return [picture(module, "no graph-fuse in the pipeline")]
    first = picture(module, "before fusion")
    lower(module, ",".join(rest))
    return [first, picture(module, "after fusion")]


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
                         f"</td><td>{ops}</td><td>{size_text(read)}</td>"
                         f"<td>{size_text(wrote)}</td></tr>")
        parts.append("</table>")
    return "\n".join(parts) + "\n"


FORMATS = (".svg", ".html", ".json", ".dot")


def write(pics: list[Picture], path: str, title: str) -> None:
    """`pics` in the format that `path`'s suffix names (FORMATS)."""
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
    from smelt.compiler.runner import import_graph, lower
    from smelt.compiler.stats import kernel_count

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
    s.add_argument("model", help="an .onnx path or a light_* model name")
    s.add_argument("-o", "--output", required=True,
                   help=f"the file to write: {', '.join(FORMATS)}")
    add_compile_options(s, INSPECT)
    s.set_defaults(func=cmd_show)
