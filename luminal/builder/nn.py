"""Sliding windows as free views: the building block of convolution and pooling.

`windows(x, kernel, strides, dilations)` views x (N, C, *spatial) as (N, C, *out, *kernel):
element [n, c, o.., k..] is x[n, c, o*stride + k*dilation ..]. The windows overlap, which a
ShapeTracker expresses with strides alone (no copy); padding is the caller's (pad first: a
padded view is materialized before windowing, since masks cannot overlap).
"""

from __future__ import annotations

from luminal.errors import ShapeError
from luminal.hlir import symbolic as sym
from luminal.hlir.shape import ShapeTracker


def windows(x, kernel, strides, dilations):
    nsp = len(kernel)
    if x.ndim < nsp:
        raise ShapeError(f"windows: a {nsp}-D kernel on a tensor of shape {x.shape}")
    base, st = x._tracker()
    if st.mask is not None:
        x = x.contiguous()
        base, st = x._tracker()
    lead = x.ndim - nsp
    spatial = x.shape[lead:]
    out = []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        span = sym.norm(n - d * (k - 1) - 1)
        if sym.is_static(span) and span < 0:
            raise ShapeError(f"windows: kernel {k} (dilation {d}) larger than the axis of size {n}")
        out.append(sym.norm(sym.floordiv(span, s) + 1))
    sp_strides = st.strides[lead:]
    shape = tuple(x.shape[:lead]) + tuple(out) + tuple(kernel)
    strides = tuple(st.strides[:lead]) + tuple(sym.norm(s * ss) for s, ss in zip(strides, sp_strides)) \
        + tuple(sym.norm(d * ss) for d, ss in zip(dilations, sp_strides))
    return x._view(base, ShapeTracker(shape, strides, st.offset, None))
