"""Builder functions that take several tensors or none: where, concat, stack, split, arange.

`where` is a Gather from the stacked pair `[b, a]` with the condition as index, and `concat`
writes each part into a zero buffer with a Scatter: both move values exactly (no arithmetic on
the unselected value, so a masked -inf or NaN cannot leak into the result).
"""

from __future__ import annotations

import numbers

from luminal.errors import DTypeError, ShapeError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op


def index_dtype(n) -> DType:
    """int32 indices unless an axis is (or may be) too long for them."""
    return DType.I32 if sym.is_static(n) and n < 2**31 else DType.I64


def where(cond, a, b):
    """`a` where `cond` is true, else `b`; scalars take the dtype of the tensor operand."""
    from luminal.builder.tensor import Tensor, broadcast_shapes

    if not isinstance(cond, Tensor) or cond.dtype is not DType.BOOL:
        raise DTypeError(f"where: the condition must be a bool tensor, got {getattr(cond, 'dtype', type(cond).__name__)}")
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise DTypeError("where: at least one of the two values must be a tensor")
    a = a if isinstance(a, Tensor) else b._scalar(a)
    b = b if isinstance(b, Tensor) else a._scalar(b)
    if a.graph is not b.graph or a.graph is not cond.graph:
        raise ShapeError("where: operands belong to different graphs")
    if a.dtype is not b.dtype:
        raise DTypeError(f"where: dtype mismatch between values ({a.dtype} and {b.dtype})")
    shape = broadcast_shapes(cond.shape, a.shape, b.shape)
    pair = stack([b.expand(shape), a.expand(shape)], -1)
    index = cond.expand(shape).cast(DType.I32).unsqueeze(-1)
    picked = pair._new(Op.GATHER, a.dtype, shape + (1,), (pair, index), len(shape))
    return picked.reshape(shape)


def concat(tensors, axis: int = 0):
    from luminal.builder.tensor import normalize_axis

    tensors = list(tensors)
    if not tensors:
        raise ShapeError("concat of an empty list of tensors")
    # torch.cat skips legacy empty 1-D tensors of shape (0,)
    tensors = [t for t in tensors if not (t.ndim == 1 and sym.equal(t.shape[0], 0))] or tensors[:1]
    first = tensors[0]
    axis = normalize_axis(axis, first.ndim)
    for t in tensors[1:]:
        if t.dtype is not first.dtype:
            raise DTypeError(f"concat: dtype mismatch ({first.dtype} and {t.dtype})")
        if t.ndim != first.ndim or any(
            i != axis and not sym.equal(a, b) for i, (a, b) in enumerate(zip(t.shape, first.shape))
        ):
            raise ShapeError(f"concat on axis {axis}: shapes {first.shape} and {t.shape} differ off that axis")
    tensors = [t for t in tensors if not sym.equal(t.shape[axis], 0)] or tensors[:1]
    if len(tensors) == 1:
        return tensors[0]
    total = sym.norm(sum(t.shape[axis] for t in tensors))
    shape = first.shape[:axis] + (total,) + first.shape[axis + 1 :]
    out = first.graph.scalar(_zero(first.dtype), first.dtype).expand(shape)
    idx_dtype = index_dtype(total)
    offset = 0
    for t in tensors:
        n = t.shape[axis]
        pos = first.graph.iota(n, idx_dtype)
        if not sym.equal(offset, 0):
            pos = pos.add(first.graph.scalar(offset, idx_dtype))
        pos = pos.reshape(tuple(n if i == axis else 1 for i in range(t.ndim))).expand(t.shape)
        out = out._new(Op.SCATTER, first.dtype, shape, (out, pos, t), (axis, None))
        offset = sym.norm(offset + n)
    return out


cat = concat


def stack(tensors, axis: int = 0):
    from luminal.builder.tensor import normalize_axis

    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack of an empty list of tensors")
    axis = normalize_axis(axis, tensors[0].ndim + 1)
    return concat([t.unsqueeze(axis) for t in tensors], axis)


def split(t, split_size_or_sections, axis: int = 0):
    """torch.split: chunks of one size (the last may be smaller) or a list of sizes."""
    from luminal.builder.tensor import normalize_axis

    axis = normalize_axis(axis, t.ndim)
    n = t.shape[axis]
    if isinstance(split_size_or_sections, numbers.Integral):
        size = int(split_size_or_sections)
        if not sym.is_static(n):
            raise ShapeError(f"split of symbolic axis {n} into chunks of {size}: pass explicit sizes")
        sizes = [min(size, n - i) for i in range(0, n, size)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if not sym.equal(sym.norm(sum(sizes)), n):
            raise ShapeError(f"split sizes {sizes} do not add up to axis size {n}")
    return split_sizes(t, axis, sizes)


def split_sizes(t, axis: int, sizes):
    """Consecutive slices of the given (possibly symbolic) sizes along `axis`."""
    outs, start = [], 0
    for size in sizes:
        stop = sym.norm(start + size)
        outs.append(t.slice(axis, start, stop))
        start = stop
    return outs


def chunk(t, chunks: int, axis: int = 0):
    n = t.shape[axis]
    if not sym.is_static(n):
        raise ShapeError(f"chunk of symbolic axis {n}: use split with explicit sizes")
    size = -(-n // chunks)
    return split(t, max(size, 1), axis)


def _zero(dtype: DType):
    return False if dtype is DType.BOOL else (0.0 if dtype.is_float else 0)


def arange(graph, start, stop=None, step=1, dtype=DType.I64):
    """torch.arange: [start, stop) by step; symbolic bounds work for integer steps."""
    if stop is None:
        start, stop = 0, start
    dtype = DType.of(dtype)
    if all(isinstance(v, numbers.Real) for v in (start, stop, step)):
        import math

        n = max(math.ceil((stop - start) / step), 0)
    else:
        n = sym.dmax(sym.ceildiv(sym.norm(sym.parse(stop) - start), step), 0)
    out = graph.iota(n, index_dtype(n) if not dtype.is_int else dtype).cast(dtype)
    if step != 1:
        out = out.mul(graph.scalar(step, dtype))
    if not (isinstance(start, numbers.Real) and start == 0):
        out = out.add(graph.scalar(start, dtype))
    return out


def full(graph, shape, value, dtype=DType.F32):
    dtype = DType.of(dtype)
    return graph.scalar(value, dtype).expand(tuple(sym.parse(d) for d in shape))


def triangle(x, diagonal: int, upper: bool):
    """triu/tril: keep x[..., i, j] where j - i >= diagonal (upper) or <= diagonal (lower)."""
    if x.ndim < 2:
        raise ShapeError(f"triu/tril need at least 2 dims, got shape {x.shape}")
    m, n = x.shape[-2], x.shape[-1]
    dt = DType.I64
    rows = x.graph.iota(m, dt).reshape(m, 1).expand(m, n)
    cols = x.graph.iota(n, dt).reshape(1, n).expand(m, n)
    offset = cols.sub(rows)
    keep = offset.ge(diagonal) if upper else offset.le(diagonal)
    return x.where_(keep, _zero(x.dtype))


def embedding(ids, weight):
    """F.embedding(ids, weight): rows of `weight` picked by the integer tensor `ids`."""
    return weight.index_select(0, ids.flatten()).reshape(ids.shape + (weight.shape[1],))


__all__ = ["where", "concat", "cat", "stack", "split", "chunk", "arange", "full", "embedding", "triangle"]
