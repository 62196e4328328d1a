"""How a training graph is split between forward and backward: what the backward gets saved.

torch's min-cut partitioner (`min_cut_rematerialization_partition`, inductor's) decides, per
node of the joint graph, whether the backward gets it saved or recomputes it. Two choices are
made for it here, by tagging forward nodes `recompute` before it runs:

- **Attention scores and probabilities** (`training_decomps.RECOMPUTE`): recomputed from Q, K
  and the row log-sum-exp, as the flash kernel's backward does; saved, they would be a (heads,
  length, length) tensor per layer where eager saves none (min-cut never recomputes a matmul,
  and the probabilities feed the backward's matmuls).
- **Cheap activations over tensors the backward keeps anyway**: a pointwise op (GELU, the
  residual add, a mask applied by multiplication, a copy) or a layer or group norm (one pass
  over the row) whose tensor inputs are parameters, tensors the backward reads itself, or other
  such activations (views of them included). min-cut bans recomputing a node the backward must
  materialize (the GELU output feeds the weight gradient's matmul), which saves it beside its
  input: for a BERT layer both the FFN's pre- and post-GELU tensors. Recomputed, the backward
  writes it once more into its arena, where it lives only until that matmul reads it. Batch
  norm in training mode is decomposed (`training_decomps`: statistics, then a pointwise
  normalization), so its normalized output and the ReLU after it are recomputed from the conv
  output and the batch statistics the batch norm's backward keeps.
  Never recomputed: random ops (the backward uses the mask the forward drew, saved), ops with a
  mutable schema, and anything reading a buffer that is not a parameter (the forward may update
  it in place, batch norm's running statistics; saved for a recomputation, torch's version
  check would fail when the update is written back).
Measured: `python -m benchmarks --training` (README, "Training").
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten

# one pass over each row or group, recomputed from the input the backward keeps for its own
# gradient (mean and reciprocal deviation come out again bit for bit: the same kernel)
NORMALIZATIONS = frozenset({aten.native_layer_norm.default, aten.native_group_norm.default})


def _cheap(node: torch.fx.Node) -> bool:
    """A forward op that costs one memory-bound pass to run again, and gives the same bits."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return target in NORMALIZATIONS or torch.Tag.pointwise in target.tags


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
