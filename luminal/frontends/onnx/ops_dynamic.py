"""Ops whose output length depends on the data: NonZero, Compress, NonMaxSuppression.

Each is lowered to a static upper bound of its output plus a length (a scalar int64 tensor):
the selected elements are numbered by a cumulative sum of their mask and scattered to the front
of a buffer of the bound's size (one spare slot takes the unselected writes and is dropped), in
the order ONNX defines. The importer records the value as ragged (`Importer.ragged`):
- returned as a graph output, the compiled graph returns the padded value and the length, and
  the model cuts the padding on the host before returning it (as TensorRT's NMS plugin returns
  a padded result and a count);
- read by another node (or returned by a subgraph), the shape downstream would depend on the
  data, so the model compiles per value of the inputs that length depends on (`NeedsValue`),
  where every input of the op is known and the op computes its exact result at compile time.
"""

from __future__ import annotations

import numpy as np

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.values import Known
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.runtime import NumpyRuntime

I64 = DType.I64


def _ragged(c, padded, axis: int, length):
    """`padded` (the bound along `axis`) cut to `length`: computed now when every input of the
    node is known, else recorded as ragged for the importer."""
    return _finish(c, [(padded, axis, length)])[0]


def _finish(c, outs):
    """The node's outputs, each (tensor, axis, length) -- axis None for a static one: computed now
    (and cut) when every input of the node is known, else the ragged ones recorded."""
    present = [i for i, n in enumerate(c.node.input) if n]
    if all(c.known(i) is not None and c.known(i).dtype != object for i in present):  # not symbolic
        nodes = [t.node for t, _, _ in outs] + [n.node for _, a, n in outs if a is not None]
        values = NumpyRuntime(nodes)({})
        lengths = iter(values[len(outs):])
        result = []
        for (t, axis, _), v in zip(outs, values):
            if axis is not None:
                v = v[(slice(None),) * axis + (slice(0, int(next(lengths))),)]
            result.append(Known(v, t.dtype))
        return result
    for (_, axis, length), name in zip(outs, c.node.output):
        if axis is not None and name:
            c.importer.ragged[name] = (axis, length, [c.node.input[i] for i in present])
    return [t for t, _, _ in outs]


SCAN_LIMIT = 1 << 31  # a symbolic length is scanned in 31 steps: the model checks n <= this per call


def _prefix_sum(c, x):
    """Inclusive prefix sum of a 1-D integer tensor in ceil(log2 n) shifted adds (Hillis-Steele:
    each shift a free pad-and-slice view), O(n log n) and exact; the builder's cumsum (a masked
    n x n triangle) would take n**2 memory for the million-element masks NonZero meets."""
    n = x.shape[0]
    bound = int(n) if sym.is_static(n) else SCAN_LIMIT
    if not sym.is_static(n):
        c.importer.assume(n, SCAN_LIMIT)
    k = 1
    while k < bound:
        x = x.add(x.pad([(k, 0)]).slice(0, 0, n))
        k *= 2
    return x


def _compact(c, mask, rows, target=None):
    """The rows (M, k) where mask (M,) holds, moved to the front in order (or each to its
    `target` slot): ((M, k), count)."""
    m = mask.shape[0]
    sel = mask.cast(I64)
    if target is None:
        target = _prefix_sum(c, sel).sub(c.g.scalar(1, I64))
    target = F.where(mask, target, c.g.scalar(m, I64) if not sym.is_static(m) else int(m))
    k = rows.shape[1]
    buf = c.g.scalar(0, rows.dtype).expand((sym.norm(m + 1), k)).contiguous()
    out = buf.scatter(0, target.reshape((m, 1)).expand((m, k)), rows)
    return out.slice(0, 0, m), sel.sum(0)


@onnx_op("NonZero", since=9)
def nonzero(c, x):
    """(x.ndim, count) int64: the indices of the nonzero elements, in row-major order (a 0-d x
    reads as shape (1,), as onnxruntime does)."""
    x = x if x.ndim else x.reshape((1,))
    flat = x.reshape((sym.product(x.shape),))
    n = flat.shape[0]
    mask = flat.ne(False) if x.dtype is DType.BOOL else flat.ne(0)
    i = F.arange(c.g, 0, n, dtype=I64)
    coords, stride = [], 1
    for d in reversed(x.shape):  # coordinate j: (i // stride_j) mod d_j
        q = i if sym.equal(stride, 1) else i.div(c.g.scalar(stride, I64), rounding_mode="floor")
        coords.append(q.remainder(c.g.scalar(d, I64)) if x.ndim > 1 else q)
        stride = sym.norm(stride * d)
    packed, count = _compact(c, mask, F.stack(coords[::-1], 1))
    return _ragged(c, packed.permute(1, 0), 1, count)


