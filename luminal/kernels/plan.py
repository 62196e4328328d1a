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

from luminal.hlir import symbolic as sym
from luminal.hlir.ops import POINTWISE, ConstantArray, Node, Op, toposort
from luminal.kernels.cublas import GemmDesc, gemv_max_m
from luminal.kernels.render import CUDA, CUDA_SPECIAL, KernelSpec, inline, render_node
from luminal.kernels.render.attention import cuda_tiled
from luminal.kernels.render.cstyle import is_inline_scalar, view_of
from luminal.kernels.render.gemv import FLOAT_TYPES, GEMV_ROWS
from luminal.kernels.render.kernels import rendering
from luminal.kernels.render.matmul import pair_gemv, residual_gemv

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
    - a node that only outputs' private nodes read, several outputs' (`_shared_by_outputs`), is
      made just before the first of those outputs that can be made, not where the walk meets it;
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
    shared = _shared_by_outputs(order, users, owner, outputs)
    waiting: dict[int, int] = {}  # group (by its output) or view -> operands from outside not yet launched
    readers: dict[int, list[int]] = {}  # node -> the groups and views waiting on it
    pulled: dict[int, list[Node]] = {}  # group -> the shared nodes it makes first, if still not made
    walk_position = {id(n): i for i, n in enumerate(order)}
    for key, members in groups.items():
        inside = {id(m) for m in members}
        outside: set[int] = set()
        stack = [s for m in members for s in m.src if id(s) not in inside]
        mine: dict[int, Node] = {}
        while stack:  # through shared operands to what they read
            s = stack.pop()
            if id(s) in shared:
                if id(s) not in mine:
                    mine[id(s)] = s
                    stack.extend(s.src)
            else:
                outside.add(id(s))
        waiting[key] = len(outside)
        pulled[key] = sorted(mine.values(), key=lambda n: walk_position[id(n)])
        for s in outside:
            readers.setdefault(s, []).append(key)
    views = {id(n): n for n in order if n.op is Op.VIEW and id(n) not in owner and id(n) not in shared}
    for key, v in views.items():
        waiting[key] = 1
        readers.setdefault(id(v.src[0]), []).append(key)
    pending = {key: len(nodes) for key, nodes in pulled.items()}  # group -> its shared nodes not yet made
    pullers: dict[int, list[int]] = {}  # shared node -> the groups that read it
    for key, nodes in pulled.items():
        for m in nodes:
            pullers.setdefault(id(m), []).append(key)
    demanded: set[int] = set()  # the groups whose shared operands were asked for
    launched: list[Node] = []
    done: set[int] = set()

    def demand(key: int) -> list[Node]:
        """A group that waits on nothing else: the shared nodes it reads still to make, or once
        they are made, its members (`launch` adds them after the last)."""
        demanded.add(key)
        return groups[key] if not pending[key] else [m for m in pulled[key] if id(m) not in done]

    def launch(first: list[Node]) -> None:
        ready = collections.deque(first)
        while ready:
            m = ready.popleft()
            if id(m) in done:
                continue
            launched.append(m)
            done.add(id(m))
            for key in pullers.get(id(m), ()):
                pending[key] -= 1
                if not pending[key] and not waiting[key]:  # its last shared operand: the group, next
                    ready.extendleft(reversed(groups[key]))
            for key in readers.get(id(m), ()):
                waiting[key] -= 1
                if not waiting[key]:
                    ready.extend(demand(key) if key in groups else (views[key],))

    for n in order:  # there from the start: all of them before any group is made (a group
        if n.op in (Op.INPUT, Op.CONSTANT):  # made at the first would pull shared nodes that others wait on)
            launched.append(n)
            done.add(id(n))
            for key in readers.get(id(n), ()):
                waiting[key] -= 1
    # what reads nothing from outside but inputs (an iota's output, a view of an input; a group whose
    # other operands are all shared): the groups with the fewest shared operands first (along a
    # chain of shared nodes that several groups read, each group as soon as its part is there)
    floating = sorted((key for key in groups if not waiting[key]), key=lambda key: len(pulled[key]))
    for key in floating:
        if key not in demanded:
            launch(demand(key))
    for key in views:
        if not waiting[key]:
            launch([views[key]])
    for n in order:
        if id(n) not in done and id(n) not in owner and id(n) not in views and id(n) not in shared:
            launch([n])
    # every node once, after its operands: each group's outside operands precede its output in
    # the walk, so a node outside the groups never waits on one (checked: the plan depends on it)
    position = {id(n): i for i, n in enumerate(launched)}
    if len(position) != len(order) or any(position[id(s)] >= position[id(n)] for n in launched for s in n.src):
        raise AssertionError("launch_order: a node launched before its operands, or not at all")
    return launched


