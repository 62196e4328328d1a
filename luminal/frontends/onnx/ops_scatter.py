"""Ops that write values to computed places: Col2Im (a scatter-add of the columns into the image
at indices computed at compile time from the static geometry), MaxUnpool (a scatter of the values
at the pooling indices), TensorScatter (a KV-cache update: a gather of the update rows and a
select, per batch row, linear or circular). Indices out of range raise IndexOutOfRange at run
time (MaxUnpool's, and TensorScatter's linear write offsets)."""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType


def _static(c, dims, what: str) -> list[int]:
    if not all(sym.is_static(d) for d in dims):
        c.fail(f"{what} {tuple(dims)} must be static")
    return [int(d) for d in dims]


def _ints(v, n: int, default: int, what: str, c) -> list[int]:
    v = [default] * n if v is None else [int(i) for i in v]
    if len(v) != n:
        c.fail(f"{what} has {len(v)} entries, expected {n}")
    return v


@onnx_op("Col2Im", since=18, known=(1, 2))
def col2im(c, x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """x (N, C * prod(block), L) -> (N, C, *image): each column value added to the image pixel its
    block position covers (pixels in the padding are dropped), as torch's col2im / fold."""
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    k = len(image)
    if len(block) != k or k == 0:
        c.fail(f"image_shape {image} and block_shape {block} differ in length")
    dil = _ints(dilations, k, 1, "dilations", c)
    st = _ints(strides, k, 1, "strides", c)
    pd = _ints(pads, 2 * k, 0, "pads", c)
    if min(image + block + dil + st) < 1 or min(pd) < 0:
        c.fail("image and block dims, dilations and strides must be positive, pads non-negative")
    if x.ndim != 3:
        c.fail(f"input of shape {x.shape} is not (N, C * prod(block_shape), L)")
    n = x.shape[0]
    cb, length = _static(c, x.shape[1:], "the input's dims 1 and 2")
    kernel = int(np.prod(block))
    if cb % kernel:
        c.fail(f"input dim 1 ({cb}) is not a multiple of prod(block_shape) = {kernel}")
    blocks = [(image[i] + pd[i] + pd[i + k] - dil[i] * (block[i] - 1) - 1) // st[i] + 1 for i in range(k)]
    if min(blocks) < 1 or int(np.prod(blocks)) != length:
        c.fail(f"input dim 2 ({length}) is not the number of sliding blocks {blocks}")
    ch = cb // kernel
    pixels = int(np.prod(image))
    # index[kpos, l]: the flat image pixel of block position kpos at sliding block l (pixels: outside)
    off = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing="ij"), -1).reshape(kernel, 1, k)
    pos = np.stack(np.meshgrid(*[np.arange(b) for b in blocks], indexing="ij"), -1).reshape(1, length, k)
    coord = pos * np.array(st) - np.array(pd[:k]) + off * np.array(dil)
    inside = ((coord >= 0) & (coord < np.array(image))).all(-1)
    flat = np.ravel_multi_index(tuple(np.moveaxis(np.clip(coord, 0, np.array(image) - 1), -1, 0)), image)
    index = np.where(inside, flat, pixels).reshape(1, 1, kernel * length)
    idx = c.g.constant(index.astype(np.int64), DType.I64).expand((n, ch, kernel * length))
    src = x.reshape((n, ch, kernel * length))
    out = c.g.scalar(0, x.dtype).expand((n, ch, pixels + 1)).contiguous()
    out = out.scatter(2, idx, src, reduce="add")
    return out.slice(2, 0, pixels).reshape((n, ch, *image))


@onnx_op("MaxUnpool", since=11, known=(2,))
def max_unpool(c, x, indices, output_shape=None, *, kernel_shape, pads=None, strides=None):
    """Y (the shape MaxPool's input had: (in - 1) * stride - pads + kernel per dim) zero, with
    Y.flat[indices] = x; given an output_shape, Y sits in its leading corner (onnx's reference)."""
    k = len(kernel_shape)
    if x.ndim != k + 2:
        c.fail(f"input of shape {x.shape} does not have {k} spatial dims")
    st = _ints(strides, k, 1, "strides", c)
    pd = _ints(pads, 2 * k, 0, "pads", c)
    dims = _static(c, x.shape, "the input shape")
    inferred = dims[:2] + [(dims[i + 2] - 1) * st[i] - (pd[i] + pd[i + k]) + int(kernel_shape[i]) for i in range(k)]
    if min(inferred) < 0:
        c.fail(f"the unpooled shape {inferred} is negative")
    total = int(np.prod(inferred))
    flat = c.g.scalar(0, x.dtype).expand((total,)).contiguous()
    flat = flat.scatter(0, indices.reshape(-1).cast(DType.I64), x.reshape(-1))
    y = flat.reshape(tuple(inferred))
    if output_shape is None:
        return y
    shape = [int(v) for v in np.asarray(output_shape).reshape(-1)]
    if len(shape) != len(inferred) or any(s < i for s, i in zip(shape, inferred)):
        c.fail(f"output_shape {shape} is smaller than the unpooled shape {inferred}")
    return y.pad([(0, s - i) for s, i in zip(shape, inferred)])


@onnx_op("TensorScatter", since=24)
def tensor_scatter(c, past, update, write_indices=None, *, axis=-2, mode="linear"):
    """past with update's rows written along `axis` from write_indices[b] on (per batch row b,
    dim 0); mode circular wraps the positions modulo the axis length."""
    if mode not in ("linear", "circular"):
        c.fail(f"mode {mode!r} is not linear or circular")
    if past.ndim != update.ndim or past.ndim < 2:
        c.fail(f"past_cache {past.shape} and update {update.shape} differ in rank")
    a = axis % past.ndim
    if a == 0:
        c.fail("axis must not be the batch axis 0")
    for i in range(past.ndim):
        if i != a and not sym.equal(past.shape[i], update.shape[i]):
            c.fail(f"past_cache {past.shape} and update {update.shape} differ off the axis")
    cap, seq = past.shape[a], update.shape[a]
    dt = DType.I64
    b = past.shape[0]
    wi = c.g.scalar(0, dt).expand((b,)) if write_indices is None else write_indices.cast(dt)
    if mode == "linear" and write_indices is not None:
        # a write past the end (or before the start) is an error, as in onnx's reference: the
        # start looked up in [0, cap - seq] is itself, and raises IndexOutOfRange outside it
        wi = F.arange(c.g, 0, sym.norm(cap - seq + 1), dtype=dt).gather(0, wi)
    shape = [1] * past.ndim
    shape[0] = b
    start = wi.reshape(tuple(shape))
    pos_shape = [1] * past.ndim
    pos_shape[a] = cap
    j = F.arange(c.g, 0, cap, dtype=dt).reshape(tuple(pos_shape))
    rel = j.sub(start)  # (B, 1.., cap, 1..): the update row written at cache position j
    if mode == "circular":
        rel = rel.remainder(c.g.scalar(cap, dt))
    hit = rel.ge(0).logical_and(rel.lt(c.g.scalar(seq, dt)))
    safe = F.where(hit, rel, 0)
    full = tuple(cap if i == a else past.shape[i] for i in range(past.ndim))
    rows = update.gather(a, safe.expand(full)) if not sym.equal(seq, 0) else past
    return F.where(hit.expand(full), rows, past)


