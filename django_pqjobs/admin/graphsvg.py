"""A graph of jobs, drawn as SVG: the jobs around a job or in a batch (nodes coloured by
status, each a link to its page; edges for dependencies, members, children and callbacks),
laid out left to right (pure: no database). What the pages read for it:
``pictures.job_graph_svg`` and ``pictures.batch_pictures``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from . import composition, display, svg

MAX_NODES = 48  # of a graph, the "more" nodes aside
GONE_COLOUR = "#a0aec0"
BATCH_COLOUR = "#4a5568"


@dataclass(frozen=True)
class Node:
    """A node of a graph: a job (``status`` its status, None when its row is gone), a
    batch (``kind`` "batch"), or the jobs left out (``kind`` "more", ``count`` of them)."""

    key: str
    label: str
    sub: str = ""
    url: str = ""
    status: str | None = None
    kind: str = "job"  # job, batch, more
    focus: bool = False
    count: int = 0


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "depends", "member", "child", "callback", "more"
    title: str = ""


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    label: str = "jobs"

    _keys: set[str] = field(default_factory=set, repr=False)
    _links: set[tuple[str, str]] = field(default_factory=set, repr=False)

    def add(self, node: Node) -> None:
        """Add ``node`` unless a node of its key is there."""
        if node.key not in self._keys:
            self._keys.add(node.key)
            self.nodes.append(node)

    def link(self, source: str, target: str, kind: str, title: str = "") -> None:
        """Add an edge from ``source`` to ``target`` (keys) unless they have one."""
        if (source, target) not in self._links and source != target:
            self._links.add((source, target))
            self.edges.append(Edge(source, target, kind, title))


def job_node(
    pk: int, status: str | None, job_type: str = "", focus: bool = False, what: str = ""
) -> Node:
    """A job's node: ``#12 failed`` over its type, a link to its page."""
    label = f"#{pk} {status or '(gone)'}"
    sub = svg.clean(job_type, 22, keep_end=True) if job_type else what
    return Node(f"job:{pk}", label, sub, composition.job_url(pk), status, "job", focus)


def more_node(key: str, count: int, url: str, capped: bool = False) -> Node:
    """The jobs left out: ``+9,950 more``, a link to them in the job list."""
    text = f"+{count:,}{'+' if capped else ''} more"
    return Node(f"more:{key}", text, "in the job list", url, None, "more", count=count)


_EDGE_COLOURS = {
    "depends": "#4a5568",
    "child": "#3182ce",
    "member": "#a0aec0",
    "callback": "#805ad5",
    "more": "#a0aec0",
}