def _shared_by_outputs(order: list[Node], users: dict[int, list[Node]], owner: dict[int, int],
                       outputs: set[int]) -> set[int]:
    """The nodes read only by outputs' private nodes and by one another, private to no one output,
    that free nothing by being made early: each is made when the first group that reads it can be
    (its other operands there), just before it, not where the walk meets it, which can be the
    walk's end (a backward's recomputed layer norm output, read by the query, key and value
    weights' gradients, held each layer's activation gradients alive until then). "Frees
    nothing": every operand that is not an input or a weight (or a view of one) is no larger than
    the node, so waiting cannot hold a larger buffer alive in its place."""
    def no_larger(s: Node, n: Node) -> bool:
        base = s
        while base.op is Op.VIEW:
            base = base.src[0]
        if base.op in (Op.INPUT, Op.CONSTANT):  # alive the whole call anyway
            return True
        a, b = sym.product(s.shape), sym.product(n.shape)
        return int(a) <= int(b) if sym.is_static(a) and sym.is_static(b) else sym.equal(a, b)

    shared: set[int] = set()
    for n in reversed(order):  # readers first
        i = id(n)
        if (i not in owner and i not in outputs and n.op not in (Op.INPUT, Op.CONSTANT) and users.get(i)
                and all(id(u) in owner or id(u) in shared for u in users[i])
                and all(no_larger(s, n) for s in n.src)):
            shared.add(i)
    return shared


@dataclass
class KernelPlan:
    outputs: list[Node]  # the nodes whose buffers are the results (after output copies)
    launches: list[KernelSpec]
    inputs: list[Node]
    weights: list[Node]  # CONSTANT nodes holding arrays: uploaded once
    source: str
    last_use: dict[int, int]  # id(buffer node) -> index of the last launch that reads it
    inlined: dict[int, Node] = dataclasses.field(default_factory=dict)  # computed where read (`render/inline.py`)

    @staticmethod
    def build(outputs: list[Node], inline_producers: bool = True) -> KernelPlan:
        """`inline_producers=False`: every node its own launch (tests compare the two plans' bits)."""
        sched = Schedule.build(outputs)
        final, inputs, weights = sched.outputs, sched.inputs, sched.weights
        chosen = inline.choose(sched.nodes, final, cuda_tiled) if inline_producers else frozenset()
        launches: list[KernelSpec] = []
        bodies: dict[str, str] = {}  # kernel name -> source, each distinct body once
        operand = _gemv_operands(sched.nodes, final, chosen)
        pairs = pair_gemvs(sched.nodes, chosen, operand)
        absorbed = {id(mm) for two in pairs.values() for mm in two}
        fused = residual_gemvs(sched.nodes, chosen, operand, absorbed)
        absorbed |= {id(mm) for mm, _ in fused.values()}
        for node in sched.nodes:
            if id(node) in chosen or id(node) in absorbed:
                continue
            with inline.inlining(chosen):
                if id(node) in fused:  # the GEMV and the Add after it in one launch
                    mm, other = fused[id(node)]
                    with rendering(CUDA):
                        specs = residual_gemv(mm, node, other, "@KERNEL@")
                elif id(node) in pairs:  # two GEMVs of one A and the pointwise node of the two
                    with rendering(CUDA):
                        specs = pair_gemv(*pairs[id(node)], node, "@KERNEL@")
                else:
                    specs = render_node(node, "@KERNEL@", CUDA, CUDA_SPECIAL)
            for k in specs:
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
        return KernelPlan(final, launches, inputs, weights, source, last_use,
                          {id(n): n for n in sched.nodes if id(n) in chosen})


