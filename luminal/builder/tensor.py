"""`Tensor`: a handle on an HLIR node plus the graph it belongs to, with the op methods.

The methods live in mixins, one module per family (elementwise math, reductions, indexing,
linear algebra); this module holds the core: operand coercion, broadcasting, the primitive
constructors every decomposition goes through, and the movement ops (free views).
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

from luminal.builder.elementwise import ElementwiseMixin
from luminal.builder.indexing import IndexingMixin
from luminal.builder.linalg import LinalgMixin
from luminal.builder.random import RandomMixin
from luminal.builder.reductions import ReductionMixin
from luminal.errors import DTypeError, LuminalError, ShapeError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import BINARY, UNARY, Node, Op
from luminal.hlir.shape import ShapeTracker

if TYPE_CHECKING:
    from luminal.builder.graph import Graph


def broadcast_shapes(*shapes) -> tuple:
    """NumPy broadcasting over (possibly symbolic) dims; a clear ShapeError otherwise."""
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        non_one = [d for d in dims if not sym.equal(d, 1)]
        if any(not sym.equal(d, non_one[0]) for d in non_one):
            pretty = " and ".join("(" + ", ".join(map(str, s)) + ")" for s in shapes)
            raise ShapeError(f"shapes {pretty} do not broadcast")
        out.append(non_one[0] if non_one else 1)
    return tuple(out)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    n = max(ndim, 1)  # a 0-d tensor takes axis 0 or -1, as in torch
    if not -n <= axis < n:
        raise ShapeError(f"{what} {axis} is out of range for a tensor with {ndim} dims")
    return axis % n


class Tensor(ElementwiseMixin, ReductionMixin, IndexingMixin, LinalgMixin, RandomMixin):
    __slots__ = ("graph", "node")
    __array_priority__ = 1000  # so ndarray + Tensor defers to Tensor.__radd__

    def __init__(self, graph: Graph, node: Node):
        self.graph = graph
        self.node = node

    # --- basic properties ------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    def size(self, axis: int | None = None):
        return self.shape if axis is None else self.shape[normalize_axis(axis, self.ndim)]

    @property
    def numel(self):
        return sym.product(self.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.node!r})"

    def __bool__(self):
        raise LuminalError("a luminal Tensor is symbolic and has no truth value; use where()")

    # --- node construction -----------------------------------------------------------------
    def _new(self, op: Op, dtype: DType, shape, src=(), arg=None) -> Tensor:
        return Tensor(self.graph, Node(op, dtype, tuple(shape), tuple(t.node for t in src), arg))

    def _scalar(self, value, dtype: DType | None = None) -> Tensor:
        """A scalar constant of `dtype` (default: this tensor's), checked to be representable."""
        dtype = dtype or self.dtype
        return self.graph.scalar(value, dtype)

    def _operand(self, other, op_name: str) -> Tensor:
        if isinstance(other, Tensor):
            if other.graph is not self.graph:
                raise LuminalError(f"{op_name}: operands belong to different graphs")
            if other.dtype is not self.dtype:
                raise DTypeError(
                    f"{op_name}: dtype mismatch between operands ({self.dtype} and {other.dtype}); "
                    "luminal never promotes implicitly, cast one of them with .cast()"
                )
            return other
        if isinstance(other, (numbers.Number, bool)) or hasattr(other, "free_symbols"):
            return self._scalar(other)
        raise DTypeError(f"{op_name}: unsupported operand of type {type(other).__name__}")

    def _binary_prim(self, op: Op, other, reverse: bool = False) -> Tensor:
        assert op in BINARY
        other = self._operand(other, op.title)
        a, b = (other, self) if reverse else (self, other)
        shape = broadcast_shapes(a.shape, b.shape)
        a, b = a.expand(shape), b.expand(shape)
        dtype = DType.BOOL if op is Op.LESS_THAN else a.dtype
        return a._new(op, dtype, shape, (a, b))

    def _unary_prim(self, op: Op) -> Tensor:
        assert op in UNARY
        if not self.dtype.is_float:
            raise DTypeError(f"{op.title} needs a float tensor, got {self.dtype}; cast it first")
        return self._new(op, self.dtype, self.shape, (self,))

    def cast(self, dtype) -> Tensor:
        dtype = DType.of(dtype)
        if dtype is self.dtype:
            return self
        return self._new(Op.CAST, dtype, self.shape, (self,), None)

    to = cast

    # --- movement: free views --------------------------------------------------------------
    def _tracker(self) -> tuple[Node, ShapeTracker]:
        if self.node.op is Op.VIEW:
            return self.node.src[0], self.node.arg
        return self.node, ShapeTracker.contiguous(self.shape)

    def _view(self, base: Node, st: ShapeTracker) -> Tensor:
        if st.is_contiguous() and len(st.shape) == len(base.shape) and all(
            sym.equal(a, b) for a, b in zip(st.shape, base.shape)
        ):
            return Tensor(self.graph, base)
        return Tensor(self.graph, Node(Op.VIEW, base.dtype, st.shape, (base,), st))

    def contiguous(self) -> Tensor:
        if self.node.op is not Op.VIEW:
            return self
        return self._new(Op.CONTIGUOUS, self.dtype, self.shape, (self,))

    def permute(self, *order) -> Tensor:
        order = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else order
        order = tuple(normalize_axis(a, self.ndim) for a in order)
        base, st = self._tracker()
        return self._view(base, st.permute(order))

    def transpose(self, a: int = -2, b: int = -1) -> Tensor:
        order = list(range(self.ndim))
        a, b = normalize_axis(a, self.ndim), normalize_axis(b, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape) -> Tensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        lead = len(shape) - self.ndim
        shape = tuple(
            self.shape[i - lead] if (not isinstance(d, str) and d == -1) else sym.parse(d)
            for i, d in enumerate(shape)
        )
        if len(shape) == self.ndim and all(sym.equal(a, b) for a, b in zip(shape, self.shape)):
            return self
        base, st = self._tracker()
        return self._view(base, st.expand(shape))

    broadcast_to = expand

    def reshape(self, *shape) -> Tensor:
        shape = list(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else list(shape)
        if shape.count(-1) > 1:
            raise ShapeError(f"reshape {tuple(shape)}: only one dim may be -1")
        if -1 in shape:
            known = sym.product(sym.parse(d) for d in shape if not (isinstance(d, int) and d == -1))
            missing = sym.exact_div(self.numel, known) if not sym.equal(known, 0) else 0
            if missing is None:
                raise ShapeError(f"cannot reshape {self.shape} into {tuple(shape)}")
            shape[shape.index(-1)] = missing
        shape = tuple(sym.parse(d) for d in shape)
        if len(shape) == self.ndim and all(sym.equal(a, b) for a, b in zip(shape, self.shape)):
            return self
        base, st = self._tracker()
        new = st.reshape(shape)
        if new is None:  # not expressible as a view: materialize first
            return self.contiguous().reshape(shape)
        return self._view(base, new)

    view = reshape

    def flatten(self, start: int = 0, end: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        start, end = normalize_axis(start, self.ndim), normalize_axis(end, self.ndim)
        merged = sym.product(self.shape[start : end + 1])
        return self.reshape(self.shape[:start] + (merged,) + self.shape[end + 1 :])

    def unsqueeze(self, axis: int) -> Tensor:
        axis = normalize_axis(axis, self.ndim + 1)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def squeeze(self, axis=None) -> Tensor:
        if self.ndim == 0:
            if axis is not None:
                [normalize_axis(a, 0) for a in (axis if isinstance(axis, (tuple, list)) else [axis])]
            return self
        if axis is None:
            axes = [i for i, d in enumerate(self.shape) if sym.equal(d, 1)]
        else:
            axes = [normalize_axis(a, self.ndim) for a in (axis if isinstance(axis, (tuple, list)) else [axis])]
            axes = [a for a in axes if sym.equal(self.shape[a], 1)]  # torch: no-op on other dims
        return self.reshape(tuple(d for i, d in enumerate(self.shape) if i not in axes))

    def unfold(self, axis: int, size, step: int) -> Tensor:
        """torch.Tensor.unfold: every window of `size` along `axis`, `step` apart, as a new last
        dim; a free view (strides: step times the axis stride, and the axis stride)."""
        if not isinstance(step, int) or step < 1:
            raise ShapeError(f"unfold: step must be a positive int, got {step!r}")
        if self.ndim == 0:
            return self.reshape(1).unfold(0, size, step).reshape((size,))
        a = normalize_axis(axis, self.ndim)
        n = self.shape[a]
        if sym.is_static(n) and sym.is_static(size) and not 0 <= int(size) <= int(n):
            raise ShapeError(f"unfold: size {size} exceeds the axis' {n}")
        count = sym.norm((n - size) // step + 1)
        x = self.contiguous() if self._tracker()[1].mask is not None else self
        base, st = x._tracker()
        from luminal.hlir.shape import ShapeTracker

        shape = st.shape[:a] + (count,) + st.shape[a + 1 :] + (sym.parse(size),)
        strides = st.strides[:a] + (sym.norm(st.strides[a] * step),) + st.strides[a + 1 :] + (st.strides[a],)
        return x._view(base, ShapeTracker(shape, strides, st.offset))

    def slice(self, axis: int, start=None, stop=None, step: int = 1) -> Tensor:
        """Python slice semantics on one axis: negative bounds count from the end, clamped."""
        axis = normalize_axis(axis, self.ndim)
        n = self.shape[axis]
        if step == 0:
            raise ShapeError("slice step cannot be zero")
        if step > 0:
            start = _clamp_bound(0 if start is None else start, n, 0)
            stop = _clamp_bound(n if stop is None else stop, n, 0)
            stop = sym.dmax(stop, start)
        else:
            start = _clamp_bound(n - 1 if start is None else start, n, -1)
            stop = -1 if stop is None else _clamp_bound(stop, n, -1)
            stop = sym.dmin(stop, start)
        base, st = self._tracker()
        return self._view(base, st.slice(axis, start, stop, step))

    def narrow(self, axis: int, start, length) -> Tensor:
        return self.slice(axis, start, sym.norm(sym.parse(start) + sym.parse(length)))

    def __getitem__(self, key) -> Tensor:
        key = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, Tensor) for k in key):
            return self.index(key)
        n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
        if n_real > self.ndim:
            raise ShapeError(f"too many indices ({n_real}) for a tensor with {self.ndim} dims")
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (self.ndim - n_real) + key[i + 1 :]
        else:
            key = key + (slice(None),) * (self.ndim - n_real)
        out, axis, drop = self, 0, []
        for k in key:
            if k is None:
                out = out.unsqueeze(axis)
                axis += 1
            elif isinstance(k, slice):
                out = out.slice(axis, k.start, k.stop, 1 if k.step is None else k.step)
                axis += 1
            elif isinstance(k, numbers.Integral) or hasattr(k, "free_symbols"):
                n = out.shape[axis]
                if isinstance(k, numbers.Integral) and sym.is_static(n) and not -n <= k < n:
                    raise ShapeError(f"index {k} is out of range for axis {axis} of size {n}")
                start = k + n if isinstance(k, numbers.Integral) and k < 0 else k
                out = out.slice(axis, start, sym.norm(start + 1), 1)
                drop.append(axis)
                axis += 1
            else:
                raise ShapeError(f"unsupported index {k!r}")
        return out.reshape(tuple(d for i, d in enumerate(out.shape) if i not in drop)) if drop else out

    def pad(self, pads, value=0) -> Tensor:
        """`pads`: one (before, after) pair per axis, first axis first. Negative pads crop."""
        pads = [tuple(p) for p in pads]
        if len(pads) != self.ndim:
            raise ShapeError(f"pad needs {self.ndim} (before, after) pairs, got {len(pads)}")
        out = self
        for axis, (before, after) in enumerate(pads):  # negative padding is a crop
            if isinstance(before, int) and before < 0:
                out = out.slice(axis, -before, None)
            if isinstance(after, int) and after < 0:
                out = out.slice(axis, 0, sym.norm(out.shape[axis] + after))
        pads = [(max(b, 0) if isinstance(b, int) else b, max(a, 0) if isinstance(a, int) else a) for b, a in pads]
        base, st = out._tracker()
        padded = out._view(base, st.pad(pads))
        if value == 0 or value is False:
            return padded
        inside = self.graph.scalar(True, DType.BOOL).expand(out.shape)
        base, st = inside._tracker()
        inside = inside._view(base, st.pad(pads))
        return padded.where_(inside, value)

    # --- operators -------------------------------------------------------------------------
    def __add__(self, o):
        return self.add(o)

    def __radd__(self, o):
        return self._operand(o, Op.ADD.title).add(self)

    def __sub__(self, o):
        return self.sub(o)

    def __rsub__(self, o):
        return self._operand(o, "Sub").sub(self)

    def __mul__(self, o):
        return self.mul(o)

    def __rmul__(self, o):
        return self._operand(o, Op.MUL.title).mul(self)

    def __truediv__(self, o):
        return self.div(o)

    def __rtruediv__(self, o):
        return self._operand(o, "Div").div(self)

    def __mod__(self, o):  # Python and torch: floor mod, the sign of the divisor (fmod() is C's)
        return self.remainder(o)

    def __rmod__(self, o):
        return self._operand(o, "Remainder").remainder(self)

    def __floordiv__(self, o):
        return self.div(o, rounding_mode="floor")

    def __rfloordiv__(self, o):
        return self._operand(o, "Div").div(self, rounding_mode="floor")

    def __neg__(self):
        return self.neg()

    def __pow__(self, o):
        return self.pow(o)

    def __matmul__(self, o):
        return self.matmul(o)

    def __lt__(self, o):
        return self.lt(o)

    def __le__(self, o):
        return self.le(o)

    def __gt__(self, o):
        return self.gt(o)

    def __ge__(self, o):
        return self.ge(o)

    def __and__(self, o):
        return self.logical_and(o)

    def __or__(self, o):
        return self.logical_or(o)

    def __invert__(self):
        return self.logical_not()

    __hash__ = object.__hash__  # == is not overloaded (use .eq), so tensors stay hashable


def _clamp_bound(v, n, low):
    """Python slice bound normalization: negative counts from the end, clamped to [low, n]."""
    if isinstance(v, numbers.Integral):
        v = int(v)
        if v < 0:
            v = sym.norm(v + n)
            return sym.dmax(v, low) if not sym.is_static(v) else max(v, low)
        top = n if low == 0 else sym.norm(n - 1)
        return min(v, top) if sym.is_static(top) else sym.dmin(v, top)
    return sym.dmin(sym.parse(v), n)
