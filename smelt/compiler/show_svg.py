"""SVG of a `show_picture.Picture`, laid out here (no Graphviz): nodes in layers by
longest path from the inputs, ordered by the barycenter of their neighbours, each
placed under its producers; a kernel's nodes filled with its colour inside a box
of it."""

from __future__ import annotations

from html import escape

from smelt.compiler.show_picture import Picture, edge_label, node_text

NODE_H = 22  # per text line
LAYER_GAP = 58
NODE_GAP = 26
CHAR_W = 6.4  # at font-size 11
MARGIN = 24
TITLE_H = 30
PAD = 8  # around a kernel's nodes (and its label above them)


def _sizes(pic: Picture) -> dict[str, tuple[float, float]]:
    sizes = {}
    for n in pic.nodes:
        lines = node_text(n).splitlines()
        width = max(56.0, CHAR_W * max(len(line) for line in lines) + 18)
        sizes[n.id] = (width, NODE_H * len(lines) + 6)
    return sizes


def layers(pic: Picture) -> list[list[str]]:
    """Nodes by layer (longest path from a source; node lists are topological),
    ordered by barycenter sweeps down and up."""
    preds: dict[str, list[str]] = {n.id: [] for n in pic.nodes}
    succs: dict[str, list[str]] = {n.id: [] for n in pic.nodes}
    for e in pic.edges:
        preds[e.dst].append(e.src)
        succs[e.src].append(e.dst)
    level: dict[str, int] = {}
    for n in pic.nodes:
        level[n.id] = 1 + max((level[p] for p in preds[n.id]), default=-1)
    rows: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for n in pic.nodes:
        rows[level[n.id]].append(n.id)
    position = {n: i for row in rows for i, n in enumerate(row)}
    for sweep in range(4):
        down = sweep % 2 == 0
        order = rows[1:] if down else rows[-2::-1]
        for row in order:
            near = preds if down else succs

            def key(n: str, near=near) -> float:
                others = near[n]
                if not others:
                    return position[n]
                return sum(position[o] for o in others) / len(others)

            row.sort(key=key)
            position.update((n, i) for i, n in enumerate(row))
    return rows


def layout(pic: Picture) -> dict[str, tuple[float, float, float, float]]:
    """(x, y, width, height) per node: each under the mean of its producers,
    pushed right past its left neighbour."""
    sizes = _sizes(pic)
    preds: dict[str, list[str]] = {n.id: [] for n in pic.nodes}
    for e in pic.edges:
        preds[e.dst].append(e.src)
    boxes: dict[str, tuple[float, float, float, float]] = {}
    y = TITLE_H + MARGIN
    for row in layers(pic):
        right = -1e9
        height = max(sizes[n][1] for n in row)
        for n in row:
            w, h = sizes[n]
            above = [boxes[p][0] + boxes[p][2] / 2 for p in preds[n] if p in boxes]
            centre = sum(above) / len(above) if above else right + NODE_GAP + w / 2
            x = max(centre - w / 2, right + NODE_GAP)
            boxes[n] = (x, y, w, h)
            right = x + w
        y += height + LAYER_GAP
    left = min((b[0] for b in boxes.values()), default=0.0)
    shift = MARGIN + PAD - left
    return {n: (x + shift, y, w, h) for n, (x, y, w, h) in boxes.items()}


