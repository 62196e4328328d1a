"""Shape and movement ops, constants, indexing (Gather/Scatter), Pad, TopK, Trilu."""

from __future__ import annotations

import numpy as np
import onnx

from luminal.builder import functional as F
from luminal.builder.tensor import broadcast_shapes
from luminal.frontends.onnx.errors import NeedsShape
from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.values import DTYPES, Known
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

KNOWN_LIMIT = 1 << 24  # elements a Range computes while compiling; a longer one runs in the graph
BIG = 2**62  # |bounds| beyond this mean "to the end" (INT64_MAX / INT64_MIN in exported models)


def dims(arr) -> list:
    """A known 1-D value as a list of dims (Python ints or sympy expressions)."""
    return [int(v) if isinstance(v, (int, np.integer)) else sym.norm(v) for v in np.asarray(arr).reshape(-1).tolist()]


def known_array(arr: np.ndarray) -> Known:
    """A Known from a NumPy array of any ONNX dtype (narrow integers widen)."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
    return Known(arr, DTYPES[elem])


# --- constants and shapes ----------------------------------------------------------------
@onnx_op("Constant")
def constant(c, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        return known_array(value)
    if value_float is not None:
        return Known(np.array(value_float, np.float32))
    if value_floats is not None:
        return Known(np.array(value_floats, np.float32))
    if value_int is not None:
        return Known(np.array(value_int, np.int64))
    if value_ints is not None:
        return Known(np.array(value_ints, np.int64))
    c.fail("string and sparse constants are not supported")


@onnx_op("Shape")
def shape(c, x, start=0, end=None):
    d = list(x.shape)[start:end]
    if all(sym.is_static(v) for v in d):
        return Known(np.array(d, np.int64))
    return Known(np.array(d, dtype=object), DType.I64)


@onnx_op("Size")
def size(c, x):
    n = sym.product(x.shape)
    return Known(np.array(n, np.int64)) if sym.is_static(n) else Known(np.array(n, dtype=object), DType.I64)


@onnx_op("ConstantOfShape", known=(0,))
def constant_of_shape(c, shape, value=None):
    value = np.zeros(1, np.float32) if value is None else value
    kv = known_array(value.reshape(-1)[:1].reshape(()))
    v = kv.array.item()
    return c.g.scalar(v, kv.dtype).expand(tuple(dims(shape)))


@onnx_op("Range", known=(0, 1, 2))
def range_(c, start, limit, delta):
    s, l_, d = (np.asarray(v).reshape(()).item() for v in (start, limit, delta))
    if np.asarray(start).dtype != object and np.asarray(limit).dtype != object and np.asarray(delta).dtype != object:
        dtype = DType.of(np.asarray(start).dtype) if np.asarray(start).dtype in (np.float32, np.float64, np.int32, np.int64) else DType.I64
        n = max(int(np.ceil((l_ - s) / d)), 0)
        if n <= KNOWN_LIMIT:
            return Known((s + np.arange(n) * d).astype(dtype.numpy), dtype)
        if not dtype.is_int:  # computed at run time: compiling never allocates what the model only might
            c.fail(f"a float Range of {n} elements")
        return F.arange(c.g, int(s), int(l_), int(d), dtype)
    return F.arange(c.g, s, l_, int(d), DType.I64)


@onnx_op("EyeLike")
def eye_like(c, x, dtype=None, k=0):
    out_dt = c.dtype(dtype) if dtype is not None else x.dtype
    n, m = x.shape
    rows = c.g.iota(n, DType.I64).reshape(n, 1).expand(n, m)
    cols = c.g.iota(m, DType.I64).reshape(1, m).expand(n, m)
    return cols.sub(rows).eq(k).cast(out_dt)


# --- movement ----------------------------------------------------------------------------
@onnx_op("Reshape", since=5, known=(1,))
def reshape(c, x, shape, allowzero=0):
    target = dims(shape)
    if not allowzero:
        target = [x.shape[i] if isinstance(d, int) and d == 0 else d for i, d in enumerate(target)]
    return x.reshape(tuple(target))


@onnx_op("Flatten")
def flatten(c, x, axis=1):
    a = axis + x.ndim if axis < 0 else axis
    return x.reshape(sym.product(x.shape[:a]), sym.product(x.shape[a:]))


@onnx_op("Transpose")
def transpose(c, x, perm=None):
    return x.permute(tuple(perm) if perm is not None else tuple(reversed(range(x.ndim))))


@onnx_op("Squeeze", since=13, known=(1,))
def squeeze(c, x, axes=None):
    if axes is None:
        return x.squeeze()
    axes = sorted({a % x.ndim for a in dims(axes)})
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


@onnx_op("Squeeze", since=1)
def squeeze_v1(c, x, axes=None):
    return squeeze(c, x, None if axes is None else np.array(axes))


@onnx_op("Unsqueeze", since=13, known=(1,))
def unsqueeze(c, x, axes):
    rank = x.ndim + len(dims(axes))
    axes = sorted(a % rank for a in dims(axes))
    out, it = [], iter(x.shape)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return x.reshape(tuple(out))


@onnx_op("Unsqueeze", since=1)
def unsqueeze_v1(c, x, axes):
    return unsqueeze(c, x, np.array(axes))


@onnx_op("Expand", known=(1,))
def expand(c, x, shape):
    return x.expand(broadcast_shapes(x.shape, tuple(dims(shape))))


@onnx_op("Tile", known=(1,))
def tile(c, x, repeats):
    reps = dims(repeats)
    inter = []
    for d in x.shape:
        inter += [1, d]
    big = []
    for r, d in zip(reps, x.shape):
        big += [r, d]
    out = x.reshape(tuple(inter)).expand(tuple(big))
    return out.reshape(tuple(sym.norm(r * d) for r, d in zip(reps, x.shape)))


@onnx_op("Concat", variadic=True)
def concat(c, *xs, axis):
    xs = [x for x in xs if x is not None]
    return F.concat(xs, axis)


def _min(c, a, b):
    """min(a, b) for a requested bound a and a limit b. When sympy cannot decide: a symbolic
    bound against a static size is taken to be valid (a <= b is assumed and checked at every
    call; OnnxModel raises if a binding breaks it); a static bound against a symbolic size
    (tf2onnx's end=1000000000 on a dynamic batch dim, or x[:3] of a dynamic length) is resolved
    per call: the model compiles per shape of the inputs the size comes from (`NeedsShape`),
    never picking the static number as the size."""
    if sym.is_static(a) and sym.is_static(b):
        return min(a, b)
    if sym.is_static(a) and a <= 0:  # b is a size: never negative
        return a
    d = sym.as_expr(b) - a
    if d.is_nonnegative:
        return a
    if d.is_nonpositive:
        return b
    _undecided(c, a, b)
    c.importer.assume(a, b)
    return a


def _undecided(c, bound, size):
    if sym.is_static(bound) and not sym.is_static(size):
        raise NeedsShape(f"{c.node.op_type} node {c.name!r}: bound {bound} against the symbolic size {size}: "
                         "compiled per shape", c.node.input[0])


def _max(c, a, b):
    if sym.is_static(a) and sym.is_static(b):
        return max(a, b)
    d = sym.as_expr(a) - b
    if d.is_nonnegative:
        return a
    if d.is_nonpositive:
        return b
    _undecided(c, a, b)
    c.importer.assume(b, a)
    return a


def _slice(c, x, axis, start, end, step):
    """ONNX Slice bounds (negative from the end, clamped) on one axis, as a view."""
    n = x.shape[axis]
    if step > 0:
        start = 0 if sym.is_static(start) and start <= -BIG else start
        end = n if sym.is_static(end) and end >= BIG else end
        if sym.is_static(start) and start < 0:
            start = _max(c, sym.norm(start + n), 0)
        if sym.is_static(end) and end < 0:
            end = _max(c, sym.norm(end + n), 0)
        start = _min(c, start, n)
        end = _max(c, _min(c, end, n), start)
    else:
        start = sym.norm(n - 1) if sym.is_static(start) and start >= BIG else start
        end = -1 if sym.is_static(end) and end <= -BIG else end
        if sym.is_static(start) and start < 0:
            start = sym.norm(start + n)
        if sym.is_static(end) and end < -1:
            end = sym.norm(end + n)
        start = _min(c, _max(c, start, -1), sym.norm(n - 1))
        end = _min(c, _max(c, end, -1), start)
        if sym.is_static(start) and start < 0:
            start, end = 0, 0  # empty
            step = 1
    base, st = x._tracker()
    return x._view(base, st.slice(axis, start, end, step))


@onnx_op("Slice", since=10, known=(1, 2, 3, 4))
def slice_(c, x, starts, ends, axes=None, steps=None):
    starts, ends = dims(starts), dims(ends)
    axes = list(range(len(starts))) if axes is None else [a % x.ndim for a in dims(axes)]
    steps = [1] * len(starts) if steps is None else dims(steps)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if not isinstance(st, int) or st == 0:
            c.fail(f"slice step {st} must be a nonzero integer")
        x = _slice(c, x, a, s, e, st)
    return x


@onnx_op("Slice", since=1)
def slice_v1(c, x, starts, ends, axes=None):
    return slice_(c, x, np.array(starts), np.array(ends), None if axes is None else np.array(axes))


@onnx_op("Split", since=13, known=(1,))
def split(c, x, split=None, axis=0, num_outputs=None):
    a = axis % x.ndim
    n = x.shape[a]
    if split is not None:
        sizes = dims(split)
    else:
        k = num_outputs or c.n_outputs
        if not sym.is_static(n):
            q = sym.exact_div(n, k)
            if q is None:
                c.fail(f"cannot split symbolic axis {n} into {k} equal parts")
            sizes = [q] * k
        else:
            size = -(-n // k)
            sizes = [min(size, max(n - i * size, 0)) for i in range(k)]
    return F.split_sizes(x, a, sizes)


@onnx_op("Split", since=1)
def split_v1(c, x, split=None, axis=0):
    return globals()["split"](c, x, None if split is None else np.array(split), axis)


# --- indexing ----------------------------------------------------------------------------
@onnx_op("Gather")
def gather(c, x, idx, axis=0):
    a = axis % x.ndim
    idx = x.normalize_index(idx, a)
    picked = x.index_select(a, idx.reshape(1) if idx.ndim == 0 else idx.flatten())
    return picked.reshape(x.shape[:a] + idx.shape + x.shape[a + 1:])


@onnx_op("GatherElements")
def gather_elements(c, x, idx, axis=0):
    a = axis % x.ndim
    return x.gather(a, x.normalize_index(idx, a))


def _linear_index(c, data, idx, k):
    """Row-major linear index into the first k dims of data, from idx[..., k]; shape idx[:-1]."""
    dt = DType.I64
    idx = idx.cast(dt)
    lin = None
    for j in range(k):
        col = idx.slice(-1, j, j + 1).squeeze(-1)
        col = col.add(c.g.scalar(data.shape[j], dt)).where_(col.lt(0), col)
        lin = col if lin is None else lin.mul(c.g.scalar(data.shape[j], dt)).add(col)
    return lin


@onnx_op("GatherND")
def gather_nd(c, x, idx, batch_dims=0):
    if batch_dims:
        c.fail("batch_dims > 0 is not supported")
    k = idx.shape[-1]
    lin = _linear_index(c, x, idx, k)
    flat = x.reshape((sym.product(x.shape[:k]),) + x.shape[k:])
    picked = flat.index_select(0, lin.reshape(1) if lin.ndim == 0 else lin.flatten())
    return picked.reshape(idx.shape[:-1] + x.shape[k:])


@onnx_op("ScatterND")
def scatter_nd(c, data, idx, updates, reduction="none"):
    k = idx.shape[-1]
    lin = _linear_index(c, data, idx, k).flatten() if idx.ndim > 1 else _linear_index(c, data, idx, k).reshape(1)
    rest = data.shape[k:]
    flat = data.reshape((sym.product(data.shape[:k]),) + rest)
    m = lin.shape[0]
    upd = updates.reshape((m,) + rest)
    index = lin.reshape((m,) + (1,) * len(rest)).expand((m,) + rest)
    out = flat.scatter(0, index, upd, None if reduction == "none" else reduction)
    return out.reshape(data.shape)


@onnx_op("ScatterElements", "Scatter")
def scatter_elements(c, data, idx, updates, axis=0, reduction="none"):
    a = axis % data.ndim
    return data.scatter(a, data.normalize_index(idx, a), updates, None if reduction == "none" else reduction)


@onnx_op("OneHot", known=(1,))
def one_hot(c, indices, depth, values, axis=-1):
    d = int(np.asarray(depth).reshape(-1)[0])
    idx = indices.cast(DType.I64)
    idx = idx.add(d).where_(idx.lt(0), idx)
    rank = idx.ndim + 1
    a = axis % rank
    pos = c.g.iota(d, DType.I64).reshape(tuple(d if i == a else 1 for i in range(rank)))
    hot = idx.unsqueeze(a).eq(pos)
    off, on = values.slice(0, 0, 1).reshape(()), values.slice(0, 1, 2).reshape(())
    return F.where(hot, on, off)


# --- padding, top-k, triangles -----------------------------------------------------------
@onnx_op("Pad", since=11, known=(1, 2, 3))
def pad(c, x, pads, constant_value=None, axes=None, mode="constant"):
    p = dims(pads)
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in dims(axes)]
    half = len(p) // 2
    pairs = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        pairs[a] = (p[i], p[i + half])
    if mode == "constant":
        value = 0 if constant_value is None or np.asarray(constant_value).size == 0 else np.asarray(constant_value).reshape(-1)[0].item()
        if x.dtype is DType.BOOL:
            value = bool(value)
        return x.pad(pairs, value)
    # negative pads crop, before the others pad (what an edge, reflection or wrap repeats is the
    # cropped tensor's, as onnxruntime)
    for a, (before, after) in enumerate(pairs):
        if before < 0 or after < 0:
            x = x.slice(a, max(-before, 0), sym.norm(x.shape[a] - max(-after, 0)))
    for a, (before, after) in enumerate(pairs):
        x = _pad_axis(x, a, max(before, 0), max(after, 0), mode)
    return x


@onnx_op("Pad", since=1)
def pad_v2(c, x, pads, mode="constant", value=0.0):
    return pad(c, x, np.array(pads), np.array(value), None, mode)


def _pad_axis(x, a, before, after, mode):
    n = x.shape[a]
    parts = []
    if mode == "reflect":
        if before:
            parts.append(x.slice(a, before, 0, -1))
        parts.append(x)
        if after:
            stop = sym.norm(n - 2 - after)
            parts.append(x.slice(a, sym.norm(n - 2), None if sym.is_static(stop) and stop < 0 else stop, -1))
    elif mode == "edge":
        if before:
            first = x.slice(a, 0, 1)
            parts.append(first.expand(tuple(before if i == a else d for i, d in enumerate(x.shape))))
        parts.append(x)
        if after:
            last = x.slice(a, sym.norm(n - 1), n)
            parts.append(last.expand(tuple(after if i == a else d for i, d in enumerate(x.shape))))
    elif mode == "wrap":
        if before:
            parts.append(x.slice(a, sym.norm(n - before), n))
        parts.append(x)
        if after:
            parts.append(x.slice(a, 0, after))
    else:
        raise ValueError(f"unknown pad mode {mode!r}")
    return F.concat(parts, a) if len(parts) > 1 else x


@onnx_op("TopK", known=(1,))
def top_k(c, x, k, axis=-1, largest=1, sorted=1):  # noqa: A002 - ONNX name
    kk = dims(k)[0]
    values, indices = x.topk(kk, axis, largest=bool(largest))
    return values, indices


@onnx_op("Trilu", known=(1,))
def trilu(c, x, k=None, upper=1):
    diag = 0 if k is None else dims(k)[0]
    return x.triu(diag) if upper else x.tril(diag)


@onnx_op("Dropout", since=12, known=(1, 2))
def dropout(c, x, ratio=None, training_mode=None, seed=None):
    train = training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0])
    r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    if train and r > 0:  # random: luminal's Philox generator (`ops_random`)
        from luminal.builder.random import dropout as random_dropout
        from luminal.frontends.onnx.ops_random import seed_of

        out, mask = random_dropout(x, r, None, seed_of(seed))
        return (out, mask) if c.n_outputs > 1 else out
    mask = c.g.scalar(True, DType.BOOL).expand(x.shape)
    return (x, mask) if c.n_outputs > 1 else x


@onnx_op("Dropout", since=1)
def dropout_v1(c, x, ratio=0.5, is_test=0, seed=None):
    mask = c.g.scalar(True, DType.BOOL).expand(x.shape)
    return (x, mask) if c.n_outputs > 1 else x


@onnx_op("DepthToSpace")
def depth_to_space(c, x, blocksize, mode="DCR"):
    b = blocksize
    n, ch, h, w = x.shape
    oc = sym.floordiv(ch, b * b)
    if mode == "DCR":
        y = x.reshape(n, b, b, oc, h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, oc, b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, oc, sym.norm(h * b), sym.norm(w * b))


@onnx_op("SpaceToDepth")
def space_to_depth(c, x, blocksize, mode="DCR"):
    b = blocksize
    n, ch, h, w = x.shape
    y = x.reshape(n, ch, sym.floordiv(h, b), b, sym.floordiv(w, b), b)
    y = y.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return y.reshape(n, sym.norm(ch * b * b), sym.floordiv(h, b), sym.floordiv(w, b))
