"""Movement ATen ops: free views (view, permute, expand, slice, ...), cat, split, pad.

Ops whose result is a reshape of their input take the result shape torch reports (`cx.shape`),
which already resolves -1 and spells symbolic dims the way the rest of the graph does.
"""

from __future__ import annotations

import operator

from luminal.builder import functional as F
from luminal.frontends.torch.aten_ops import aten, cast_to
from luminal.frontends.torch.dims import to_dim
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


@aten("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default", "squeeze.dim",
      "squeeze.dims", "squeeze.default", "unsqueeze.default", "flatten.using_ints", "unflatten.int",
      "squeeze_copy.dims", "squeeze_copy.dim", "unsqueeze_copy.default", "view.dtype_unused")
def reshape(cx, x, *args, **kwargs):
    return x.reshape(cx.shape)


@aten("permute.default", "permute_copy.default")
def permute(cx, x, dims):
    return x.permute([d % max(x.ndim, 1) for d in dims])


@aten("transpose.int", "transpose_copy.int")
def transpose(cx, x, a, b):
    return x.transpose(a, b) if x.ndim > 1 else x


@aten("t.default", "t_copy.default", "numpy_T.default")
def t(cx, x):
    return x.T


@aten("expand.default", "expand_copy.default", "broadcast_to.default")
def expand(cx, x, size, implicit=False):
    return x.expand(cx.shape)


@aten("expand_as.default")
def expand_as(cx, x, other):
    return x.expand(other.shape)


@aten("slice.Tensor", "slice_copy.Tensor")
def slice_(cx, x, dim=0, start=None, end=None, step=1):
    return x.slice(dim, start, end, step)


@aten("narrow.default")
def narrow(cx, x, dim, start, length):
    return x.narrow(dim, start, length)


@aten("select.int", "select_copy.int")
def select(cx, x, dim, index):
    dim = dim % x.ndim
    if isinstance(index, int) and index < 0:
        index = sym.norm(x.shape[dim] + index)
    one = cx.conform(x.slice(dim, index, sym.norm(index + 1)), x.shape[:dim] + (1,) + x.shape[dim + 1 :])
    return one.reshape(cx.shape)


@aten("cat.default", "concat.default")
def cat(cx, tensors, dim=0):
    return F.concat([t.cast(cx.dtype) for t in tensors], dim)


@aten("stack.default")
def stack(cx, tensors, dim=0):
    return F.stack([t.cast(cx.dtype) for t in tensors], dim)


@aten("split_with_sizes.default", "split_with_sizes_copy.default", "split.sizes")
def split_with_sizes(cx, x, sizes, dim=0):
    return F.split(x, list(sizes), dim)


@aten("split.Tensor", "split_copy.Tensor")
def split(cx, x, size, dim=0):
    return F.split(x, [shape_dim(v, dim) for v in cx.val], dim)


def shape_dim(val, dim):
    return to_dim(val.shape[dim])


@aten("unbind.int", "unbind_copy.int")
def unbind(cx, x, dim=0):
    dim = dim % x.ndim
    return [x.slice(dim, i, i + 1).squeeze(dim) for i in range(x.shape[dim])]


@aten("flip.default")
def flip(cx, x, dims):
    for d in dims:
        x = x.slice(d, None, None, -1)
    return x


@aten("unfold.default")
def unfold(cx, x, dim, size, step):
    return x.unfold(dim, size, step)


