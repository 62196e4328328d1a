"""How a training graph is split between forward and backward: what the backward gets saved.

torch's min-cut partitioner (`min_cut_rematerialization_partition`, inductor's) decides, per
node of the joint graph, whether the backward gets it saved or recomputes it. Two choices are
made for it here, by tagging forward nodes `recompute` before it runs:

- **Attention scores and probabilities** (`training_decomps.RECOMPUTE`): recomputed from Q, K
  and the row log-sum-exp, as the flash kernel's backward does; saved, they would be a (heads,
  length, length) tensor per layer where eager saves none (min-cut never recomputes a matmul,
  and the probabilities feed the backward's matmuls).
- **Cheap activations over tensors the backward keeps anyway**: a pointwise op (a residual add,
  SiLU, a mask applied by multiplication, a copy) whose tensor inputs are parameters, tensors
  the backward reads itself, or other such activations (views of them included). min-cut bans
  recomputing a node the backward must materialize (a norm's output feeds the weight gradient's
  matmul), which saves it beside its input. Recomputed, the backward writes it once more into
  its arena, where it lives only until that matmul reads it. GELU is one of them (its input is
  the FFN's first matmul's output, which GELU's own backward reads): luminal's erf GELU is one
  fused pass, so recomputing it costs no measurable time and saves a (tokens, FFN width) tensor
  per layer (README, "Training"). Norms are split so that only their pointwise part is
  recomputed, over the row statistics their own backward keeps: a float32 layer norm here
  (`_split_layer_norms`), batch norm in training mode by its decomposition
  (`training_decomps`), so its output and the ReLU after it come from the conv output again.
  Never recomputed: random ops (the backward uses the mask the forward drew, saved), ops with a
  mutable schema, and anything reading a buffer that is not a parameter (the forward may update
  it in place, batch norm's running statistics; saved for a recomputation, torch's version
  check would fail when the update is written back).
Measured: `python -m benchmarks --training` (README, "Training").
"""

from __future__ import annotations

import functools
import operator

import torch

aten = torch.ops.aten

def _cheap(node: torch.fx.Node) -> bool:
    """A forward op that costs one memory-bound pass to run again, and gives the same bits."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return torch.Tag.pointwise in target.tags


def _call(graph: torch.fx.Graph, mode, op, *args) -> torch.fx.Node:
    """A new node op(*args) at the graph's insertion point, its value (`meta["val"]`, which the
    partitioner sizes nodes by) computed on the arguments' fake tensors."""
    new = graph.call_function(op, args)
    with mode:
        new.meta["val"] = op(*[a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args])
    return new


def _split_layer_norms(graph: torch.fx.Graph) -> None:
    """Each float32 `native_layer_norm` whose output the forward uses gets that output rewritten as
    the pointwise ops luminal lowers it to, ((x - mean) * rstd) * weight + bias, over the mean and
    rstd the op returns (which its backward keeps): the same expression, so the forward's graph is
    unchanged after luminal's common-subexpression merge, and the backward can recompute the
    output in one elementwise pass rather than the whole norm (its two row reductions included)."""
    from torch._guards import detect_fake_mode

    order = {n: i for i, n in enumerate(graph.nodes)}  # the nodes read below all predate the rewrites
    for node in list(graph.nodes):
        if node.target is not aten.native_layer_norm.default:
            continue
        x, _shape, weight, bias = node.args[:4]
        val = x.meta.get("val")
        outs = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        if val is None or val.dtype != torch.float32 or 0 not in outs or not outs[0].users:
            continue
        mode = detect_fake_mode([val])
        call = functools.partial(_call, graph, mode)
        first_use = min(outs[0].users, key=order.__getitem__)
        if any(order[outs[i]] > order[first_use] for i in (1, 2) if i in outs):
            continue
        with graph.inserting_before(first_use):
            stats = [outs[i] if i in outs else call(operator.getitem, node, i) for i in (1, 2)]
            out = call(aten.mul.Tensor, call(aten.sub.Tensor, x, stats[0]), stats[1])
            if weight is not None:
                out = call(aten.mul.Tensor, out, weight)
            if bias is not None:
                out = call(aten.add.Tensor, out, bias)
        outs[0].replace_all_uses_with(out)
        graph.erase_node(outs[0])


def _is_view(node: torch.fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _trainable(nodes: list, gradients: list) -> set:
    """The joint graph's inputs that get a gradient (its outputs after the forward's, one per primal
    input): parameters, which the forward cannot have changed in place (autograd forbids it), so
    saving them for a recomputation is safe. A buffer the forward updates (batch norm's running
    statistics) is not: saved, torch's version check would fail when the update is written back."""
    primals = [n for n in nodes if n.op == "placeholder" and n.name.startswith("primals")]
    if len(primals) != len(gradients):  # not the layout expected: no input counts
        return set()
    return {p for p, g in zip(primals, gradients) if g is not None}


def partition(joint, *args, num_fwd_outputs: int, **kwargs):
    """torch's min-cut partition of `joint`, with the recomputations the module docstring names."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.utils.checkpoint import CheckpointPolicy

    from luminal.frontends.torch.training_decomps import RECOMPUTE

    _split_layer_norms(joint.graph)
    nodes = list(joint.graph.nodes)
    outputs = next(n for n in reversed(nodes) if n.op == "output").args[0]
    forward: set = set()  # what the forward's outputs need (the backward's nodes are never tagged)
    stack = [a for a in outputs[:num_fwd_outputs] if isinstance(a, torch.fx.Node)]
    while stack:
        node = stack.pop()
        if node not in forward:
            forward.add(node)
            stack.extend(node.all_input_nodes)
    kept = {a for node in nodes if node not in forward for a in node.all_input_nodes if a in forward}  # read by the backward
    for node in reversed(nodes):  # a view of a kept tensor keeps its base alive too
        if node in forward and any(_is_view(user) and user in kept for user in node.users):
            kept.add(node)
    recomputed: set = set()
    available = kept | _trainable(nodes, outputs[num_fwd_outputs:])  # in the backward without saving more
    for node in nodes:
        if node not in forward or node.op != "call_function":
            continue
        if node.target is operator.getitem:  # an output of a multi-output op: recomputed with it
            if node.args[0] in recomputed:
                recomputed.add(node)
                available.add(node)
        elif node.meta.get("custom", {}).get(RECOMPUTE) or (
                _cheap(node) and all(a in available for a in node.all_input_nodes)):
            recomputed.add(node)
            available.add(node)
        elif _is_view(node) and all(a in available for a in node.all_input_nodes):
            available.add(node)  # left to the partitioner (a view saves no memory), but its base is there
    for node in recomputed:
        node.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
    return min_cut_rematerialization_partition(joint, *args, num_fwd_outputs=num_fwd_outputs, **kwargs)
