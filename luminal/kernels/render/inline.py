"""Producers computed where they are read: a pointwise value (a FusedElementwise region, a cast, a
product) that the kernel plan never writes to memory, its expression rendered inside each kernel
that reads it (`cstyle.read`), as inductor inlines pointwise nodes into their reductions.

The egraph's regions (`egraph/regions.py`) join an elementwise op to an elementwise consumer;
a reduction ends a region, and a value read by two regions is materialized. So an RMS norm in
bf16 was five launches on CUDA: x cast to f32 (read 2 bytes an element, written 4), x * x
(4 and 4), its KahanSum (4), the normalization (4 more): each square and each f32 copy of x went
through memory. With them inlined, the sum and the normalization each read x's 2 bytes.

Which producers (`choose`): a pointwise node or a concat that is not an output, all of whose
readers render it through `cstyle.read` (elementwise kernels, FusedElementwise regions,
SumReduce, MaxReduce, KahanSum, Softmax, a concat along the last axis, the tiled CUDA
attention's q), and that
- has one reader, which reads each element once (no broadcast axis in its view): moving the
  expression into the reader moves work, it adds none (RoPE's halves of q, concatenated in the
  attention kernel's registers); or
- is cheap to repeat: at most `CHEAP_WORK` (`work`: an add 1, an exp 20), what is inlined into
  it counted, on inputs of no more bytes an element than its own (a concat: its widest
  operand's), computed at most `MAX_READS` times an element by its readers, none broadcasting
  (an f32 copy of a bf16 tensor that a sum and a normalization both read; decode's scores, which
  Softmax reads in its max pass and again in its exp pass).
The values are the same bits: an inlined expression is the expression the producer's kernel ran,
each cast and rounding in it kept; only where the value lives between two operations changes (a
register instead of a buffer of the producer's own dtype, which it is stored in and loaded from
unchanged). Only the kernel plan (CUDA, the emulator) inlines; the C backend plans its own steps.
"""

from __future__ import annotations

import contextlib
import contextvars

from luminal.hlir import symbolic as sym
from luminal.hlir.ops import POINTWISE, REDUCE, Node, Op
from luminal.hlir.shape import ShapeTracker
from luminal.kernels.render.cexpr import c_dim

PRODUCERS = POINTWISE | {Op.FUSED_ELEMENTWISE, Op.CONCAT}  # what `cstyle.pointwise_value` computes
# readers whose generator reads every source through `cstyle.read` (`render/kernels.py`), and
# how often each reads an element: Softmax's max pass and its exp pass (f16/bf16: the exp twice)
READERS = {**dict.fromkeys(PRODUCERS | REDUCE | {Op.KAHAN_SUM}, 1), Op.SOFTMAX: 3}
# An element's operations, in vector instructions per lane group relative to an add: a call into
# the vector libm (exp, log, sin) is about 20, a division or square root about 4 (`work`).
OP_WORK = {Op.EXP2: 20, Op.LOG2: 20, Op.SIN: 20, Op.EXP: 20, Op.SIGMOID: 20, Op.SQRT: 4, Op.RECIP: 4, Op.MOD: 8}
CHEAP_WORK = 4  # the work of a producer computed more than once (decode's scores: select, concat, cast, scale)
MAX_READS = 4  # ... and how many times an element of it may be computed

_INLINED: contextvars.ContextVar[frozenset] = contextvars.ContextVar("luminal_inlined", default=frozenset())


@contextlib.contextmanager
def inlining(ids: frozenset):
    """Render with the nodes whose ids are in `ids` computed where they are read."""
    token = _INLINED.set(ids)
    try:
        yield
    finally:
        _INLINED.reset(token)


def is_inlined(node: Node) -> bool:
    return id(node) in _INLINED.get()


def view_of(node: Node) -> tuple[Node, ShapeTracker]:
    """(buffer node, tracker) that `node`'s elements are read through (`cstyle` reads with it)."""
    if node.op is Op.VIEW:
        return node.src[0], node.arg
    return node, ShapeTracker.contiguous(node.shape)


def _reads_once(st: ShapeTracker) -> bool:
    """Whether a view reads each element of its buffer at most once (no broadcast axis)."""
    return all(not sym.equal(t, 0) or sym.equal(d, 1) for d, t in zip(st.shape, st.strides))


def work(node: Node) -> int:
    """One element of pointwise `node` (a region: its distinct levels) in `OP_WORK`'s units."""
    if node.op is Op.FUSED_ELEMENTWISE:
        return sum(OP_WORK.get(e.op, 1) for e in node.arg.toposort() if e.op not in (Op.INPUT, Op.CONSTANT))
    return OP_WORK.get(node.op, 1)


