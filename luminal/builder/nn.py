"""Convolution and pooling, shared by the frontends (torch `convolution`, ONNX `Conv`, pools).

`windows(x, kernel, strides, dilations)` views x (N, C, *spatial) as (N, C, *out, *kernel):
element [n, c, o.., k..] is x[n, c, o*stride + k*dilation ..]. The windows overlap, which a
ShapeTracker expresses with strides alone (no copy); padding is the caller's (pad first: a
padded view is materialized before windowing, since masks cannot overlap).

`conv(x, weight, bias, stride, padding, dilation, groups)` lowers a convolution two ways:
- a GEMM per (batch, group) in the NCHW orientation: out[n, g] (Cout/G, P) = W[g] (Cout/G, CK)
  @ cols[n, g] (CK, P), with P the output positions and CK = C/G * prod(kernel). cols is the
  window view permuted to (N, G, C/G, *kernel, *out): a free view of x for a 1x1 stride-1 conv
  (the GEMM reads x itself), else one copy (im2col). The output is (N, G, Cout/G, P), which is
  (N, Cout, *out) with no permute.
- direct, for depthwise convs (one input channel per group) and grouped convs with at most
  `DIRECT_TERMS` terms per output: the product of the window view and the broadcast weight,
  summed over the group's channels and the kernel axes. The egraph fuses that into one
  `WindowReduce` (`luminal/egraph/patterns.py`), so the product is never materialized.
Pooling is the same window view reduced over its kernel axes (max, or sum then divide).
"""

from __future__ import annotations

import numpy as np
import sympy

from luminal.errors import ShapeError, UnsupportedError
from luminal.hlir import symbolic as sym
from luminal.hlir.shape import ShapeTracker


def one_dtype(x, *params):
    """A norm's input and parameters (weight, bias, statistics) in one dtype, the widest of theirs.

    Both frontends meet a half input with float parameters: torch under autocast (a bf16 conv or
    linear output into a BatchNorm or LayerNorm whose weights stay f32), which its CPU kernels
    compute in float; ONNX's BatchNormalization, whose X, scale and statistics have types of their
    own (T, T1, T2). The caller casts each result to the dtype its op reports. Parameters that
    share the input's dtype (and None) pass unchanged."""
    dtypes = {p.dtype for p in params if p is not None} - {x.dtype}
    if not dtypes:
        return (x, *params)
    wide = max(dtypes | {x.dtype}, key=lambda d: d.itemsize)
    return tuple(None if p is None else p.cast(wide) for p in (x, *params))


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


def _per_dim(value, nsp: int, what: str) -> list[int]:
    """An int or a sequence of `nsp` ints as a list of `nsp` ints."""
    if isinstance(value, (int, np.integer)):
        return [int(value)] * nsp
    value = [int(v) for v in value]
    if len(value) == 1 and nsp > 1:
        value = value * nsp
    if len(value) != nsp:
        raise ShapeError(f"{what}={value}: expected one value per spatial dim ({nsp})")
    return value


