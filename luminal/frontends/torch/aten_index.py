"""Tensor creation, gather/scatter, advanced indexing, embedding, top-k and sort."""

from __future__ import annotations

from luminal.builder.functional import embedding as lembedding
from luminal.builder.functional import index_dtype
from luminal.builder.functional import where as lwhere
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_ops import aten, cast_to, fit_scalar
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


# --- creation ----------------------------------------------------------------------------
@aten("full.default")
def full(cx, size, fill_value, **kwargs):
    return cx.full(cx.shape, fill_value, cx.dtype)


@aten("new_full.default")
def new_full(cx, x, size, fill_value, **kwargs):
    return cx.full(cx.shape, fill_value, cx.dtype)


@aten("full_like.default")
def full_like(cx, x, value, **kwargs):
    return cx.full(cx.shape, value, cx.dtype)


@aten("zeros.default", "zeros_like.default", "new_zeros.default", "empty.memory_format", "empty_like.default",
      "empty_permuted.default",
      "new_empty.default", "empty.default", "empty_strided.default", "new_empty_strided.default")
def zeros(cx, *args, **kwargs):
    return cx.full(cx.shape, 0, cx.dtype)  # empty tensors read as zeros


@aten("ones.default", "ones_like.default", "new_ones.default")
def ones(cx, *args, **kwargs):
    return cx.full(cx.shape, 1, cx.dtype)


@aten("scalar_tensor.default")
def scalar_tensor(cx, value, **kwargs):
    return cx.g.scalar(fit_scalar(value, cx.dtype), cx.dtype)


@aten("arange.default", "arange.start", "arange.start_step")
def arange(cx, *args, **kwargs):
    nums = [a for a in args if not isinstance(a, (str, bool)) and a is not None]
    start, step = (0, 1) if len(nums) == 1 else (nums[0], nums[2] if len(nums) > 2 else 1)
    n = cx.shape[0]
    dt = cx.dtype
    out = cx.g.iota(n, index_dtype(n) if not dt.is_int else dt).cast(dt)
    if step != 1:
        out = out.mul(fit_scalar(step, dt))
    if not (isinstance(start, (int, float)) and start == 0):
        out = out.add(cx.g.scalar(fit_scalar(start, dt), dt))
    return out


# --- gather and scatter ------------------------------------------------------------------
@aten("gather.default")
def gather(cx, x, dim, index, sparse_grad=False):
    return x.gather(dim, x.normalize_index(index, dim % max(x.ndim, 1)) if x.ndim else index)


@aten("index_select.default")
def index_select(cx, x, dim, index):
    if x.ndim == 0:  # torch: a 0-d tensor reads as one element (index 0 or -1)
        return index_select(cx, x.reshape(1), 0, index).reshape(cx.shape)
    dim = dim % max(x.ndim, 1)
    return x.index_select(dim, x.normalize_index(index.reshape(-1), dim)).reshape(cx.shape)


@aten("scatter.src", "scatter.value", "scatter.reduce", "scatter.value_reduce")
def scatter(cx, x, dim, index, src, reduce=None):
    src = cast_to(x.dtype, src)
    reduce = {"add": "add", "multiply": "mul"}.get(reduce, reduce)
    return x.scatter(dim, index, src, reduce)


@aten("scatter_add.default")
def scatter_add(cx, x, dim, index, src):
    return x.scatter(dim, index, src.cast(x.dtype), "add")


@aten("scatter_reduce.two")
def scatter_reduce(cx, x, dim, index, src, reduce, *, include_self=True):
    if not include_self or reduce == "mean":
        raise UnsupportedError(f"scatter_reduce with reduce={reduce!r}, include_self={include_self}")
    return x.scatter(dim, index, src.cast(x.dtype), reduce)


@aten("masked_scatter.default")
def masked_scatter(cx, x, mask, source):
    return x.masked_scatter(mask, source)