def graph_svg(graph: Graph, max_nodes: int = MAX_NODES) -> SafeString:
    """The graph, left to right: each node in a column after the nodes with edges to it
    (a longest-path layering), a column of many wrapped into sub-columns. Nodes are
    coloured by status and link to their pages; edges are arrows. At most ``max_nodes``
    jobs (besides batches and "more" nodes): those past it are counted in the caption."""
    jobs = [n for n in graph.nodes if n.kind == "job"]
    kept = {n.key for n in jobs[:max_nodes]}
    dropped = len(jobs) - len(kept)
    nodes = [n for n in graph.nodes if n.kind != "job" or n.key in kept]
    keys = {n.key for n in nodes}
    edges = [e for e in graph.edges if e.source in keys and e.target in keys]
    if not nodes:
        return mark_safe("")
    layer = {n.key: 0 for n in nodes}
    for _ in range(len(nodes)):  # longest path; a cycle stops after len(nodes) rounds
        moved = False
        for e in edges:
            if layer[e.target] < layer[e.source] + 1 <= len(nodes):
                layer[e.target] = layer[e.source] + 1
                moved = True
        if not moved:
            break
    columns: dict[int, list[Node]] = {}
    for n in nodes:
        columns.setdefault(layer[n.key], []).append(n)
    node_w, node_h, gap_x, gap_y, pad, per_column = 150, 32, 44, 10, 10, 10
    place: dict[str, tuple[float, float]] = {}
    # a column wrapped into sub-columns: its left edge, top and bottom (edges from one
    # node to many of its nodes are drawn as one arrow to a bracket beside it)
    wrapped: dict[int, tuple[float, float, float]] = {}
    x = pad
    tallest = 0
    for number in sorted(columns):
        column = columns[number]
        rows = min(len(column), per_column)
        tallest = max(tallest, rows)
        for i, n in enumerate(column):
            sub_column, row = divmod(i, per_column)
            place[n.key] = (x + sub_column * (node_w + 12), pad + row * (node_h + gap_y))
        if len(column) > per_column:
            wrapped[number] = (x, pad, pad + rows * (node_h + gap_y) - gap_y)
        x += math.ceil(len(column) / per_column) * (node_w + 12) - 12 + gap_x
    width = int(x - gap_x + pad)
    height = int(pad * 2 + tallest * (node_h + gap_y) - gap_y) + (16 if dropped else 0)
    lines = []
    buses: dict[tuple[str, int], list[Edge]] = {}
    for e in edges:
        if layer[e.target] in wrapped and e.kind in ("member", "callback", "more", "child"):
            buses.setdefault((e.source, layer[e.target]), []).append(e)
    for (source, number), bus in buses.items():
        if len(bus) < 2:
            continue
        sx, sy = place[source]
        left, top, bottom = wrapped[number]
        x1, y1, x2, y2 = sx + node_w, sy + node_h / 2, left - 8, (top + bottom) / 2
        bend = max((x2 - x1) / 2, 10)
        lines.append(
            (
                # the bracket, then the arrow to it (the path's end takes the arrowhead)
                f"M{x2 + 4:.1f} {top:.1f}L{x2:.1f} {top:.1f}L{x2:.1f} {bottom:.1f}"
                f"L{x2 + 4:.1f} {bottom:.1f}M{x1:.1f} {y1:.1f}C{x1 + bend:.1f} {y1:.1f} "
                f"{x2 - bend:.1f} {y2:.1f} {x2:.1f} {y2:.1f}",
                _EDGE_COLOURS.get(bus[0].kind, "#4a5568"),
                bus[0].kind,
                svg.clean(f"{bus[0].title or bus[0].kind}: {len(bus)} drawn", svg.TITLE_CHARS),
            )
        )
        edges = [e for e in edges if e not in bus]
    for e in edges:
        sx, sy = place[e.source]
        tx, ty = place[e.target]
        x1, y1, x2, y2 = sx + node_w, sy + node_h / 2, tx, ty + node_h / 2
        bend = max((x2 - x1) / 2, 10)
        lines.append(
            (
                f"M{x1:.1f} {y1:.1f}C{x1 + bend:.1f} {y1:.1f} {x2 - bend:.1f} {y2:.1f} "
                f"{x2:.1f} {y2:.1f}",
                _EDGE_COLOURS.get(e.kind, "#4a5568"),
                e.kind,
                svg.clean(e.title or e.kind, svg.TITLE_CHARS),
            )
        )
    boxes = [_node_box(n, *place[n.key], node_w, node_h) for n in nodes]
    caption = (
        format_html(
            '<text x="{}" y="{}" font-size="11" style="{}">and {} more not drawn</text>',
            pad,
            height - 4,
            svg.TEXT,
            f"{dropped:,}",
        )
        if dropped
        else ""
    )
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" '
        'style="max-width:100%;height:auto" class="pqjobs-chart pqjobs-graph" '
        'role="group" aria-label="{}">'
        '<defs><marker id="pqjobs-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M0 0L10 5L0 10z" fill="#718096"/></marker></defs>'
        '<rect width="100%" height="100%" style="{}"/>{}{}{}</svg>',
        width,
        height,
        width,
        height,
        svg.clean(graph.label, svg.TITLE_CHARS),
        svg.BACKGROUND,
        format_html_join(
            "",
            '<path d="{}" fill="none" stroke="{}" stroke-width="1.5" '
            'marker-end="url(#pqjobs-arrow)" class="pqjobs-edge pqjobs-edge-{}">'
            "<title>{}</title></path>",
            lines,
        ),
        format_html_join("", "{}", ((b,) for b in boxes)),
        caption,
    )


def _node_box(node: Node, x: float, y: float, w: int, h: int) -> SafeString:
    if node.kind == "more":
        fill, text_style = "#fff", svg.STRONG_TEXT  # (filled: the whole box takes the click)
        outline = "fill: var(--body-bg, #fff);stroke-dasharray:4 3;" + svg.LINE
    elif node.kind == "batch":
        fill, text_style, outline = BATCH_COLOUR, "fill:#fff", "stroke:none"
    else:
        fill = (
            display.STATUS_COLOURS.get(node.status, svg.UNKNOWN_COLOUR)
            if node.status
            else GONE_COLOUR
        )
        text_style = "fill:#fff"
        outline = "stroke: var(--body-fg, #333);stroke-width:3" if node.focus else "stroke:none"
    title = f"{node.label} {node.sub}".strip()
    if node.kind == "job":
        title = f"job {title}{' (this job)' if node.focus else ''}"
    body = format_html(
        '<title>{}</title><rect x="{}" y="{}" width="{}" height="{}" rx="6" fill="{}" '
        'style="{}"/><text x="{}" y="{}" font-size="11" font-weight="bold" style="{}">{}</text>'
        '<text x="{}" y="{}" font-size="10" style="{}">{}</text>',
        svg.clean(title, svg.TITLE_CHARS),
        f"{x:.1f}",
        f"{y:.1f}",
        w,
        h,
        fill,
        outline,
        f"{x + 7:.1f}",
        f"{y + 13:.1f}",
        text_style,
        svg.clean(node.label, 24),
        f"{x + 7:.1f}",
        f"{y + 26:.1f}",
        text_style,
        svg.clean(node.sub, 26),
    )
    classes = f"pqjobs-node pqjobs-node-{node.kind}"
    status = node.status or ""
    if node.url:
        return format_html(
            '<a href="{}" class="{}" data-status="{}" data-key="{}">{}</a>',
            node.url,
            classes,
            status,
            node.key,
            body,
        )
    return format_html(
        '<g class="{}" data-status="{}" data-key="{}">{}</g>', classes, status, node.key, body
    )
