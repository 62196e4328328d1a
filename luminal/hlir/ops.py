"""The op vocabulary of the HLIR and its immutable, interned nodes.

One `Op` enum holds every op; named groups (`UNARY`, `BINARY`, `REDUCE`, ...) are what the
runtime, the egraph encoder and the CUDA renderer dispatch on. A `Node` is `(op, dtype, shape,
src, arg)`, frozen and hash-consed: building the same node twice returns the same object, so
common subexpressions are shared for free and nodes can be compared by identity.

Semantics (the NumPy runtime in `luminal/runtime/` is the executable form of this table):
- EXP2, LOG2, SIN, SQRT, RECIP: float -> same float dtype, IEEE behaviour (recip(0) = inf).
- ADD, MUL: same dtype in and out; on bool they are logical or / and; on integers they wrap
  (two's complement, as torch's: every dialect renders them so, `cstyle.wrapping`).
- MOD: C `fmod` (truncated; the result has the sign of the dividend), ints and floats; an
  integer MOD by zero raises `DivisionByZero` at run time (as torch does; NumPy would give 0).
- LESS_THAN: operands of one dtype, result bool.
- PHILOX (src = seed, counter: int64 of the output's shape, usually broadcast views): f32
  uniform in [0, 1), a pure function of its operands. Philox 4x32-10 (Salmon et al. 2011, the
  generator torch uses on CUDA) with key (lo32(seed), hi32(seed)) and counter (lo32(counter),
  hi32(counter), 0, 0), both as unsigned 32-bit words; its first output word x gives
  (x >> 8) * 2**-24. Random ops are built from it (`luminal/builder/random.py`).
- SUM_REDUCE, MAX_REDUCE (arg = axis): remove that axis; accumulate in the input dtype (the
  builder casts f16/bf16 to f32 first and back after); MAX_REDUCE propagates NaN, gives a zero
  maximum the sign of the axis's first zero (the sequential chain's; CUDA's parallel reductions
  may give either zero, as IEEE 754 allows), and over an empty axis yields the dtype's lowest
  value.
- IOTA (arg = length): 0, 1, ..., n-1 in an integer dtype.
- GATHER (src = data, index; arg = axis): out[i..] = data[i.. with index[i..] on axis];
  index has an integer dtype, the rank of data and its shape except on `axis`; indices in
  [0, n). `take_along_axis` semantics.
- SCATTER (src = data, index, updates; arg = (axis, reduce)): a copy of data with updates
  written (reduce=None) or added (reduce="add") at index along axis.
- CAST (dtype = target): C conversion; float -> int truncates toward zero.
- CONSTANT (arg = a scalar, a symbolic dim expression, or a `ConstantArray`), INPUT (arg =
  name): leaves. VIEW (arg = ShapeTracker): a free reinterpretation of a contiguous buffer.
  CONTIGUOUS: materializes a view that no tracker can express (a reshape of a permuted view).
Binary ops never promote: the builder (or a frontend) inserts explicit CASTs.

Fused ops (group `FUSED`) appear only after `luminal.egraph` rewrote a graph; each equals, in
exact arithmetic, a primitive decomposition (`luminal/egraph/reference.py`), and may round less:
- EXP: e**x (replaces exp2(x * LOG2E)). SIGMOID: 1 / (1 + e**-x). Same dtype and shape as x.
- SOFTMAX (arg = axis): exp(x - max) / sum(exp(x - max)) along axis, computed stably.
- KAHAN_SUM (arg = axis): SUM_REDUCE with a compensated (or wider) accumulator; same dtype.
- MAT_MUL (src = a[..., M, K], b[..., K, N], equal batch dims): out[..., m, n] =
  sum_k a[..., m, k] * b[..., k, n], in the dtype of a and b; f16/bf16 accumulate in f32 (or
  wider) and round once, as the builder's matmul (widen to f32, sum, round back) that it replaces.
- FUSED_ELEMENTWISE (src = inputs of the output's shape, arg = an `Expr`): one elementwise
  kernel. The expression is a small immutable DAG of `Expr(op, dtype, src, arg)` whose ops are
  the POINTWISE group (a CAST converts to its dtype) over two leaves: `Expr(INPUT, dt, arg=i)`
  reads input i, `Expr(CONSTANT, dt, arg=value)` is a scalar. Float intermediates may be kept
  wider than dt (one rounding at the end); comparisons, fmod and casts see dt values, and a value
  one of them reads is that dt value for every reader (trunc = x - fmod(x, 1) stays exact).
- SELECT (src = cond (bool), a, b, all of the output's shape): a where cond holds, else b; the
  chosen value moves unchanged (NaN, ±inf, -0.0). Pointwise, so regions absorb it. It is what
  `where` means (the builder spells it as a Gather from the stacked pair (b, a)).
- CONCAT (src = a, b; arg = axis): a then b along axis (the builder spells concat and stack as
  Scatters of the pieces into a zero buffer); more pieces nest.
- WINDOW_REDUCE (src = one or two operands of one shape (*out, K1..Kr), typically overlapping
  window views; arg = ("sum" | "max", r)): out[o] = the sum (or NaN-propagating max) over the
  last r axes of src0[o, k] (* src1[o, k]), in the operands' dtype: a direct convolution
  (window view times broadcast weight) or a pooling, never materializing the product. The
  builder spells it as the product reduced one axis at a time (`builder/nn.py`).
- MAXIMUM (src = a, b of the output's shape and dtype): the larger of a and b, NaN if either
  is NaN (torch.maximum; on bool, or). Pointwise, so regions absorb it: clamp, relu6 and
  hardswish become one loop. The builder spells it as max(stack([a, b], -1), -1).
- ATTENTION (src = q[..., M, D], kt[..., D, N], v[..., N, Dv] and optionally mask[..., M, N],
  one batch shape; arg = (scale, zero_empty_rows)): s = q @ kt (a MatMul), then s * scale (a
  scalar Mul, when scale is not None), then s + mask; with arg = (scale, zero_empty_rows, e),
  the mask is the FusedElementwise expression e over src[3:] (each of shape [..., M, N], views
  of narrow buffers: a causal mask from iotas), computed per score; p = Softmax(s) over N; where
  zero_empty_rows, rows of s all -inf give p = 0 (torch's safe softmax of
  scaled_dot_product_attention); out = p @ v, shape (..., M, Dv). Each step in the dtype of the
  operands (f32 or f64), as the primitives it replaces; kernels never materialize s or p
  (`luminal/egraph/attention.py` recognizes it, `kernels/render/attention.py` renders it).
  The long form arg = (scale, zero_empty_rows, e or None, select, half) adds: select = (fill,
  keep) for a mask that is a condition, s = where(mask == keep, s, fill) (`where(causal, s,
  -inf)`), instead of s + mask; half = F16/BF16 for q, kt, v and the output in that dtype, each
  step of s (MatMul, Mul, Add) rounded to it (the Mul's product formed in f32 with the f32 scale),
  the softmax in f32 and p rounded to it before p @ v
  (the kernels keep p in f32: the one rounding they skip). A sixth element, transform = an
  expression over input 0 (f32/f64 only), applies a pointwise function to s after the scale and
  before the mask: Gemma 2's soft cap, cap * tanh(s / cap). `attention_arg` reads every form.
- GROUPED_MAT_MUL (src = x[S, K], weight[E, K, N], offs[E] of an integer dtype): the grouped
  GEMM of Mixture-of-Experts layers. Row s belongs to group g(s) = #{i : offs[i] <= s} (for
  nondecreasing offsets, the cumulative token counts routing makes, rows offs[e-1]..offs[e] form
  group e, offs[-1] being 0); out[s, n] = sum_k x[s, k] * weight[g(s), k, n] where g(s) < E, and
  0 for the rows past the last offset (g(s) = E). Shape (S, N), the dtype of x and weight (one
  dtype); f16/bf16 accumulate in f32 (or wider) and round once, as MatMul. Built directly by the
  frontends (`Tensor.grouped_matmul`): its primitive form (each row times its gathered expert
  matrix, `luminal.builder.linalg.grouped_rows`) reads S x K x N weights, not E x K x N.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import itertools
import operator
import weakref
from _weakref import _remove_dead_weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from luminal.errors import UnknownOpError
from luminal.hlir.dtypes import DType
from luminal.hlir.symbolic import Dim
from luminal.threadflags import ThreadValue


class Op(enum.Enum):
    __hash__ = object.__hash__  # members are singletons: identity, in C (Enum's hashes the name in Python)
    # leaves
    INPUT = enum.auto()
    CONSTANT = enum.auto()
    IOTA = enum.auto()
    # unary
    EXP2 = enum.auto()
    LOG2 = enum.auto()
    SIN = enum.auto()
    SQRT = enum.auto()
    RECIP = enum.auto()
    CAST = enum.auto()
    # binary
    ADD = enum.auto()
    MUL = enum.auto()
    MOD = enum.auto()
    LESS_THAN = enum.auto()
    PHILOX = enum.auto()  # (seed, counter) -> uniform f32: the one random primitive
    # reduce (arg = axis)
    SUM_REDUCE = enum.auto()
    MAX_REDUCE = enum.auto()
    # indexing
    GATHER = enum.auto()
    SCATTER = enum.auto()
    # movement
    VIEW = enum.auto()
    CONTIGUOUS = enum.auto()
    # fused: produced by luminal.egraph rewrites, never by the builder
    EXP = enum.auto()
    SIGMOID = enum.auto()
    SOFTMAX = enum.auto()
    KAHAN_SUM = enum.auto()
    MAT_MUL = enum.auto()
    FUSED_ELEMENTWISE = enum.auto()
    SELECT = enum.auto()
    CONCAT = enum.auto()
    WINDOW_REDUCE = enum.auto()
    MAXIMUM = enum.auto()
    ATTENTION = enum.auto()
    GROUPED_MAT_MUL = enum.auto()

    @staticmethod
    def from_name(name: str) -> Op:
        """The op called `name` ('Exp2', 'EXP2', 'exp2' and 'LessThan' all work)."""
        key = name.replace("_", "").upper()
        for op in Op:
            if op.name.replace("_", "") == key:
                return op
        known = ", ".join(op.title for op in Op)
        raise UnknownOpError(f"unknown op {name!r}; the HLIR ops are: {known}")

    @property
    def title(self) -> str:
        """CamelCase name as in DESIGN.md (`LessThan`, `SumReduce`)."""
        return _TITLES[self]


_TITLES = {op: "".join(part.capitalize() for part in op.name.split("_")) for op in Op}  # spelled once, read per node

LEAF = frozenset({Op.INPUT, Op.CONSTANT, Op.IOTA})
UNARY = frozenset({Op.EXP2, Op.LOG2, Op.SIN, Op.SQRT, Op.RECIP})
BINARY = frozenset({Op.ADD, Op.MUL, Op.MOD, Op.LESS_THAN, Op.PHILOX})
COMMUTATIVE = frozenset({Op.ADD, Op.MUL})
REDUCE = frozenset({Op.SUM_REDUCE, Op.MAX_REDUCE})
INDEXING = frozenset({Op.GATHER, Op.SCATTER})
MOVEMENT = frozenset({Op.VIEW, Op.CONTIGUOUS})
ELEMENTWISE = UNARY | BINARY | {Op.CAST}
POINTWISE = ELEMENTWISE | {Op.EXP, Op.SIGMOID, Op.SELECT, Op.MAXIMUM}  # what a FusedElementwise expression may apply
FUSED = frozenset({Op.EXP, Op.SIGMOID, Op.SOFTMAX, Op.KAHAN_SUM, Op.MAT_MUL, Op.FUSED_ELEMENTWISE, Op.SELECT,
                   Op.CONCAT, Op.WINDOW_REDUCE, Op.MAXIMUM, Op.ATTENTION, Op.GROUPED_MAT_MUL})


class ConstantArray:
    """A tensor constant (a weight) held by a CONSTANT node; compared by identity.

    `array` may also be a device tensor's host side (`torch_arrays.DeviceTensorHost`: `shape`,
    `dtype`, `materialize()`): it is then copied to the host only when something reads `.array`
    (the NumPy or C runtime); a GPU runtime takes the tensor itself from `source`."""

    _ids = itertools.count()

    def __init__(self, array, name: str | None = None):
        self.source = array if hasattr(array, "materialize") else None
        self._array = None if self.source is not None else self._frozen(array)
        self.name = name or f"const{next(self._ids)}"

    @staticmethod
    def _frozen(array) -> np.ndarray:
        array = np.ascontiguousarray(array).reshape(np.shape(array))  # a view (0-d stays 0-d): the caller's array stays writable
        array.flags.writeable = False
        return array

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = self._frozen(self.source.materialize())
        return self._array

    @property
    def shape(self) -> tuple:
        return tuple(self._array.shape if self._array is not None else self.source.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._array.dtype if self._array is not None else self.source.dtype)

    def __repr__(self) -> str:
        return f"<{self.name} {self.dtype}{list(self.shape)}>"


def _key(value: Any) -> Any:
    """An interning key that tells apart what `==` conflates (0.0/-0.0, 1/1.0/True, NaN)."""
    if isinstance(value, float):
        return ("f", value.hex())
    if isinstance(value, (bool, int)):
        return (type(value).__name__, value)
    if isinstance(value, tuple):
        return tuple(_key(v) for v in value)
    return value


# the interned nodes: interning key -> a weak reference to the node, whose callback drops the
# entry once the node is gone (so a dropped graph is freed). A plain dict and `KeyedRef`s rather
# than a `WeakValueDictionary`, whose Python-level get and set are a large part of building nodes;
# `_remove_dead_weakref` (what `WeakValueDictionary` itself calls) deletes the entry only while
# it still holds a dead reference, not a newer node's.
_INTERNED: dict = {}


def _forget(ref, interned=_INTERNED, remove=_remove_dead_weakref):
    remove(interned, ref.key)


@dataclass(frozen=True, eq=False, repr=False)
class Node:
    op: Op
    dtype: DType
    shape: tuple[Dim, ...]
    src: tuple[Node, ...] = ()
    arg: Any = None

    def __new__(cls, op, dtype, shape, src=(), arg=None):
        src = tuple(src)  # (the node keeps its sources alive, and with them the ids in its key)
        key = (op, dtype, shape, tuple(map(id, src)), _key(arg))
        ref = _INTERNED.get(key)
        if ref is not None:
            node = ref()
            if node is not None:
                return node
        node = object.__new__(cls)
        fields = node.__dict__  # a frozen dataclass: its fields are set once, here
        fields["op"], fields["dtype"], fields["shape"], fields["src"], fields["arg"] = op, dtype, tuple(shape), src, arg
        fields["_key"] = key
        _INTERNED[key] = weakref.KeyedRef(node, _forget, key)
        return node

    __init__ = object.__init__  # everything is set in __new__ (an interned node is not re-set)

    def replace(self, **changes) -> Node:
        fields = {k: getattr(self, k) for k in ("op", "dtype", "shape", "src", "arg")}
        fields.update(changes)
        return Node(**fields)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        shape = ", ".join(str(d) for d in self.shape)
        arg = "" if self.arg is None else f" {self.arg!r}"
        return f"{self.op.title}:{self.dtype.short}[{shape}]{arg}"

    def __reduce__(self):  # pickling re-interns
        return (Node, (self.op, self.dtype, self.shape, self.src, self.arg))


@dataclass(frozen=True, eq=False)
class Expr:
    """One level of a FusedElementwise expression (see the module docstring); compared and
    hashed by value, with `_key`'s distinctions (0.0 is not -0.0, 1 is not 1.0)."""

    op: Op
    dtype: DType
    src: tuple[Expr, ...] = ()
    arg: Any = None  # INPUT: the input slot; CONSTANT: the scalar

    def __post_init__(self):
        object.__setattr__(self, "_key", (self.op, self.dtype, _key(self.arg), tuple(s._key for s in self.src)))

    def __eq__(self, other) -> bool:
        return isinstance(other, Expr) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def toposort(self) -> list[Expr]:
        """Every distinct level, each after its operands."""
        order: dict[Expr, None] = {}

        def walk(e: Expr) -> None:
            if e not in order:
                for s in e.src:
                    walk(s)
                order[e] = None

        walk(self)
        return list(order)

    def __repr__(self) -> str:
        leaf = {Op.INPUT: f"in{self.arg}", Op.CONSTANT: repr(self.arg)}.get(self.op)
        return leaf or f"{self.op.title}:{self.dtype.short}({', '.join(map(repr, self.src))})"