def render(pic: Picture) -> str:
    """One picture as a standalone <svg> element."""
    boxes = layout(pic)
    width = max((x + w for x, _, w, _ in boxes.values()), default=0) + MARGIN + PAD
    height = max((y + h for _, y, _, h in boxes.values()), default=0) + MARGIN
    color = {g.id: g.color for g in pic.groups}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height:.0f}" font-family="Helvetica, Arial, sans-serif">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" '
        'markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" '
        'fill="#555"/></marker></defs>',
        f'<text x="{MARGIN}" y="{MARGIN}" font-size="15" font-weight="bold">'
        f"{escape(pic.title)}</text>",
    ]
    for g in pic.groups:
        xs = [boxes[n] for n in g.nodes]
        x0 = min(b[0] for b in xs) - PAD
        y0 = min(b[1] for b in xs) - PAD - 10
        x1 = max(b[0] + b[2] for b in xs) + PAD
        y1 = max(b[1] + b[3] for b in xs) + PAD
        out.append(
            f'<g class="kernel" id="{g.id}"><title>{g.id}: {escape(g.kind)}, '
            f'{len(g.nodes)} ops</title><rect x="{x0:.1f}" y="{y0:.1f}" '
            f'width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" rx="8" fill="{g.color}" '
            f'fill-opacity="0.35" stroke="{g.color}" stroke-width="2"/>'
            f'<text x="{x0 + 5:.1f}" y="{y0 + 11:.1f}" font-size="9" fill="#333">'
            f"{g.id} {escape(g.kind)}</text></g>"
        )
    fan_out: dict[str, int] = {}
    for e in pic.edges:
        fan_out[e.src] = fan_out.get(e.src, 0) + 1
    for e in pic.edges:
        sx, sy, sw, sh = boxes[e.src]
        tx, ty, tw, _ = boxes[e.dst]
        x1, y1, x2, y2 = sx + sw / 2, sy + sh, tx + tw / 2, ty
        bend = max(20.0, (y2 - y1) / 2)
        stroke = 'stroke="#aaa" stroke-dasharray="4 3"' if e.inner else 'stroke="#555"'
        out.append(
            f'<path d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},'
            f'{y2 - bend:.1f} {x2:.1f},{y2:.1f}" fill="none" {stroke} '
            'marker-end="url(#arrow)"/>'
        )
        fill = "#999" if e.inner else "#333"
        # a fan-out's labels go by their targets, where the edges are apart
        lx, ly = ((x2, y2 - 10) if fan_out[e.src] > 1 else
                  ((x1 + x2) / 2, (y1 + y2) / 2 + 3))  # fmt: skip
        out.append(
            f'<text x="{lx + 4:.1f}" y="{ly:.1f}" font-size="8" fill="{fill}">'
            f"{escape(edge_label(e))}</text>"
        )
    for n in pic.nodes:
        x, y, w, h = boxes[n.id]
        fill = color.get(n.group or "", "#ffffff")
        dash = ' stroke-dasharray="4 2"' if n.kind == "view" else ""
        rx = h / 2 if n.kind in ("input", "output") else 5
        tip = f"{n.op or n.kind}: " + ", ".join(t for t, _ in n.outputs)
        tip += f" (ONNX {', '.join(n.onnx)})" if n.onnx else ""
        out.append(
            f'<g class="node {n.kind}"><title>{escape(tip)}</title><rect '
            f'x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx:.1f}" '
            f'fill="{fill}" stroke="#333"{dash}/>'
        )
        for i, line in enumerate(node_text(n).splitlines()):
            size = 11 if i == 0 else 9
            out.append(
                f'<text x="{x + w / 2:.1f}" y="{y + 15 + i * NODE_H * 0.8:.1f}" '
                f'font-size="{size}" text-anchor="middle">{escape(line)}</text>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def render_all(pics: list[Picture], title: str) -> str:
    """The pictures side by side in one SVG document, under `title`."""
    parts = [render(p) for p in pics]
    sizes = [_svg_size(p) for p in parts]
    width = sum(w for w, _ in sizes) + MARGIN * (len(parts) + 1)
    height = max((h for _, h in sizes), default=0) + TITLE_H + MARGIN
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height:.0f}" font-family="Helvetica, Arial, sans-serif">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{MARGIN}" y="{MARGIN + 4}" font-size="18" font-weight="bold">'
        f"{escape(title)}</text>",
    ]
    x = float(MARGIN)
    for part, (w, _) in zip(parts, sizes, strict=True):
        out.append(part.replace("<svg ", f'<svg x="{x:.0f}" y="{TITLE_H}" ', 1))
        x += w + MARGIN
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _svg_size(svg: str) -> tuple[float, float]:
    head = svg[: svg.index(">")]

    def number(name: str) -> float:
        return float(head.split(f'{name}="', 1)[1].split('"', 1)[0])

    return number("width"), number("height")