@aten("embedding.default")
def embedding(cx, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return lembedding(ids, weight)


# --- advanced indexing -------------------------------------------------------------------
def _front(x, indices):
    """(x, index tensors, first axis): non-adjacent index tensors are moved to the front,
    which is where torch puts their broadcast dims."""
    idx = list(indices) + [None] * (x.ndim - len(indices))
    pos = [i for i, t in enumerate(idx) if t is not None]
    tensors = [idx[i] for i in pos]
    if any(t.dtype is DType.BOOL for t in tensors):
        raise UnsupportedError("indexing with a bool mask (the result shape depends on the data)")
    if pos != list(range(pos[0], pos[-1] + 1)):
        order = pos + [i for i in range(x.ndim) if i not in pos]
        return x.permute(order), tensors, 0, order
    return x, tensors, pos[0], None


@aten("index.Tensor", "_unsafe_index.Tensor")
def index(cx, x, indices):
    x, tensors, first, _ = _front(x, indices)
    key = (slice(None),) * first + tuple(tensors)
    return x.index(key).reshape(cx.shape)


@aten("index_put.default", "_unsafe_index_put.default", "index_put_.default")
def index_put(cx, x, indices, values, accumulate=False):
    values = values.cast(x.dtype)
    idx = [t for t in indices if t is not None]
    if len(idx) == 1 and idx[0].dtype is DType.BOOL:  # x[mask] = v
        first = next(i for i, t in enumerate(indices) if t is not None)
        mask = idx[0]
        mask = mask.reshape((1,) * first + mask.shape + (1,) * (x.ndim - first - mask.ndim)).expand(x.shape)
        if not sym.equal(values.numel, 1):
            raise UnsupportedError("index_put with a bool mask and non-scalar values")
        v = values.reshape(())
        return lwhere(mask, x.add(v) if accumulate else v, x)
    xs, tensors, first, order = _front(x, indices)
    last = first + len(tensors) - 1
    tensors = [xs.normalize_index(t, first + i).cast(DType.I64) for i, t in enumerate(tensors)]
    from luminal.builder.tensor import broadcast_shapes

    ishape = broadcast_shapes(*(t.shape for t in tensors))
    linear = None
    for i, t in enumerate(tensors):
        t = t.expand(ishape)
        linear = t if linear is None else linear.mul(cx.g.scalar(xs.shape[first + i], DType.I64)).add(t)
    pre, post = xs.shape[:first], xs.shape[last + 1 :]
    merged = xs.flatten(first, last) if last > first else xs
    m = sym.product(ishape)
    vals = values.expand(pre + ishape + post).reshape(pre + (m,) + post)
    where = linear.reshape((1,) * len(pre) + (m,) + (1,) * len(post)).expand(pre + (m,) + post)
    out = merged.scatter(first, where, vals, "add" if accumulate else None).reshape(xs.shape)
    if order is not None:
        out = out.permute([order.index(i) for i in range(len(order))])
    return out


@aten("bucketize.Tensor", "bucketize.Scalar")
def bucketize(cx, x, boundaries, *, out_int32=False, right=False):
    """The bucket of each x among sorted 1-D `boundaries`: how many boundaries are below x
    (right=False: b < x; right=True: b <= x). Counted as "x is not <= b" (resp. "not <"), so a
    NaN lands past the last boundary as in torch."""
    from luminal.frontends.torch.aten_ops import as_tensor, promote

    if boundaries.ndim != 1:
        raise UnsupportedError(f"bucketize with {boundaries.ndim}-D boundaries")
    dt = promote(x, boundaries)
    x = as_tensor(cx, x, dt)
    below = x.unsqueeze(-1).lt(boundaries.cast(dt)) if right else x.unsqueeze(-1).le(boundaries.cast(dt))
    return below.logical_not().cast(cx.dtype).sum(-1)


# --- sorting -----------------------------------------------------------------------------
@aten("topk.default")
def topk(cx, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - ATen's names
    return x.topk(k, dim, largest, sorted)


@aten("sort.default")
def sort(cx, x, dim=-1, descending=False):
    return x.sort(dim, descending)


@aten("sort.stable")
def sort_stable(cx, x, *, stable=None, dim=-1, descending=False):
    return x.sort(dim, descending)


@aten("argsort.default")
def argsort(cx, x, dim=-1, descending=False):
    return x.sort(dim, descending)[1]


@aten("argsort.stable")
def argsort_stable(cx, x, *, stable=None, dim=-1, descending=False):
    return x.sort(dim, descending)[1]
