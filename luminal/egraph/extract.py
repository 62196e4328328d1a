"""Extraction: pick one e-node per e-class by a cost model, then rebuild HLIR from the choice.

egglog's own extractors are not used (EGGLOG_NOTES: tree costs overflow and the term printer
blows up on whole models). This one reads `EGraph.freeze()` and runs Knuth's generalization of
Dijkstra: e-classes are settled in order of increasing cost, so it is O(E log E) and cycles
(x = x * 1) are harmless. Costs are in bytes-equivalents:

    cost(e-node) = LAUNCH (if it is a kernel) + bytes read and written + flops / FLOPS_PER_BYTE

Views, constants and slots are free (a view is index math in its consumer, which pays for the
elements it reads). Ties are broken by `PREFERENCE` (fused before primitive), then by e-node
order in the frozen e-graph, which is deterministic for a given input. An e-node is known by
its `Op` (`schema.OPS`), or by name for the constructors that are no op (`Leaf`, `Splat`,
`Opaque<n>`).
"""

from __future__ import annotations

import heapq
import math

from luminal.egraph import compat as eg
from luminal.egraph.encode import DTYPES, Encoding, is_bcast
from luminal.egraph.patterns import compose, over_plain
from luminal.egraph.schema import CONSTRUCTORS, OPS
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import FUSED, REDUCE, Node, Op

LAUNCH = 4096.0  # a kernel launch costs about as much as moving 4 KiB
FLOPS_PER_BYTE = 8.0
NOMINAL_DIM = 128  # symbolic dims count as this many elements when costing
ITEMSIZE = 4.0
FREE = {"Leaf", "Splat", Op.VIEW}
PREFERENCE = {op: -1.0 for op in FUSED}  # on a tie, the fused op
EXACT_SCALE = 8  # costs are summed as integers in units of 1 / EXACT_SCALE (`Extraction._exact`)


