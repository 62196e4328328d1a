"""How a graph shows itself: text for a terminal, SVG (graphviz `dot`) or HTML in a notebook."""

from __future__ import annotations

import html
import shutil
import subprocess

from luminal.hlir.ops import ConstantArray, Op, count_ops


def _label(node) -> str:
    shape = "[" + ", ".join(str(d) for d in node.shape) + "]"
    arg = node.arg
    if node.op is Op.INPUT:
        detail = f" {arg}"
    elif node.op is Op.CONSTANT:
        detail = f" {arg.name}" if isinstance(arg, ConstantArray) else f" {arg}"
    elif node.op is Op.VIEW:
        detail = ""
    elif arg is not None:
        detail = f" {arg}"
    else:
        detail = ""
    return f"{node.op.title}{detail} {node.dtype.short}{shape}"


class _View:
    """What the display functions need of a graph: a name, (name, node) outputs, its nodes."""

    def __init__(self, name, outputs):
        from luminal.hlir.ops import toposort

        self.name, self.outputs = name, list(outputs)
        self._nodes = toposort([n for _, n in self.outputs])

    def nodes(self):
        return self._nodes

    def op_counts(self):
        return count_ops(self._nodes)


def outputs_view(name: str, names, nodes) -> _View:
    """Display any list of output nodes (e.g. an optimized graph) like a builder Graph."""
    return _View(name, zip(names, nodes))


def _numbered(graph):
    nodes = graph.nodes()
    return nodes, {id(n): i for i, n in enumerate(nodes)}


def graph_text(graph) -> str:
    nodes, ids = _numbered(graph)
    counts = ", ".join(f"{k}: {v}" for k, v in graph.op_counts().items())
    lines = [f"Graph {graph.name!r}: {len(nodes)} nodes ({counts})"]
    outs = {id(n): name for name, n in graph.outputs}
    for i, n in enumerate(nodes):
        srcs = ", ".join(f"%{ids[id(s)]}" for s in n.src)
        tail = f"  -> output {outs[id(n)]!r}" if id(n) in outs else ""
        lines.append(f"  %{i} = {_label(n)}" + (f" ({srcs})" if srcs else "") + tail)
    return "\n".join(lines)


def graph_html(graph) -> str:
    nodes, ids = _numbered(graph)
    rows = "".join(
        f"<tr><td>%{i}</td><td>{html.escape(n.op.title)}</td><td>{n.dtype.short}</td>"
        f"<td>{html.escape(str(list(n.shape)))}</td>"
        f"<td>{', '.join(f'%{ids[id(s)]}' for s in n.src)}</td></tr>"
        for i, n in enumerate(nodes)
    )
    head = "<tr><th>id</th><th>op</th><th>dtype</th><th>shape</th><th>inputs</th></tr>"
    return f"<b>Graph {html.escape(graph.name)}</b> ({len(nodes)} nodes)<table>{head}{rows}</table>"


def graph_dot(graph) -> str:
    nodes, ids = _numbered(graph)
    lines = ["digraph luminal {", "  rankdir=TB; node [shape=box, fontname=monospace, fontsize=10];"]
    colors = {Op.INPUT: "lightblue", Op.CONSTANT: "lightgrey", Op.VIEW: "white"}
    for i, n in enumerate(nodes):
        color = colors.get(n.op, "khaki")
        lines.append(f'  n{i} [label="{_label(n)}", style=filled, fillcolor={color}];')
        for s in n.src:
            lines.append(f"  n{ids[id(s)]} -> n{i};")
    for name, n in graph.outputs:
        lines.append(f'  out_{name} [label="{name}", shape=ellipse];  n{ids[id(n)]} -> out_{name};')
    lines.append("}")
    return "\n".join(lines)


def graph_svg(graph) -> str | None:
    """SVG through graphviz's `dot` when it is installed; None lets Jupyter fall back to HTML."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    try:
        done = subprocess.run([dot, "-Tsvg"], input=graph_dot(graph), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
