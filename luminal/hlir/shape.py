"""The shape tracker: movement ops as free views of a contiguous buffer.

A `ShapeTracker` describes how to read a logical tensor out of a contiguous buffer: element
`i` (a multi-index) lives at `offset + sum(i[d] * strides[d])`, and is valid only where every
`mask[d][0] <= i[d] < mask[d][1]`; invalid (padded) elements read as zero. Permute, expand,
slice (any step, negative too), pad and squeeze/unsqueeze are always expressible this way;
reshape is, unless it would have to mix dims that are not laid out contiguously (a reshape of
a permuted view, or of a padded one): then `reshape` returns None and the builder inserts a
CONTIGUOUS node first. All fields may hold symbolic dims.

Chosen over upstream's Iota+Gather encoding because strides are what a CUDA kernel's index
math wants and what NumPy's `as_strided` takes, so views cost nothing in either runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.errors import ShapeError
from luminal.hlir import symbolic as sym
from luminal.hlir.symbolic import Dim


def contiguous_strides(shape) -> tuple[Dim, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc = sym.norm(acc * d) if not isinstance(acc * d, int) else acc * d
    return tuple(reversed(strides))


def merged_stride(shape, strides) -> Dim | None:
    """The stride of dims (outermost first) read as one dim, size-1 dims skipped: the innermost
    kept dim's (0 when every dim is 1), or None when they do not step as one row-major run."""
    dims = [(d, w) for d, w in zip(shape, strides) if not sym.equal(d, 1)]
    if not all(sym.equal(w, sym.norm(w2 * d2)) for (_, w), (d2, w2) in zip(dims, dims[1:])):
        return None
    return dims[-1][1] if dims else 0