def _reads(reader: Node, operand: int, tiled_attention) -> int | None:
    """How often `reader` reads an element of its source number `operand` (None: not through
    `cstyle.read`, or too often to repeat a producer there)."""
    if reader.op is Op.ATTENTION:  # the tiled kernel reads q once a query; kᵀ and v once per tile of queries
        return 1 if operand == 0 and tiled_attention(reader) else None
    if reader.op is Op.CONCAT and reader.arg != len(reader.shape) - 1:
        return None  # along another axis it copies rows by pointer
    return READERS.get(reader.op)


def choose(nodes: list[Node], outputs: list[Node], tiled_attention=lambda node: False) -> frozenset:
    """The ids of the nodes (in launch order) to compute where they are read (see the module doc).
    `tiled_attention(node)`: whether an Attention renders as a kernel reading q once a query (the
    dialect's: `attention.cuda_tiled`)."""
    finals = {id(n) for n in outputs}
    readers: dict[int, list[tuple[int | None, ShapeTracker]]] = {}  # (reads an element, view) per use
    for n in nodes:
        for k, s in enumerate(n.src):
            if any(s is t for t in n.src[:k]):
                continue
            base, st = view_of(s)
            readers.setdefault(id(base), []).append((_reads(n, k, tiled_attention), st))
    chosen: set[int] = set()

    def total_work(n: Node) -> int:
        """The work of an element of `n`, with the producers inlined into it."""
        return work(n) + sum(total_work(b) for b in (view_of(s)[0] for s in dict.fromkeys(n.src)) if id(b) in chosen)

    def source_bytes(n: Node) -> int:
        """Bytes an element of `n` reads from buffers, through producers already inlined."""
        each = []
        for s in dict.fromkeys(n.src):
            base, _ = view_of(s)
            if id(base) in chosen:
                each.append(source_bytes(base))
            elif base.op is not Op.CONSTANT or base.shape:
                each.append(base.dtype.itemsize)
        return max(each, default=0) if n.op is Op.CONCAT else sum(each)  # a concat's element is one operand's

    for n in nodes:
        if n.op not in PRODUCERS or id(n) in finals:
            continue
        uses = readers.get(id(n), [])
        if not uses or not all(r is not None and _reads_once(st) for r, st in uses):
            continue
        reads = sum(r for r, _ in uses)
        if reads == 1 or (reads <= MAX_READS and total_work(n) <= CHEAP_WORK and source_bytes(n) <= n.dtype.itemsize):
            chosen.add(id(n))
    return frozenset(chosen)


def at_own_index(st: ShapeTracker, shape) -> bool:
    """Whether a view `st` of a producer contiguous in `shape` reads element i at index i (its
    mask aside, which `cstyle.read` applies)."""
    return (len(st.shape) == len(shape) and all(sym.equal(a, b) for a, b in zip(st.shape, shape))
            and ShapeTracker(st.shape, st.strides, st.offset).is_contiguous())


def producer_index(st: ShapeTracker, shape, index: list[str]) -> list[str]:
    """The index of the producer's element that a view `st` of it (the producer contiguous in
    `shape`) reads at `index` (C expressions): `index` itself where `at_own_index`, else the
    view's flat address split by the producer's contiguous strides."""
    if at_own_index(st, shape):
        return list(index)
    flat = " + ".join([c_dim(st.offset)] + [f"({i}) * {c_dim(t)}" for i, t in zip(index, st.strides) if t != 0])
    out, inner = [], "1"
    for k in reversed(range(len(shape))):
        term = f"(({flat}) / ({inner}))" if inner != "1" else f"({flat})"
        out.append(f"({term} % {c_dim(shape[k])})" if k else term)
        inner = f"{inner} * {c_dim(shape[k])}" if inner != "1" else c_dim(shape[k])
    return out[::-1]


def expand(sources) -> list[Node]:
    """`sources` (views or nodes) with every inlined base replaced by its own sources, recursively."""
    out: list[Node] = []
    for s in sources:
        base, _ = view_of(s)
        out += expand(base.src) if is_inlined(base) else [s]
    return out


def inlined_producers(node: Node) -> list[Node]:
    """The inlined producers `node`'s kernel computes, recursively."""
    out: list[Node] = []
    for s in node.src:
        base, _ = view_of(s)
        if is_inlined(base) and all(base is not p for p in out):
            out += [base, *(p for p in inlined_producers(base) if all(p is not q for q in out))]
    return out


def reads_at_own_index(producer: Node, st: ShapeTracker) -> bool:
    """Whether an inlined `producer`, read through `st`, reads its sources at the reader's index
    (a concat reads its second operand shifted)."""
    return producer.op is not Op.CONCAT and at_own_index(st, producer.shape)


def read_at_reader_index(sources):
    """The sources a reader's element reads at the reader's own index: `sources` themselves and,
    through inlined producers read at their own index (no mask), theirs (CUDA loads them 16 bytes
    at a time, `dialect._vector_elements`)."""
    for s in sources:
        base, st = view_of(s)
        if not is_inlined(base):
            yield s
        elif st.mask is None and reads_at_own_index(base, st):
            yield from read_at_reader_index(base.src)