class Extraction:
    """The chosen e-node of every reachable e-class, and HLIR rebuilt from them."""

    def __init__(self, egraph, enc: Encoding):
        self.enc = enc
        self.enodes: list[tuple[Op | str, list, list, object]] = []  # (op, child classes, literals, class)
        self.of_node: dict[int, object] = {}  # HLIR node index -> e-class
        for name, (sorts, out_sort, rows) in sorted(eg.frozen_rows(egraph).items()):
            if out_sort != "Expr":
                continue
            for inputs, out in rows:
                if name == "N":
                    self.of_node[eg.literal(egraph, "i64", inputs[0])] = out
                    continue
                kids = [v for v, s in zip(inputs, sorts) if s == "Expr"]
                lits = [eg.literal(egraph, s, v) for v, s in zip(inputs, sorts) if s != "Expr"]
                self.enodes.append((OPS.get(name, name), kids, lits, out))
        self.size = len(self.enodes)
        self.numel = self._numels()
        self.best: dict = {}
        self._settle()

    # --- cost model --------------------------------------------------------------------------
    def _numels(self) -> dict:
        numel: dict = {}
        self.view_shape: dict = {}  # class -> shape of a View or Splat in it (MatMul reads K there)
        for i, n in enumerate(self.enc.nodes):
            if i in self.of_node:
                numel[self.of_node[i]] = _count(n.shape)
        for name, _, lits, cls in self.enodes:
            if name in (Op.VIEW, "Splat"):
                shape = self.enc.trackers[lits[-1]].shape
                self.view_shape.setdefault(cls, shape)
                numel.setdefault(cls, _count(shape))
        for _ in range(2):  # classes made by rules only (a product of constants): children's size
            for _, kids, _, cls in self.enodes:
                if cls not in numel and kids and all(k in numel for k in kids):
                    numel[cls] = max(numel[k] for k in kids)
        return numel

    def own_cost(self, name: Op | str, kids: list, lits: list, cls) -> float:
        if name in FREE:
            return 0.0
        out = self.numel.get(cls, 1.0)
        inputs = sum(self.numel.get(k, 1.0) for k in kids)
        flops = inputs
        if name is Op.MAT_MUL:
            k_dim = self._last_dim(kids[0])
            flops = 2.0 * out * k_dim
        elif name in (Op.SOFTMAX, Op.SIGMOID, Op.EXP):
            flops = 4.0 * out
        return LAUNCH + ITEMSIZE * (inputs + out) + flops / FLOPS_PER_BYTE + PREFERENCE.get(name, 0.0)

    def _exact(self, name, kids, lits, cls) -> int:
        """`own_cost` in eighths of a byte, as an integer: sums of tree costs are then exact
        (Python ints), whatever their size. Tree costs count a shared value once per reader and
        so grow about 160x per Llama layer; in floats, past ~8 layers (~1e20) the sum rounded
        away every difference between the e-nodes of one class (a MatMul tied with the product
        it replaces, and lost half the time)."""
        return round(self.own_cost(name, kids, lits, cls) * EXACT_SCALE)

    def _last_dim(self, cls) -> float:
        shape = self.view_shape.get(cls)
        return float(_count(shape[-1:])) if shape else math.sqrt(self.numel.get(cls, 1.0))

    def _settle(self) -> None:
        parents: dict = {}
        waiting = []
        heap = []
        for i, (name, kids, lits, cls) in enumerate(self.enodes):
            distinct = set(kids)
            waiting.append(len(distinct))
            for k in distinct:
                parents.setdefault(k, []).append(i)
            if not distinct:
                heapq.heappush(heap, (self._exact(name, kids, lits, cls), i))
        cost: dict = {}
        while heap:
            c, i = heapq.heappop(heap)
            cls = self.enodes[i][3]
            if cls in cost:
                continue
            cost[cls] = c
            self.best[cls] = i
            for p in parents.get(cls, ()):
                waiting[p] -= 1
                if waiting[p] == 0:
                    name, kids, lits, pcls = self.enodes[p]
                    if pcls not in cost:
                        total = self._exact(name, kids, lits, pcls) + sum(cost[k] for k in kids)
                        heapq.heappush(heap, (total, p))
        self.cost = cost

    # --- rebuilding HLIR ---------------------------------------------------------------------
    def template(self, outputs: list[int]) -> tuple[list[tuple], list]:
        """Entries (op, dtype, shape, src refs, arg) in dependency order, and output refs.

        A ref is ("s", slot index) or ("n", entry index), so one template can be instantiated
        on the slots (weights, inputs, earlier layers) of every structurally equal part.
        """
        entries: list[tuple] = []
        info: list[tuple[DType, tuple]] = []  # dtype and shape of each entry
        memo: dict = {}
        slot_info = [(s.dtype, s.shape) for s in self.enc.slots]

        def meta(ref):
            return slot_info[ref[1]] if ref[0] == "s" else info[ref[1]]

        def emit(op, dtype, shape, src, arg) -> tuple:
            entries.append((op, dtype, tuple(shape), tuple(src), arg))
            info.append((dtype, tuple(shape)))
            return ("n", len(entries) - 1)

        roots = [self.of_node[i] for i in outputs]
        for root in roots:  # iterative post-order: parts can be thousands of nodes deep
            stack = [(root, False)]
            while stack:
                cls, ready = stack.pop()
                if cls in memo:
                    continue
                name, kids, lits, _ = self.enodes[self.best[cls]]
                if not ready:
                    stack.append((cls, True))
                    stack.extend((k, False) for k in reversed(kids) if k not in memo)
                    continue
                memo[cls] = self._build(name, [memo[k] for k in kids], lits, meta, emit)
        return entries, [memo[r] for r in roots]

    def _build(self, name, src, lits, meta, emit):
        enc = self.enc
        if name == "Leaf":
            return ("s", lits[0])
        if name == "Splat":
            value, dtype, st = lits[0], DTYPES[lits[1]], enc.trackers[lits[2]]
            const = emit(Op.CONSTANT, dtype, (), (), value)
            if st.ndim == 0 and st.is_contiguous():
                return const
            return emit(Op.VIEW, dtype, st.shape, (const,), st)
        if isinstance(name, str):  # Opaque<n>
            n = enc.opaque[lits[0]]
            return emit(n.op, n.dtype, n.shape, src, n.arg)
        dtype, shape = meta(src[0])
        fields = dict(zip(CONSTRUCTORS[name][1], lits))
        if name is Op.VIEW:
            st = enc.trackers[fields["tracker"]]
            if st.is_contiguous() and st.ndim == len(shape) and all(sym.equal(a, b) for a, b in zip(st.shape, shape)):
                return src[0]  # a view that changes nothing
            return emit(Op.VIEW, dtype, st.shape, src, st)
        dtype = DType.BOOL if name is Op.LESS_THAN else DTYPES[fields["dtype"]] if "dtype" in fields else dtype
        axis = fields.get("axis")
        if name in REDUCE or name is Op.KAHAN_SUM:
            shape = shape[:axis] + shape[axis + 1 :]
        elif name is Op.MAT_MUL:
            shape = shape[:-1] + meta(src[1])[1][-1:]
        elif name is Op.SELECT:  # (cond, a, b): a's dtype
            dtype, shape = meta(src[1])
        elif name is Op.CONCAT:
            shape = shape[:axis] + (sym.norm(shape[axis] + meta(src[1])[1][axis]),) + shape[axis + 1 :]
        return emit(name, dtype, shape, src, axis)


def instantiate(entries: list[tuple], outputs: list, slots: list[Node]) -> list[Node]:
    """The HLIR nodes of a template over these slots (interned: equal nodes are shared)."""
    built: list[Node] = []
    for op, dtype, shape, src, arg in entries:
        nodes = tuple(slots[i] if kind == "s" else built[i] for kind, i in src)
        if op is Op.VIEW and nodes[0].op is Op.VIEW:  # a view of a view
            inner = nodes[0]
            if inner.src[0].op is Op.CONSTANT and inner.src[0].shape == () and is_bcast(arg):
                nodes = (inner.src[0],)  # a broadcast scalar: read it directly
            elif (st := compose(arg, inner.arg)) is not None:  # one tracker reads both (a unit dim added, then dropped)
                base = inner.src[0]
                if st.is_contiguous() and len(st.shape) == len(base.shape) and all(
                        sym.equal(a, b) for a, b in zip(st.shape, base.shape)):
                    built.append(base)  # the views cancel: read the buffer itself (a region may absorb it)
                    continue
                nodes, arg = (base,), st
            elif (st := over_plain(arg, inner.arg)) is not None:  # the inner view only reshapes its buffer
                nodes, arg = (inner.src[0],), st
            else:  # other views compose only at build time: materialize the inner one
                nodes = (Node(Op.CONTIGUOUS, inner.dtype, inner.shape, (inner,)),)
        built.append(Node(op, dtype, shape, nodes, arg))
    return [slots[i] if kind == "s" else built[i] for kind, i in outputs]


def _count(shape) -> float:
    total = 1.0
    for d in shape:
        total *= float(d) if sym.is_static(d) else float(NOMINAL_DIM)
    return total
