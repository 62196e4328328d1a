"""Cut a graph into parts so that repeated layers are optimized once (structural hashing).

The activation nodes (those that depend on a graph input) are walked in topological order; a
*cut* is a node that is, right after it was computed, the only activation value still needed
later: the residual stream between two transformer half-layers, say. The nodes between two
cuts form a segment. Weights and inputs are *slots* (abstracted by dtype and shape); computed
values that depend on no input (RoPE tables, causal masks, scalar constants) are copied into
every segment that reads them, so the rules still see the constants they match on.

A segment's signature is its canonical listing (ops, dtypes, shapes, args, operand structure,
slot dtypes and shapes): equal signatures mean isomorphic subgraphs, so one optimized template
serves every instance. Segments whose signature repeats and that are big enough stay parts of
their own; runs of the others merge into one part, so that small segments (a chain of
elementwise ops is a cut at every node) do not hide patterns that span them.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from luminal.hlir.ops import ConstantArray, Node, Op, toposort

MIN_PART_NODES = 16  # a repeated segment smaller than this is merged with its neighbours


class Signature:
    """A part's canonical listing with its hash computed once: the listing is a big nested tuple
    (tuples do not cache their hash), looked up in several dicts per part."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: tuple):
        self.key, self._hash = key, hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (isinstance(other, Signature) and self._hash == other._hash and self.key == other.key)


@dataclass
class Part:
    nodes: list[Node]  # canonical listing, operands first; slots excluded
    slots: list[Node]  # inputs, weights and values computed by earlier parts
    outputs: list[int]  # indices into nodes: the values used after this part
    signature: Signature


def is_slot_leaf(n: Node) -> bool:
    return n.op is Op.INPUT or (n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray))


def partition(outputs: list[Node]) -> list[Part]:
    order = toposort(outputs)
    active: set[int] = set()
    for n in order:
        if n.op is Op.INPUT or any(id(s) in active for s in n.src):
            active.add(id(n))
    acts = [n for n in order if id(n) in active and n.op is not Op.INPUT]
    if not acts:
        return [make_part(list(outputs), set(), set())]
    segments = _segments(acts, outputs)
    exported = _exported(segments, outputs)
    first = [make_part([n for n in seg if id(n) in exported], {id(n) for n in seg}, active) for seg in segments]
    canonical: dict[Signature, Signature] = {}
    for p in first:  # equal signatures as one object: every later lookup (here, the template cache, the
        p.signature = canonical.setdefault(p.signature, p.signature)  # pipeline's) is an identity test
    sigs = [p.signature for p in first]
    sizes = collections.Counter(sigs)
    groups: list[list[Node]] = []
    ready: dict[int, Part] = {}  # group index -> its part, when the group is one whole segment
    merging = False
    for seg, sig, part in zip(segments, sigs, first):
        alone = sizes[sig] > 1 and len(seg) >= MIN_PART_NODES
        if alone or not merging:
            ready[len(groups)] = part
            groups.append(list(seg))
        else:
            ready.pop(len(groups) - 1, None)
            groups[-1].extend(seg)
        merging = not alone
    parts = []
    inactive_outputs = [n for n in outputs if id(n) not in active]
    exported = _exported(groups, outputs)
    for gi, group in enumerate(groups):
        last = gi == len(groups) - 1
        if gi in ready and not (last and inactive_outputs):
            parts.append(ready[gi])
            continue
        roots = [n for n in group if id(n) in exported]
        if last:  # outputs that depend on no input ride with the last part
            roots += [n for n in inactive_outputs if n not in roots]
        parts.append(make_part(roots, {id(n) for n in group}, active))
    return parts


def _segments(acts: list[Node], outputs: list[Node]) -> list[list[Node]]:
    """Split `acts` (topological order) after every cut."""
    last = {id(n): i for i, n in enumerate(acts)}  # position of the last consumer (or itself)
    for i, n in enumerate(acts):
        for s in n.src:
            if id(s) in last:
                last[id(s)] = i
    closing = collections.Counter(last.values())
    segments, current, open_count = [], [], 0
    for i, n in enumerate(acts):
        current.append(n)
        open_count += 1 if last[id(n)] > i else 0
        open_count -= closing[i] - (1 if last[id(n)] == i else 0)  # values whose last use is n
        if (open_count == 1 and last[id(n)] > i) or i == len(acts) - 1:
            segments.append(current)
            current = []
    return segments


def _exported(groups: list[list[Node]], outputs: list[Node]) -> set[int]:
    """Nodes used outside their own group (by a later group, or as graph outputs)."""
    group_of = {id(n): gi for gi, group in enumerate(groups) for n in group}
    exported = {id(n) for n in outputs}
    for gi, group in enumerate(groups):
        for n in group:
            exported.update(id(s) for s in n.src if group_of.get(id(s), gi) != gi)
    return exported


def make_part(roots: list[Node], members: set[int], active: set[int]) -> Part:
    """The canonical listing of everything `roots` need, stopping at slots.

    A node belongs to the part if it is a member, or if it depends on no input (copied in);
    activation nodes of other parts, inputs and weights become slots.
    """
    nodes, slots, entries, slot_desc = [], [], [], []
    ref: dict[int, tuple] = {}  # id -> ("n", position in nodes) | ("s", position in slots): listed already
    input_op, constant_op = Op.INPUT, Op.CONSTANT
    for root in roots:
        stack = [(root, False)]
        while stack:
            n, ready = stack.pop()
            i = id(n)
            if i in ref:
                continue
            if not ready:
                op = n.op
                if op is input_op or (op is constant_op and isinstance(n.arg, ConstantArray)) or (
                        i in active and i not in members):  # a slot (`is_slot_leaf`, or another part's)
                    ref[i] = ("s", len(slots))
                    slots.append(n)
                    slot_desc.append((n.dtype, n.shape))
                    continue
                stack.append((n, True))
                stack.extend([(s, False) for s in reversed(n.src) if id(s) not in ref])
                continue
            refs = tuple([ref[id(s)] for s in n.src])
            ref[i] = ("n", len(nodes))
            nodes.append(n)
            key = n._key  # (op, dtype, shape, operand ids, `_key(arg)`): the interning key
            entries.append((key[0], key[1], key[2], key[4], refs))
    outs = [ref[id(r)][1] if ref[id(r)][0] == "n" else -1 - ref[id(r)][1] for r in roots]
    signature = Signature((tuple(entries), tuple(slot_desc), tuple(outs)))
    return Part(nodes, slots, outs, signature)
