"""The kernel plan of a graph: every launch in order, one CUDA source, buffer lifetimes.

The same plan drives the emulator and CuPy. Every output owns a buffer (a view, input or constant
gets a copy). Kernels with the same body are emitted once (`dedup`), so the source to compile grows
with distinct layers, not depth. Extern steps (`EXTERN`, inductor's `extern_kernels.mm`): MatMul is
"gemm", BLAS in C; on CUDA the generated kernel carries a `cublas.GemmDesc` a launcher may run instead.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from dataclasses import dataclass

from luminal.hlir.ops import ConstantArray, Node, Op, toposort
from luminal.kernels.cublas import GemmDesc
from luminal.kernels.render import CUDA, CUDA_SPECIAL, KernelSpec, render_node

EXTERN = {Op.MAT_MUL: "gemm"}  # op -> extern step kind


@dataclass
class Schedule:
    """What every dialect's plan is made of: the output nodes (each with a buffer of its own),
    the nodes that compute something, in launch order, and the graph's inputs and weights."""

    outputs: list[Node]
    nodes: list[Node]
    inputs: list[Node]
    weights: list[Node]  # CONSTANT nodes holding arrays

    @staticmethod
    def build(outputs: list[Node]) -> Schedule:
        final = []
        for n in outputs:  # every output gets a buffer of its own
            if n.op in (Op.VIEW, Op.INPUT, Op.CONSTANT):
                n = Node(Op.CONTIGUOUS, n.dtype, n.shape, (n,))
            while any(n is f for f in final):  # an output listed twice: nodes are interned, so copy a copy
                n = Node(Op.CONTIGUOUS, n.dtype, n.shape, (n,))
            final.append(n)
        order = launch_order(final)
        nodes = [n for n in order if n.op not in (Op.INPUT, Op.VIEW, Op.CONSTANT)]
        inputs = [n for n in order if n.op is Op.INPUT]
        weights = [n for n in order if n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray)]
        return Schedule(final, nodes, inputs, weights)


def launch_order(final: list[Node]) -> list[Node]:
    """Every node computing `final`, each after its operands, ordered so that buffers live briefly:
    - depth first, operands deepest first: a short chain is made just before it is used, not held
      across a long one beside it;
    - an output, with everything only it reads (its private nodes), is launched as soon as the
      last of the nodes it reads from outside that set is there: its buffer lives the whole call
      anyway, what it reads can be freed, and its private chain is made just before it (not
      when the chain's own operands are, which holds it until the output's other operands come);
    - a view as soon as its operand is there: it costs nothing."""
    walk = toposort(final)
    depth: dict[int, int] = {}
    for n in walk:
        depth[id(n)] = 1 + max((depth[id(s)] for s in n.src), default=0)

    def deepest_first(n: Node):
        return iter(sorted(n.src, key=lambda s: -depth[id(s)]))

    order: list[Node] = []
    seen: set[int] = set()
    for root in final:  # `_toposort`'s walk, operands deepest first (ties: in order)
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, deepest_first(root))]
        while stack:
            node, operands = stack[-1]
            for s in operands:
                if id(s) not in seen:
                    seen.add(id(s))
                    stack.append((s, deepest_first(s)))
                    break
            else:
                stack.pop()
                order.append(node)
    users: dict[int, list[Node]] = {}
    for n in order:
        for s in dict.fromkeys(n.src):
            users.setdefault(id(s), []).append(n)
    # owner: the output a node is private to (the output itself, or a node all of whose readers
    # are private to the same output); a group is an output with its private nodes, in walk order
    outputs = {id(n) for n in final}
    owner: dict[int, int] = {}
    for n in reversed(order):
        if id(n) in outputs:
            owner[id(n)] = id(n)
        elif n.src and id(n) in users:
            owners = {owner.get(id(u)) for u in users[id(n)]}
            if len(owners) == 1 and None not in owners:
                owner[id(n)] = owners.pop()
    groups: dict[int, list[Node]] = {}
    for n in order:
        if id(n) in owner:
            groups.setdefault(owner[id(n)], []).append(n)
    waiting: dict[int, int] = {}  # group (by its output) or view -> operands from outside not yet launched
    readers: dict[int, list[int]] = {}  # node -> the groups and views waiting on it
    for key, members in groups.items():
        inside = {id(m) for m in members}
        outside = {id(s) for m in members for s in m.src if id(s) not in inside}
        waiting[key] = len(outside)
        for s in outside:
            readers.setdefault(s, []).append(key)
    views = {id(n): n for n in order if n.op is Op.VIEW and id(n) not in owner}
    for key, v in views.items():
        waiting[key] = 1
        readers.setdefault(id(v.src[0]), []).append(key)
    launched: list[Node] = []
    done: set[int] = set()

    def launch(n: Node) -> None:
        ready = collections.deque([n])
        while ready:
            m = ready.popleft()
            if id(m) in done:
                continue
            launched.append(m)
            done.add(id(m))
            for key in readers.get(id(m), ()):
                waiting[key] -= 1
                if not waiting[key]:
                    ready.extend(groups[key] if key in groups else (views[key],))

    for n in order:
        if n.op in (Op.INPUT, Op.CONSTANT):  # there from the start
            launch(n)
    for key, members in groups.items():
        if not waiting[key]:  # a group that reads nothing (an iota's output)
            for m in members:
                launch(m)
    for n in order:
        if id(n) not in done and id(n) not in owner and id(n) not in views:
            launch(n)
    # every node once, after its operands: each group's outside operands precede its output in
    # the walk, so a node outside the groups never waits on one (checked: the plan depends on it)
    position = {id(n): i for i, n in enumerate(launched)}
    if len(position) != len(order) or any(position[id(s)] >= position[id(n)] for n in launched for s in n.src):
        raise AssertionError("launch_order: a node launched before its operands, or not at all")
    return launched