@onnx_op("Compress", since=9)
def compress(c, x, condition, *, axis=None):
    """The slices of x along axis (x flattened when None) where condition holds; a condition
    shorter than the axis selects among its first len(condition) slices."""
    if axis is None:
        x = x.reshape((sym.product(x.shape),))
        a = 0
    else:
        a = axis % x.ndim if x.ndim else 0
    cond = condition.reshape((sym.product(condition.shape),))
    n, m = x.shape[a], cond.shape[0]
    if sym.is_static(n) and sym.is_static(m) and int(m) > int(n):
        c.fail(f"condition has {m} entries, more than the {n} slices along axis {a}")
    if not sym.equal(m, n):
        if not sym.is_static(m) or not sym.is_static(n):
            c.fail("a condition shorter than the axis needs static lengths")
        x = x.slice(a, 0, m)
    mask = cond.cast(DType.BOOL) if cond.dtype is not DType.BOOL else cond
    src, count = _compact(c, mask, F.arange(c.g, 0, m, dtype=I64).reshape((m, 1)))
    picked = x.index_select(a, src.reshape((m,)))
    return _ragged(c, picked, a, count)


def _box_edges(boxes, center: int):
    """(x_min, x_max, y_min, y_max) of (B, N, 4) boxes, as onnx's reference computes them."""
    def part(i):
        return boxes.slice(2, i, i + 1).squeeze(2)

    if center:
        cx, cy, w, h = part(0), part(1), part(2).div(2.0), part(3).div(2.0)
        return cx.sub(w), cx.add(w), cy.sub(h), cy.add(h)
    y1, x1, y2, x2 = part(0), part(1), part(2), part(3)
    return x1.minimum(x2), x1.maximum(x2), y1.minimum(y2), y1.maximum(y2)


def _suppressed(edges, picked, iou):
    """Which boxes the picked box of each (batch, class) suppresses: IoU > iou_threshold, with
    the reference's early outs (no overlap, an empty box or union: never suppressed)."""
    (x0, x1, y0, y1), (px0, px1, py0, py1) = edges, picked
    ix0, ix1, iy0, iy1 = x0.maximum(px0), x1.minimum(px1), y0.maximum(py0), y1.minimum(py1)
    inter = ix1.sub(ix0).mul(iy1.sub(iy0))
    area, parea = x1.sub(x0).mul(y1.sub(y0)), px1.sub(px0).mul(py1.sub(py0))
    union = area.add(parea).sub(inter)
    ok = ix1.gt(ix0).logical_and(iy1.gt(iy0)).logical_and(inter.gt(0.0))
    ok = ok.logical_and(area.gt(0.0)).logical_and(parea.gt(0.0)).logical_and(union.gt(0.0))
    ratio = inter.div(F.where(ok, union, 1.0))
    return ok.logical_and(ratio.gt(iou))


@onnx_op("NonMaxSuppression", since=10, known=(2,))
def non_max_suppression(c, boxes, scores, max_output=None, iou_threshold=None, score_threshold=None, *,
                        center_point_box=0):
    """(count, 3) int64 rows [batch, class, box]: per batch and class, greedily the highest-scoring
    box (ties: the lower index) not suppressed by one already selected, at most
    max_output_boxes_per_class of them (unrolled: min(that, num_boxes) steps)."""
    if center_point_box not in (0, 1):
        c.fail(f"center_point_box {center_point_box} is not 0 or 1")
    if boxes.ndim != 3 or scores.ndim != 3 or not sym.equal(boxes.shape[2], 4):
        c.fail(f"boxes {boxes.shape} must be (batch, boxes, 4) and scores {scores.shape} (batch, classes, boxes)")
    b, n = boxes.shape[0], boxes.shape[1]
    k_cls = scores.shape[1]
    limit = 0 if max_output is None or np.asarray(max_output).size == 0 else int(np.asarray(max_output).reshape(-1)[0])
    if sym.is_static(n):
        steps = max(min(limit, int(n)), 0)
    elif limit <= 4096:
        steps = max(limit, 0)
    else:
        c.fail(f"max_output_boxes_per_class {limit} with a symbolic number of boxes: the selection is unrolled "
               "per output, so it needs a static bound")
    if steps == 0:
        empty = c.g.scalar(0, I64).expand((0, 3)).contiguous()
        return _ragged(c, empty, 0, c.g.scalar(0, I64))
    ft = boxes.dtype
    sc = scores.cast(ft)
    edges = [e.unsqueeze(1) for e in _box_edges(boxes, center_point_box)]  # (B, 1, N) each
    iou = iou_threshold.cast(ft).reshape(()) if iou_threshold is not None else c.g.scalar(0.0, ft)
    alive = sc.notnan()  # NaN scores are never selected
    if score_threshold is not None:
        alive = alive.logical_and(sc.gt(score_threshold.cast(ft).reshape(())))
    pos = F.arange(c.g, 0, n, dtype=I64)
    big = c.g.scalar(n, I64) if not sym.is_static(n) else int(n)
    picks, found = [], []
    for _ in range(steps):
        masked = F.where(alive, sc, float("-inf"))
        best = masked.max(2, keepdim=True)
        hit = alive.logical_and(masked.eq(best))
        idx = F.where(hit, pos, big).min(2, keepdim=True)  # (B, C, 1): the first best; n when none is alive
        has = idx.lt(big)
        safe = F.where(has, idx, 0)
        at = safe.reshape((b, k_cls))
        picked = [e.squeeze(1).gather(1, at).unsqueeze(2) for e in edges]  # (B, C, 1) each
        alive = alive.logical_and(_suppressed(edges, picked, iou).logical_not()).logical_and(pos.ne(safe))
        picks.append(safe)
        found.append(has)
    sel = F.concat(picks, 2)  # (B, C, S)
    mask = F.concat(found, 2)
    shape = (b, k_cls, steps)
    bi = F.arange(c.g, 0, b, dtype=I64).reshape((b, 1, 1)).expand(shape)
    ci = F.arange(c.g, 0, k_cls, dtype=I64).reshape((1, k_cls, 1)).expand(shape)
    m = sym.norm(b * k_cls * steps)
    rows = F.stack([bi.reshape((m,)), ci.reshape((m,)), sel.reshape((m,))], 1)
    packed, count = _compact(c, mask.reshape((m,)), rows)
    return _ragged(c, packed, 0, count)