def _gemv_operands(nodes: list[Node], final: list[Node], chosen):
    """`operand(x, n)`: the MatMul `x` views, where one GEMV launch may compute it in the epilogue
    of `n`: float, `n`'s dtype, a static M the GEMV kernel takes (at most `cublas.gemv_max_m()`,
    so cuBLAS is never its step), read by `n` alone, whole and in row-major order at `n`'s shape,
    not an output nor computed where read (`chosen`); else None."""
    readers = collections.Counter(id(view_of(s)[0]) for n in nodes for s in n.src)
    kept = {id(view_of(o)[0]) for o in final} | {id(o) for o in final}
    rows = min(GEMV_ROWS, gemv_max_m())

    def operand(x: Node, n: Node) -> Node | None:
        mm, st = view_of(x)
        if mm.op is not Op.MAT_MUL or mm.dtype not in FLOAT_TYPES or mm.dtype is not n.dtype:
            return None
        m = mm.shape[-2]
        if not sym.is_static(m) or m > rows or readers[id(mm)] != 1 or id(mm) in kept or id(mm) in chosen:
            return None
        whole = st.mask is None and sym.equal(st.offset, 0) and st.is_contiguous()
        return mm if whole and sym.equal(sym.product(mm.shape), sym.product(n.shape)) else None

    return operand


def pair_gemvs(nodes: list[Node], chosen, operand) -> dict[int, tuple[Node, Node]]:
    """Pointwise nodes of two GEMVs of the same A and nothing else but scalars (a decode step's
    SwiGLU: silu(x @ gate) * (x @ up)), each GEMV as `operand` (`_gemv_operands`) takes it and its B
    contiguous along K (a linear layer's weight): id(node) -> (matmul, matmul). One launch sums
    both over one pass of A and computes the node from the two sums, each rounded to its dtype
    first as the unfused launches store them: the unfused bits."""
    found = {}
    for n in nodes:
        if (n.op not in POINTWISE and n.op is not Op.FUSED_ELEMENTWISE) or id(n) in chosen or n.dtype not in FLOAT_TYPES:
            continue
        bases = [view_of(s)[0] for s in n.src]
        mms = [b for i, b in enumerate(bases) if not is_inline_scalar(b) and all(b is not c for c in bases[:i])]
        if len(mms) != 2 or any(operand(s, n) is None for s in n.src if not is_inline_scalar(view_of(s)[0])):
            continue
        a, b = mms
        if a.src[0] is not b.src[0] or len(a.shape) != len(b.shape) or not all(map(sym.equal, a.shape, b.shape)):
            continue
        if all(view_of(x.src[1])[1].mask is None and sym.equal(view_of(x.src[1])[1].strides[-2], 1) for x in mms):
            found[id(n)] = (a, b)
    return found


def residual_gemvs(nodes: list[Node], chosen, operand, taken=frozenset()) -> dict[int, tuple[Node, Node]]:
    """The Adds one GEMV launch computes with the MatMul they add to (a decode step's residual
    adds, a linear layer's bias): id(add) -> (matmul, the other operand). The MatMul as
    `operand` (`_gemv_operands`) takes it; neither the Add nor the other operand is computed
    where read (`inline`). The
    sum is rounded once to the output dtype (the unfused graph rounds the product first: the
    same bits in f32 and f64, at most an ulp of the sum apart in f16/bf16). `taken`: MatMuls a
    `pair_gemvs` launch computes."""
    found = {}
    for n in nodes:
        if n.op is not Op.ADD or id(n) in chosen:
            continue
        for x, other in (n.src, n.src[::-1]):
            mm = operand(x, n)
            if mm is not None and id(mm) not in taken and id(view_of(other)[0]) not in chosen:
                found[id(n)] = (mm, other)
                break
    return found


def dedup(k: KernelSpec, node: Node, bodies: dict) -> KernelSpec:
    """`k` renamed to `<op>_<hash of its body>` (a kernel is rendered under a placeholder name);
    its source is recorded once in `bodies` (every dialect's plan)."""
    template = k.source.replace(f" {k.name}(", " @KERNEL@(")
    name = f"{node.op.title.lower()}_{hashlib.sha1(template.encode()).hexdigest()[:12]}"
    source = template.replace(" @KERNEL@(", f" {name}(")
    bodies.setdefault(name, source)
    return dataclasses.replace(k, name=name, source=source)


__all__ = ["EXTERN", "KernelPlan", "Schedule", "dedup", "launch_order", "pair_gemvs", "residual_gemvs"]