@dataclass
class KernelPlan:
    outputs: list[Node]  # the nodes whose buffers are the results (after output copies)
    launches: list[KernelSpec]
    inputs: list[Node]
    weights: list[Node]  # CONSTANT nodes holding arrays: uploaded once
    source: str
    last_use: dict[int, int]  # id(buffer node) -> index of the last launch that reads it

    @staticmethod
    def build(outputs: list[Node]) -> KernelPlan:
        sched = Schedule.build(outputs)
        final, inputs, weights = sched.outputs, sched.inputs, sched.weights
        launches: list[KernelSpec] = []
        bodies: dict[str, str] = {}  # kernel name -> source, each distinct body once
        for node in sched.nodes:
            for k in render_node(node, "@KERNEL@", CUDA, CUDA_SPECIAL):
                if EXTERN.get(node.op) == "gemm":
                    for v in (k, *k.variants):  # every build of the launch may yield to cuBLAS
                        v.extern = GemmDesc.of(node, k.inputs)
                k.variants = [dedup(v, node, bodies) for v in k.variants]
                k.wide = k.wide and dedup(k.wide, node, bodies)
                launches.append(dedup(k, node, bodies))
        dtypes = set().union(*(v.dtypes for k in launches for v in (k, *k.variants, *filter(None, [k.wide])))) if launches else set()
        source = CUDA.prelude(dtypes) + "\n" + "\n".join(bodies.values())
        last_use: dict[int, int] = {}
        for i, k in enumerate(launches):
            for b in k.inputs:
                last_use[id(b)] = i
        return KernelPlan(final, launches, inputs, weights, source, last_use)


def dedup(k: KernelSpec, node: Node, bodies: dict) -> KernelSpec:
    """`k` renamed to `<op>_<hash of its body>` (a kernel is rendered under a placeholder name);
    its source is recorded once in `bodies` (every dialect's plan)."""
    template = k.source.replace(f" {k.name}(", " @KERNEL@(")
    name = f"{node.op.title.lower()}_{hashlib.sha1(template.encode()).hexdigest()[:12]}"
    source = template.replace(" @KERNEL@(", f" {name}(")
    bodies.setdefault(name, source)
    return dataclasses.replace(k, name=name, source=source)


__all__ = ["EXTERN", "KernelPlan", "Schedule", "dedup", "launch_order"]