@onnx_op("Unique", since=11)
def unique(c, x, *, axis=None, sorted=1):  # noqa: A002 - ONNX's name
    """(Y, indices, inverse_indices, counts): the distinct elements (or slices along axis), in
    ascending order (sorted=1, NaN last and all NaNs one value, as numpy.unique) or in order of
    first occurrence. Every pair of rows is compared at once (M x M x row length: fine for the
    label-sized tensors Unique meets), a row's slot being the number of distinct rows before it."""
    if axis is None:
        rows = x.reshape((sym.product(x.shape), 1)) if x.ndim else x.reshape((1, 1))
        a, rest = 0, ()
    else:
        a = axis % x.ndim if x.ndim else c.fail("axis given for a 0-d input")
        order = [a] + [i for i in range(x.ndim) if i != a]
        moved = x.permute(order)
        rest = tuple(moved.shape[1:])
        rows = moved.reshape((x.shape[a], sym.product(rest)))
    m = rows.shape[0]
    ri, rj = rows.unsqueeze(1), rows.unsqueeze(0)  # (M, 1, R), (1, M, R)
    same = ri.eq(rj)
    less = ri.lt(rj)
    if rows.dtype.is_float:  # NaN equals NaN and sorts last (numpy.unique)
        ni, nj = ri.isnan(), rj.isnan()
        same = same.logical_or(ni.logical_and(nj))
        less = less.logical_or(ni.logical_not().logical_and(nj))
    diff = same.logical_not().cast(I64)
    first_diff = diff.cumsum(2).sub(diff).eq(0).logical_and(diff.eq(1))
    lt = first_diff.logical_and(less).cast(I64).sum(2).gt(0)  # (M, M): row i < row j
    eq = diff.sum(2).eq(0)
    pos = F.arange(c.g, 0, m, dtype=I64)
    earlier = pos.unsqueeze(0).lt(pos.unsqueeze(1))  # [i, j]: j < i
    is_first = eq.logical_and(earlier).cast(I64).sum(1).eq(0)
    firsts = is_first.unsqueeze(1).cast(I64)  # (M, 1) over j
    if sorted:
        slot = lt.cast(I64).mul(firsts).sum(0)  # distinct rows below row i
    else:
        big = c.g.scalar(m, I64) if not sym.is_static(m) else int(m)
        first_of = F.where(eq, pos.unsqueeze(0), big).min(1)  # (M,): where row i first occurs
        slot = pos.unsqueeze(1).lt(first_of.unsqueeze(0)).cast(I64).mul(firsts).sum(0)
    ys, count = _compact(c, is_first, rows, slot)
    idx, _ = _compact(c, is_first, pos.reshape((m, 1)), slot)
    cnt, _ = _compact(c, is_first, eq.cast(I64).sum(1).reshape((m, 1)), slot)
    if axis is None:
        y = ys.reshape((m,))
    else:
        back = [0] * x.ndim
        for i, o in enumerate([a] + [i for i in range(x.ndim) if i != a]):
            back[o] = i
        y = ys.reshape((m, *rest)).permute(back)
    return _finish(c, [(y, a, count), (idx.reshape((m,)), 0, count), (slot, None, None), (cnt.reshape((m,)), 0, count)])