@dataclass(frozen=True)
class ShapeTracker:
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim = 0
    mask: tuple[tuple[Dim, Dim], ...] | None = None

    def __hash__(self) -> int:  # computed once: a View's tracker is hashed by every Node interning it
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.shape, self.strides, self.offset, self.mask))
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self):  # pickled and copied without the cached hash (another process hashes otherwise)
        return (ShapeTracker, (self.shape, self.strides, self.offset, self.mask))

    @staticmethod
    def contiguous(shape) -> ShapeTracker:
        shape = tuple(shape)
        return ShapeTracker(shape, contiguous_strides(shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dims(self) -> tuple[Dim, ...]:
        """Every number the tracker holds: shape, strides, offset and mask bounds."""
        return (*self.shape, *self.strides, self.offset, *(d for pair in self.mask or () for d in pair))

    @property
    def numel(self) -> Dim:
        return sym.product(self.shape)

    def is_contiguous(self) -> bool:
        """Whether reading through this tracker is the identity on a buffer of its shape."""
        if self.mask is not None or not sym.equal(self.offset, 0):
            return False
        want = contiguous_strides(self.shape)
        return all(
            sym.equal(d, 1) or sym.equal(s, w) for d, s, w in zip(self.shape, self.strides, want)
        )

    def _with(self, shape, strides, offset=None, mask=None) -> ShapeTracker:
        return ShapeTracker(
            tuple(sym.norm(d) for d in shape),
            tuple(sym.norm(s) for s in strides),
            sym.norm(self.offset if offset is None else offset),
            mask,
        )

    # --- movement ------------------------------------------------------------------------
    def permute(self, order) -> ShapeTracker:
        order = tuple(order)
        if sorted(order) != list(range(self.ndim)):
            raise ShapeError(f"permute order {order} is not a permutation of {self.ndim} axes")
        mask = None if self.mask is None else tuple(self.mask[i] for i in order)
        return self._with([self.shape[i] for i in order], [self.strides[i] for i in order], None, mask)

    def expand(self, shape) -> ShapeTracker:
        """Broadcast to `shape` (new leading dims, size-1 dims stretched), numpy rules."""
        shape = tuple(shape)
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ShapeError(f"cannot expand shape {_fmt(self.shape)} to fewer dims {_fmt(shape)}")
        old_shape = (1,) * lead + self.shape
        strides = (0,) * lead + self.strides
        mask = None if self.mask is None else ((0, 1),) * lead + self.mask
        new_strides, new_mask = [], []
        for i, (old, new) in enumerate(zip(old_shape, shape)):
            if sym.equal(old, new):
                new_strides.append(strides[i])
                new_mask.append(None if mask is None else mask[i])
            elif sym.equal(old, 1):
                new_strides.append(0)
                if mask is not None:  # a size-1 dim is either all valid or all padding
                    lo, hi = mask[i]
                    valid = sym.equal(lo, 0) and sym.equal(hi, 1)
                    new_mask.append((0, new) if valid else (0, 0))
            else:
                raise ShapeError(f"cannot broadcast shape {_fmt(self.shape)} to {_fmt(shape)}")
        return self._with(shape, new_strides, None, None if mask is None else tuple(new_mask))

    def reshape(self, shape) -> ShapeTracker | None:
        """The same elements in row-major order under `shape`, or None if no view can do it."""
        shape = tuple(shape)
        if not sym.equal(sym.product(shape), self.numel):
            raise ShapeError(f"cannot reshape {_fmt(self.shape)} into {_fmt(shape)}: sizes differ")
        if self.is_contiguous():
            return ShapeTracker.contiguous(shape)
        old = [(d, s) for d, s in zip(self.shape, self.strides) if not sym.equal(d, 1)]
        new = [d for d in shape if not sym.equal(d, 1)]
        if self.mask is not None:
            # only squeezes/unsqueezes of size-1 dims keep a mask meaningful
            kept = [m for d, m in zip(self.shape, self.mask) if not sym.equal(d, 1)]
            dropped = [m for d, m in zip(self.shape, self.mask) if sym.equal(d, 1)]
            if len(old) != len(new) or not all(sym.equal(a, b) for (a, _), b in zip(old, new)):
                return None
            if any(not (sym.equal(lo, 0) and sym.equal(hi, 1)) for lo, hi in dropped):
                return None
            kept_dims = iter(zip([s for _, s in old], kept))
            strides, mask = [], []
            for d in shape:
                stride, m = (0, (0, 1)) if sym.equal(d, 1) else next(kept_dims)
                strides.append(stride)
                mask.append(m)
            return self._with(shape, strides, None, tuple(mask))
        # merge old dims into chunks laid out contiguously: (size, stride of innermost)
        chunks: list[list[Dim]] = []
        for d, s in old:
            if chunks and sym.equal(chunks[-1][1], sym.norm(s * d)):
                chunks[-1] = [sym.norm(chunks[-1][0] * d), s]
            else:
                chunks.append([d, s])
        strides, ci = [], 0
        rem = chunks[0][0] if chunks else 1
        for d in shape:
            if sym.equal(d, 1):
                strides.append(0)
                continue
            if ci >= len(chunks):
                return None
            q = sym.exact_div(rem, d)
            if q is None:
                return None
            strides.append(sym.norm(chunks[ci][1] * q))
            rem = q
            if sym.equal(rem, 1):
                ci += 1
                rem = chunks[ci][0] if ci < len(chunks) else 1
        return self._with(shape, strides)

    def slice(self, axis: int, start: Dim, stop: Dim, step: int = 1) -> ShapeTracker:
        """Elements start, start+step, ... before stop (bounds already clamped by the caller)."""
        if step == 0:
            raise ShapeError("slice step cannot be zero")
        size = sym.dmax(sym.ceildiv(sym.norm(stop - start), step), 0)
        shape, strides = list(self.shape), list(self.strides)
        shape[axis] = size
        strides[axis] = sym.norm(self.strides[axis] * step)
        offset = sym.norm(self.offset + start * self.strides[axis])
        mask = self.mask
        if mask is not None:
            lo, hi = mask[axis]
            if step > 0:  # valid i: lo <= start + i*step < hi
                new_lo, new_hi = sym.ceildiv(sym.norm(lo - start), step), sym.ceildiv(sym.norm(hi - start), step)
            else:  # start + i*step in [lo, hi)  <=>  i in ((start-hi)/|step|, (start-lo)/|step|]
                new_lo = sym.floordiv(sym.norm(start - hi), -step) + 1
                new_hi = sym.floordiv(sym.norm(start - lo), -step) + 1
            clamp = lambda v: sym.dmin(sym.dmax(v, 0), size)  # noqa: E731
            mask = mask[:axis] + ((clamp(new_lo), clamp(new_hi)),) + mask[axis + 1 :]
        return self._with(shape, strides, offset, mask)

    def pad(self, pads) -> ShapeTracker:
        """Zero padding: `pads` is one (before, after) pair of nonnegative dims per axis."""
        if len(pads) != self.ndim:
            raise ShapeError(f"pad needs one (before, after) pair per axis, got {len(pads)}")
        mask = list(self.mask or [(0, d) for d in self.shape])
        shape, offset = list(self.shape), self.offset
        for i, (before, after) in enumerate(pads):
            if sym.is_static(before) and before < 0 or sym.is_static(after) and after < 0:
                raise ShapeError("negative padding is a slice; slice first")
            shape[i] = sym.norm(shape[i] + before + after)
            offset = sym.norm(offset - before * self.strides[i])
            mask[i] = (sym.norm(mask[i][0] + before), sym.norm(mask[i][1] + before))
        if all(sym.equal(a, 0) and sym.equal(b, 0) for a, b in pads):
            return self
        return self._with(shape, self.strides, offset, tuple(mask))

    def __str__(self) -> str:
        parts = [f"shape={_fmt(self.shape)}", f"strides={_fmt(self.strides)}"]
        if not sym.equal(self.offset, 0):
            parts.append(f"offset={self.offset}")
        if self.mask is not None:
            parts.append("mask=" + ",".join(f"{lo}:{hi}" for lo, hi in self.mask))
        return "View(" + " ".join(parts) + ")"


def _fmt(dims) -> str:
    return "(" + ", ".join(str(d) for d in dims) + ")"