def toposort(roots) -> list[Node]:
    """All nodes reachable from `roots`, each after its sources (iterative, deterministic).

    Nodes are immutable, so the order of the same roots never changes: inside `sorting_once()`
    (a compile: it sorts its lowered graph three times and its optimized graph five) each order
    is computed once; the caller gets its own list."""
    memo = _SORTED.get()
    if memo is None:
        return _toposort(roots)
    roots = tuple(roots)
    key = tuple(map(id, roots))
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = (roots, _toposort(roots))  # the roots kept: their ids stay theirs
    return list(hit[1])


def count_ops(nodes) -> dict[str, int]:
    """{op title: how many of `nodes`}, most common first (ties in order of first appearance)."""
    return titled(collections.Counter(map(operator.attrgetter("op"), nodes)))


def titled(counts: collections.Counter) -> dict[str, int]:
    """A Counter of ops as {title: count}, most common first: counted by op and titled once per
    op (a title per node was most of the time counting a graph took)."""
    return {op.title: k for op, k in counts.most_common()}


_SORTED = ThreadValue(None)  # this thread's {roots' ids: (roots, order)} inside `sorting_once`


def sorting_once():
    """Within the block, on this thread, `toposort` of the same roots is computed once (the
    orders are dropped when the outermost block ends, and the graphs with them)."""
    return contextlib.nullcontext() if _SORTED.get() is not None else _SORTED.set({})


def _toposort(roots) -> list[Node]:
    """Depth first, operands in order, each node after its operands (a stack of the nodes being
    expanded, each with an iterator over its operands: cheaper than pushing every operand and
    every node twice, the same order)."""
    order: list[Node] = []
    seen: set[int] = set()
    mark, emit = seen.add, order.append
    for root in roots:
        if id(root) in seen:
            continue
        mark(id(root))
        stack = [(root, iter(root.src))]
        while stack:
            node, operands = stack[-1]
            for s in operands:
                if id(s) not in seen:
                    mark(id(s))
                    stack.append((s, iter(s.src)))
                    break
            else:
                stack.pop()
                emit(node)
    return order


def attention_arg(arg: tuple) -> tuple:
    """An ATTENTION node's arg in its long form: (scale, zero_empty_rows, expression or None,
    select (fill, keep) or None, half dtype or None, transform or None)."""
    return (*arg, *(None,) * (6 - len(arg)))
