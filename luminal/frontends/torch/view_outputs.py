"""Outputs of a Dynamo graph that are views of an input or of another output stay views.

In eager, `return x.t(), z, z.view(-1)` returns tensors that share memory with `x` and `z`:
mutate `x` or `z` in place afterwards and the views follow. torch.compile keeps that (aot_autograd
regenerates aliased outputs as views); luminal computed each output into its own buffer, so the
views went stale silently. Such outputs now come out of the graph luminal compiles, and each call
replays their view ops in torch on the input or output they view (`with_views`), which also saves
the copy.

Only ops that always return a view are replayed (`reshape` and `flatten` copy when they cannot
view, and luminal's output need not have eager's strides), with constant arguments (a symbolic
size stays in the graph). A graph whose every output is such a view is left whole.
"""

from __future__ import annotations

import operator

import torch

# torch-level view ops as Dynamo records them: Tensor methods by name, and functions
VIEW_METHODS = frozenset({"t", "view", "transpose", "permute", "unsqueeze", "squeeze", "expand", "narrow", "select",
                          "diagonal", "unflatten", "detach", "__getitem__", "movedim", "swapaxes", "swapdims"})
VIEW_FUNCTIONS = frozenset({torch.t, torch.transpose, torch.permute, torch.unsqueeze, torch.squeeze, torch.narrow,
                            torch.select, torch.diagonal, torch.movedim, torch.swapaxes, torch.swapdims, operator.getitem,
                            torch.detach})


def _basic_index(index) -> bool:
    """A basic index (ints, slices of ints, None, Ellipsis, tuples of them): getitem then views."""
    if isinstance(index, tuple):
        return all(_basic_index(i) for i in index)
    if isinstance(index, slice):
        return all(v is None or type(v) is int for v in (index.start, index.stop, index.step))
    return index is None or index is Ellipsis or type(index) is int


def _view_step(node) -> tuple | None:
    """(kind, target, constant args, kwargs) of a view op node, else None."""
    if node.op == "call_method" and node.target in VIEW_METHODS:
        kind = "method"
    elif node.op == "call_function" and node.target in VIEW_FUNCTIONS:
        kind = "function"
    else:
        return None
    rest = (tuple(node.args[1:]), dict(node.kwargs))
    if any(isinstance(a, torch.fx.Node) for a in torch.utils._pytree.tree_leaves(rest)):
        return None  # a size computed in the graph
    if node.target in ("__getitem__", operator.getitem) and not _basic_index(node.args[1]):
        return None  # advanced indexing copies
    return kind, node.target, *rest


def _chain(node, bases: dict) -> tuple | None:
    """(base, [view steps from it]) when `node` is a chain of view ops from a node in `bases`."""
    steps = []
    while node not in bases:
        step = _view_step(node) if isinstance(node, torch.fx.Node) else None
        if step is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
            return None
        steps.append(step)
        node = node.args[0]
    return node, steps[::-1]


def take_out_views(gm: torch.fx.GraphModule):
    """(the graph without its view outputs, [(output position, ("input" | "output", position), steps)])."""
    nodes = list(gm.graph.nodes)
    if not nodes or nodes[-1].op != "output" or not isinstance(nodes[-1].args[0], (tuple, list)):
        return gm, []
    outputs = list(nodes[-1].args[0])
    placeholders = {n: ("input", i) for i, n in enumerate(n for n in nodes if n.op == "placeholder")}
    computed = [i for i, out in enumerate(outputs) if isinstance(out, torch.fx.Node) and out.op != "placeholder"]
    views = {}
    for i in computed:  # views of an input
        found = _chain(outputs[i], placeholders)
        if found is not None and found[1]:
            views[i] = (placeholders[found[0]], found[1])
    kept: dict = {}  # what the graph still computes, at its first position
    for i in computed:
        if i not in views:
            kept.setdefault(outputs[i], i)
    for i in computed:  # views of one of those
        if i not in views and kept[outputs[i]] == i:
            found = _chain(outputs[i], {n: j for n, j in kept.items() if j != i})
            if found is not None and found[1]:
                views[i] = (("output", kept[found[0]]), found[1])
    views = {i: v for i, v in views.items() if v[0][0] == "input" or v[0][1] not in views}  # a view's base stays computed
    if not views or len(views) == len(outputs):
        return gm, []
    graph = torch.fx.Graph()
    mapping: dict = {}
    graph.graph_copy(gm.graph, mapping)
    graph.output(tuple(mapping[o] if isinstance(o, torch.fx.Node) else o for i, o in enumerate(outputs) if i not in views))
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph), sorted((i, base, steps) for i, (base, steps) in views.items())


def _replay(tensor, steps):
    for kind, target, args, kwargs in steps:
        tensor = getattr(tensor, target)(*args, **kwargs) if kind == "method" else target(tensor, *args, **kwargs)
    return tensor


def with_views(compiled, views: list):
    """`compiled` (the backend's function for the graph without its view outputs; Dynamo calls a
    backend's result with the inputs as arguments) returning every output, the views made by
    replaying their ops on the input or output they view."""
    positions = {i for i, _, _ in views}

    def call(*args):
        results = compiled(*args)
        outs = [None] * (len(results) + len(views))
        rest = iter(results)
        for k in range(len(outs)):
            if k not in positions:
                outs[k] = next(rest)
        for i, (kind, j), steps in views:
            outs[i] = _replay(args[j] if kind == "input" else outs[j], steps)
        return outs

    return call