def _pads(padding, nsp: int, kernel, dilation, stride) -> list[tuple[int, int]]:
    """(before, after) per spatial dim from an int, one int per dim, (before, after) pairs, or
    "valid" / "same" (stride 1: the output has the input's size, the odd element after)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nsp
        if padding == "same":
            if any(s != 1 for s in stride):
                raise UnsupportedError("padding='same' with a stride other than 1")
            total = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return [(t // 2, t - t // 2) for t in total]
        raise UnsupportedError(f"padding={padding!r}")
    if isinstance(padding, (int, np.integer)):
        return [(int(padding), int(padding))] * nsp
    padding = list(padding)
    if padding and all(isinstance(p, (tuple, list)) for p in padding):
        pairs = [(_pad_dim(a), _pad_dim(b)) for a, b in padding]
    else:
        pairs = [(p, p) for p in _per_dim(padding, nsp, "padding")]
    if len(pairs) != nsp:
        raise ShapeError(f"padding={padding}: expected one entry per spatial dim ({nsp})")
    if any(sym.is_static(p) and p < 0 for pair in pairs for p in pair):
        raise ShapeError(f"padding={padding}: negative padding")
    return pairs


def _pad_dim(p):
    """One pad amount: an int, or a symbolic dim (ONNX auto_pad SAME with a stride on a symbolic axis)."""
    return sym.norm(p) if isinstance(p, sympy.Basic) else int(p)


DIRECT_TERMS = 64  # a grouped conv with at most this many terms per output (C/G * kernel) is direct


def _direct(cg, groups: int, kernel) -> bool:
    """Depthwise convs, and grouped ones (or one of a single input channel) with few terms per
    output, are direct loops (a WindowReduce): as GEMMs they would be many GEMMs of a few rows
    and a short K. One input channel and a long kernel (an STFT as a Conv1d: 512 taps) is a
    GEMM of K = the kernel (the direct form became a GEMM per output channel of one column).
    A grouped 1x1 conv (ShuffleNet's) is a GEMM per group over a free view of the input: its
    direct form has no window to share and materialized the product before summing it."""
    if sym.equal(cg, 1) and groups > 1:
        return True
    if all(k == 1 for k in kernel) and not sym.equal(cg, 1):
        return False
    terms = sym.product((cg, *kernel))
    return (groups > 1 or sym.equal(cg, 1)) and sym.is_static(terms) and int(terms) <= DIRECT_TERMS


def conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """The convolution (cross-correlation) of torch.nn.functional.conv{1,2,3}d and ONNX Conv.

    x: (N, C, *spatial), weight: (Cout, C / groups, *kernel), bias: (Cout,) or None.
    stride, dilation: an int or one per spatial dim. padding: an int, one int per spatial dim
    (both sides), one (before, after) pair per spatial dim (ONNX's pads), "valid" or "same".
    Returns (N, Cout, *out) with out = (n + before + after - dilation * (k - 1) - 1) // stride + 1.
    """
    nsp = weight.ndim - 2
    if nsp < 1 or x.ndim != nsp + 2:
        raise ShapeError(f"conv: input of shape {x.shape} and weight of shape {weight.shape} (expected "
                         f"(N, C, *spatial) and (Cout, C/groups, *kernel) with the same number of spatial dims)")
    if x.dtype is not weight.dtype:
        raise ShapeError(f"conv: input dtype {x.dtype} and weight dtype {weight.dtype} differ")
    kernel = tuple(weight.shape[2:])
    stride, dilation = _per_dim(stride, nsp, "stride"), _per_dim(dilation, nsp, "dilation")
    if any(s < 1 for s in stride) or any(d < 1 for d in dilation) or groups < 1:
        raise ShapeError(f"conv: stride {stride}, dilation {dilation} and groups {groups} must be positive")
    cin, cout, cg = x.shape[1], weight.shape[0], weight.shape[1]
    if not sym.equal(sym.norm(cg * groups), cin) or (sym.is_static(cout) and int(cout) % groups):
        raise ShapeError(f"conv: {cin} input channels, weight {weight.shape} and groups={groups} disagree")
    pads = _pads(padding, nsp, kernel, dilation, stride)
    if any(a or b for a, b in pads):
        x = x.pad([(0, 0), (0, 0)] + pads)
    win = windows(x, kernel, stride, dilation)  # (N, C, *O, *K)
    n, out_sizes = x.shape[0], win.shape[2:2 + nsp]
    m = sym.exact_div(cout, groups)  # output channels per group
    base, st = win._tracker()
    s = st.strides  # n, c, *o, *k
    if _direct(cg, groups, kernel):  # out[n, g, j, o] = sum_{c, k} x[n, g*cg + c, o*s + k*d] w[g*m + j, c, k]
        shape = (n, groups, m, *out_sizes, cg, *kernel)
        xw = win._view(base, ShapeTracker(shape, (s[0], sym.norm(s[1] * cg), 0, *s[2:2 + nsp], s[1], *s[2 + nsp:]),
                                          st.offset))
        w = weight.reshape((groups, m, cg, *kernel))
        if w._tracker()[1].mask is not None:
            w = w.contiguous()
        wb, wst = w._tracker()
        ws = wst.strides
        wv = w._view(wb, ShapeTracker(shape, (0, ws[0], ws[1], *([0] * nsp), *ws[2:]), wst.offset))
        out = xw.mul(wv).sum(tuple(range(3 + nsp, 4 + 2 * nsp)))  # (N, G, m, *O)
    else:
        ck = sym.product((cg, *kernel))
        p = sym.product(out_sizes)
        # (N, G, C/G, *K, *O): the window view, channel-major; a free view for 1x1 stride-1 convs
        grouped = win._view(base, ShapeTracker((n, groups, cg, *out_sizes, *kernel),
                                               (s[0], sym.norm(s[1] * cg), s[1], *s[2:]), st.offset))
        order = (0, 1, 2, *range(3 + nsp, 3 + 2 * nsp), *range(3, 3 + nsp))
        cols = grouped.permute(order).reshape((n, groups, ck, p))
        w = weight.reshape((groups, m, ck))
        out = w.matmul(cols)  # (N, G, Cout/G, P)
    out = out.reshape((n, cout, *out_sizes))
    if bias is not None:
        out = out.add(bias.reshape((bias.shape[0],) + (1,) * nsp))
    return out


def _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode):
    """(kernel, stride, dilation, pads, out sizes, user pads) of a pooling over the last
    len(kernel) dims; with ceil_mode the after-pads grow to cover the last partial window."""
    nsp = len(kernel)
    if x.ndim < nsp:
        raise ShapeError(f"pooling: a {nsp}-D window on a tensor of shape {x.shape}")
    kernel = [int(k) for k in kernel]
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _per_dim(stride, nsp, "stride")
    dilation = _per_dim(dilation, nsp, "dilation")
    if any(k < 1 for k in kernel) or any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise ShapeError(f"pooling: kernel {kernel}, stride {stride} and dilation {dilation} must be positive")
    user = _pads(padding, nsp, kernel, dilation, stride)
    pads = list(user)
    if ceil_mode:
        for i, (n, k, s, d, (lo, hi)) in enumerate(zip(x.shape[x.ndim - nsp:], kernel, stride, dilation, user)):
            if not sym.is_static(n):
                raise UnsupportedError("pooling with ceil_mode over a symbolic spatial dim")
            span = int(n) + lo + hi - d * (k - 1) - 1
            out = -(-span // s) + 1
            if (out - 1) * s >= int(n) + lo:  # torch: the last window must start inside the input or the left pad
                out -= 1
            pads[i] = (lo, max(hi, (out - 1) * s + d * (k - 1) + 1 - int(n) - lo))
    return kernel, stride, dilation, pads, user


def _pool_windows(x, kernel, stride, dilation, pads, pad_value):
    """The windows (*lead, *out, *kernel) of x over its last len(kernel) dims, padded."""
    nsp = len(kernel)
    lead = x.ndim - nsp
    if any(a or b for a, b in pads):
        x = x.pad([(0, 0)] * lead + list(pads), pad_value)
    return windows(x, kernel, stride, dilation)


def max_pool(x, kernel, stride=None, padding=0, dilation=1, ceil_mode: bool = False):
    """Max pooling over the last len(kernel) dims of x (torch max_pool{1,2,3}d, ONNX MaxPool):
    padding counts as -inf; NaN propagates. stride defaults to the kernel."""
    kernel, stride, dilation, pads, _ = _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode)
    lowest = float("-inf") if x.dtype.is_float else None
    if lowest is None and any(a or b for a, b in pads):
        raise UnsupportedError(f"padded max pooling of a {x.dtype} tensor")
    win = _pool_windows(x, kernel, stride, dilation, pads, lowest)
    nsp = len(kernel)
    return win.max(tuple(range(win.ndim - nsp, win.ndim)))


def avg_pool(x, kernel, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
             divisor_override=None):
    """Average pooling over the last len(kernel) dims of x (torch avg_pool{1,2,3}d, ONNX
    AveragePool). The divisor: `divisor_override`, else the window's size counting the padding
    (count_include_pad) or not; with ceil_mode, window elements past the padded input never count."""
    if not x.dtype.is_float:
        raise UnsupportedError(f"average pooling of a {x.dtype} tensor")
    kernel, stride, _, pads, user = _pool_geometry(x, kernel, stride, padding, 1, ceil_mode)
    nsp = len(kernel)
    win = _pool_windows(x, kernel, stride, [1] * nsp, pads, 0)
    total = win.sum(tuple(range(win.ndim - nsp, win.ndim)))
    if divisor_override:
        return total.mul(1.0 / float(divisor_override))
    uniform = pads == user and (count_include_pad or not any(a or b for a, b in user))
    if uniform:
        return total.mul(1.0 / float(np.prod(kernel)))
    spatial = x.shape[x.ndim - nsp:]
    if not all(sym.is_static(d) for d in spatial):
        raise UnsupportedError("average pooling with ceil_mode or count_include_pad=False over symbolic spatial dims")
    counts = np.ones((), np.float64)
    for n, k, s, (lo, _), (ulo, uhi), o in zip(spatial, kernel, stride, pads, user, total.shape[x.ndim - nsp:]):
        start = np.arange(int(o)) * s - lo  # first input position of each window
        bound = (-ulo, int(n) + uhi) if count_include_pad else (0, int(n))
        first, last = np.maximum(start, bound[0]), np.minimum(start + k, bound[1])
        counts = np.multiply.outer(counts, np.maximum(last - first, 1).astype(np.float64))
    return total.div(x.graph.constant(counts.astype(x.dtype.numpy)))