@aten("as_strided.default", "as_strided_copy.default")
def as_strided(cx, x, size, stride, storage_offset=None):
    """A strided view of x's *storage*: rebuilt from x and the layout torch reports for it
    (dense: a permutation of a contiguous layout), then viewed with the given strides."""
    from luminal.errors import UnsupportedError
    from luminal.hlir.shape import ShapeTracker

    val = cx.node.args[0].meta.get("val")
    dims = [*size, *stride, *(val.shape if val is not None else ()), *(val.stride() if val is not None else ())]
    if val is None or not all(isinstance(d, int) for d in dims):
        raise UnsupportedError("as_strided over symbolic sizes or strides")
    base_off = val.storage_offset()
    offset = base_off if storage_offset is None else storage_offset
    if not isinstance(offset, int):
        raise UnsupportedError("as_strided with a symbolic storage offset")
    order = sorted((d for d in range(x.ndim) if val.shape[d] != 1), key=lambda d: -val.stride()[d])
    want, run = {}, 1
    for d in reversed(order):
        want[d], run = run, run * val.shape[d]
    if any(val.stride()[d] != want[d] for d in order):
        raise UnsupportedError(f"as_strided of a tensor with the non-dense strides {val.stride()}")
    numel = run if val.numel() else 0
    reach = offset - base_off + sum((n - 1) * st for n, st in zip(size, stride) if n > 0)
    if any(st < 0 for st in stride) or (0 not in size and (offset < base_off or reach >= numel)):
        raise UnsupportedError(f"as_strided(size={list(size)}, stride={list(stride)}, offset={offset}) reads "
                               f"outside the storage of a tensor of {numel} elements")
    flat = x.permute(order + [d for d in range(x.ndim) if d not in order]).reshape(numel)
    flat = flat.contiguous() if flat._tracker()[1].mask is not None else flat
    base, st = flat._tracker()
    if not (len(st.strides) == 1 and st.strides[0] == 1):
        base, st = flat.contiguous()._tracker()
    tracker = ShapeTracker(tuple(size), tuple(stride), sym.norm(st.offset + offset - base_off))
    return flat._view(base, tracker)


def _spread(t, dim, n, start, step):
    """t (m along dim) laid out at start, start + step, ... on an axis of length n, 0 elsewhere."""
    m = t.shape[dim]
    if step != 1:  # interleave step - 1 zeros after each element: (m, step) -> m * step
        t = t.unsqueeze(dim + 1)
        t = t.pad([(0, step - 1) if d == dim + 1 else (0, 0) for d in range(t.ndim)]).flatten(dim, dim + 1)
    after = sym.norm(n - start - m * step)
    return t.pad([(start, after) if d == dim else (0, 0) for d in range(t.ndim)])


@aten("slice_scatter.default")
def slice_scatter(cx, x, src, dim=0, start=None, end=None, step=1):
    """x with x[dim][start:end:step] replaced by src: src and a mask spread to x's shape, where."""
    dim = dim % max(x.ndim, 1)
    n = x.shape[dim]
    start = 0 if start is None else start
    if isinstance(start, int) and start < 0:
        start = sym.norm(start + n)
    if isinstance(start, int) and sym.is_static(n):
        start = max(0, min(start, int(n)))
    if sym.equal(src.shape[dim], 0):
        return x
    src = src.cast(x.dtype)
    mask = cx.full(src.shape, True, DType.BOOL)
    return F.where(_spread(mask, dim, n, start, step), _spread(src, dim, n, start, step), x)


@aten("roll.default")
def roll(cx, x, shifts, dims=()):
    if not dims:
        return roll(cx, x.flatten(), shifts, [0]).reshape(x.shape)
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        s = s % n
        if s:
            x = F.concat([x.slice(d, n - s, n), x.slice(d, 0, n - s)], d)
    return x


@aten("constant_pad_nd.default")
def constant_pad_nd(cx, x, pad, value=0):
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):  # pad lists the last dim first
        pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return x.pad(pairs, cast_to(x.dtype, value))


@aten("repeat.default")
def repeat(cx, x, repeats):
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    inter = tuple(d for s in x.shape for d in (1, s))
    big = tuple(d for r, s in zip(repeats, x.shape) for d in (r, s))
    return x.reshape(inter).expand(big).reshape(cx.shape)


@aten("tril.default")
def tril(cx, x, diagonal=0):
    return x.tril(diagonal)


@aten("triu.default")
def triu(cx, x, diagonal=0):
    return x.triu(diagonal)


@aten(operator.getitem)
def getitem(cx, seq, i):
    return seq[i]
