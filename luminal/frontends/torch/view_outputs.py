"""Outputs that are views of an input or of another output stay views.

In eager, `return x.t(), z, z.view(-1)` returns tensors that share memory with `x` and `z`:
mutate `x` or `z` in place afterwards and the views follow. torch.compile keeps that (aot_autograd
regenerates aliased outputs as views), where a buffer of luminal's own would go stale. So such
outputs come out of the graph luminal compiles, and each call replays their view ops in torch on
the input or output they view (`with_views`), which also saves the copy.

Only ops that always return a view are replayed (`reshape` and `flatten` copy when they cannot
view, and luminal's output need not have eager's strides), with constant arguments (a symbolic
size stays in the graph). A graph whose every output is such a view is left whole. The same
walk serves Dynamo's torch-level graphs (`torch_step`), aot_autograd's and torch.export's ATen
graphs (`aten_step`: `dynamo._without_aliases`, `export.CompiledModel._view_outputs`).
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
# ATen views (a linear layer's `t` or `permute` of its weight, which aot_autograd's forward saves)
VIEW_OPS = frozenset({torch.ops.aten.t.default, torch.ops.aten.permute.default, torch.ops.aten.transpose.int,
                      torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.unsqueeze.default,
                      torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims, torch.ops.aten.expand.default,
                      torch.ops.aten.slice.Tensor, torch.ops.aten.select.int, torch.ops.aten.alias.default})


def _basic_index(index) -> bool:
    """A basic index (ints, slices of ints, None, Ellipsis, tuples of them): getitem then views."""
    if isinstance(index, tuple):
        return all(_basic_index(i) for i in index)
    if isinstance(index, slice):
        return all(v is None or type(v) is int for v in (index.start, index.stop, index.step))
    return index is None or index is Ellipsis or type(index) is int


def _constant(args) -> bool:
    return not any(isinstance(a, torch.fx.Node) for a in torch.utils._pytree.tree_leaves(args))  # else a size the graph computes


def torch_step(node) -> tuple | None:
    """(function, constant args, kwargs) of a Dynamo view op node, else None."""
    if node.op == "call_method" and node.target in VIEW_METHODS:
        fn = getattr(torch.Tensor, node.target)
    elif node.op == "call_function" and node.target in VIEW_FUNCTIONS:
        fn = node.target
    else:
        return None
    args, kwargs = tuple(node.args[1:]), dict(node.kwargs)
    if not _constant((args, kwargs)) or (fn in (torch.Tensor.__getitem__, operator.getitem) and not _basic_index(args[0])):
        return None  # advanced indexing copies
    return fn, args, kwargs


def aten_step(node) -> tuple | None:
    """(op, constant args, {}) of an ATen view op node, else None."""
    if node.op != "call_function" or node.target not in VIEW_OPS or node.kwargs or not _constant(node.args[1:]):
        return None
    return node.target, tuple(node.args[1:]), {}


def chain(node, bases: dict, step) -> tuple | None:
    """(bases[base], [view steps from it]) when FX `node` is a node of `bases` or a chain of view
    ops (`step` recognizes one) from one, else None."""
    steps = []
    while node not in bases:
        found = step(node) if isinstance(node, torch.fx.Node) and node.args else None
        if found is None or not isinstance(node.args[0], torch.fx.Node):
            return None
        steps.append(found)
        node = node.args[0]
    return bases[node], steps[::-1]


def replay(tensor, steps):
    """`tensor` through the view steps of `chain`, in torch."""
    for fn, args, kwargs in steps:
        tensor = fn(tensor, *args, **kwargs)
    return tensor


def find_views(outputs: list, inputs: dict, step) -> list:
    """[(output position, ("input", inputs[node]) | ("output", position), steps)] of the `outputs`
    (FX nodes; anything else is skipped) that view an input or, failing that, another output
    that stays computed (its first position)."""
    computed = [i for i, out in enumerate(outputs) if isinstance(out, torch.fx.Node) and out not in inputs]
    views = {}
    for i in computed:
        found = chain(outputs[i], inputs, step)
        if found is not None and found[1]:
            views[i] = (("input", found[0]), found[1])
    kept: dict = {}
    for i in computed:
        if i not in views:
            kept.setdefault(outputs[i], i)
    for i in computed:
        if i not in views and kept[outputs[i]] == i:
            found = chain(outputs[i], {n: j for n, j in kept.items() if j != i}, step)
            if found is not None and found[1]:
                views[i] = (("output", found[0]), found[1])
    return sorted((i, base, steps) for i, (base, steps) in views.items()  # a view's base stays computed
                  if base[0] == "input" or base[1] not in views)


def take_out_views(gm: torch.fx.GraphModule):
    """(the graph without its view outputs, their `find_views` list; inputs by position)."""
    nodes = list(gm.graph.nodes)
    if not nodes or nodes[-1].op != "output" or not isinstance(nodes[-1].args[0], (tuple, list)):
        return gm, []
    outputs = list(nodes[-1].args[0])
    placeholders = {n: i for i, n in enumerate(n for n in nodes if n.op == "placeholder")}
    views = find_views(outputs, placeholders, torch_step)
    if not views or len(views) == len(outputs):
        return gm, []
    gone = {i for i, _, _ in views}
    graph = torch.fx.Graph()
    mapping: dict = {}
    graph.graph_copy(gm.graph, mapping)
    graph.output(tuple(mapping[o] if isinstance(o, torch.fx.Node) else o for i, o in enumerate(outputs) if i not in gone))
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph), views


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
            outs[i] = replay(args[j] if kind == "input" else outs[j], steps)
        return outs

    return call
