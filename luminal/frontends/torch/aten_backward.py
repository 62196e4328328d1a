"""ATen ops that only backward graphs use and core ATen keeps whole.

Most backward ops (threshold_backward, native_layer_norm_backward, embedding_dense_backward,
_softmax_backward_data, ...) are decomposed by torch's core-ATen table before luminal sees
them. What is left is lowered here through the same builder ops as the forward:
- `convolution_backward`: the input's gradient is the transposed convolution of the output's
  gradient (a transposed convolution's, the plain one); the weight's is the correlation of the
  input's windows with the output's gradient, a batched GEMM per group over (batch x positions);
  the bias's a sum.
- `max_pool2d_with_indices_backward`: the output's gradient added at the saved argmax positions.
- `replication_pad*d_backward`: each output's gradient added at the input element it copies.
- `avg_pool2d_backward`: each output's gradient, divided by its window's divisor (torch's rule:
  `divisor_override`, else the window counting the padding or not), added at every input element
  of its window. The windows' positions and divisors are constants (static spatial dims).
"""

from __future__ import annotations

import numpy as np

from luminal.builder import nn
from luminal.errors import UnsupportedError
from luminal.frontends.torch.aten_ops import aten
from luminal.frontends.torch.aten_vision import conv_transpose
from luminal.hlir import symbolic as sym


def _per(value, nsp: int) -> list[int]:
    value = [int(value)] * nsp if isinstance(value, int) else [int(v) for v in value]
    return value * nsp if len(value) == 1 and nsp > 1 else value


def _weight_grad(x, go, kernel, stride, padding, dilation, groups):
    """gw[g*m + j, c, *k] = sum_{n, o} go[n, g*m + j, *o] * x_pad[n, g*cg + c, o*s + k*d]."""
    nsp = len(kernel)
    if any(padding):
        x = x.pad([(0, 0), (0, 0)] + [(p, p) for p in padding])
    win = nn.windows(x, kernel, stride, dilation)  # (N, C, *O', *K); O' >= O when the last window was cut
    out = go.shape[2:]
    if any(not sym.equal(a, b) for a, b in zip(win.shape[2:2 + nsp], out)):
        for i, o in enumerate(out):
            win = win.slice(2 + i, 0, o)
    n, c = x.shape[0], x.shape[1]
    cout = go.shape[1]
    cg, m = sym.exact_div(c, groups), sym.exact_div(cout, groups)
    positions = sym.product(out)
    taps = sym.product(kernel)
    # (G, N*O, cg*K): the input's windows, one row per (batch, output position). Permuted while
    # still a view, so the reshape's copy is the only one (reshaping first copies it twice)
    win = win.reshape((n, groups, cg, *win.shape[2:])).permute(1, 0, *range(3, 3 + nsp), 2, *range(3 + nsp, 3 + 2 * nsp))
    win = win.reshape((groups, sym.norm(n * positions), sym.norm(cg * taps)))
    # (G, m, N*O): the output's gradient
    g = go.reshape((n, groups, m, positions)).permute(1, 2, 0, 3).reshape((groups, m, sym.norm(n * positions)))
    gw = g.matmul(win)  # (G, m, cg*K)
    return gw.reshape((cout, cg, *kernel))


@aten("convolution_backward.default")
def convolution_backward(cx, grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                         groups, output_mask):
    nsp = x.ndim - 2
    stride, padding, dilation = _per(stride, nsp), _per(padding, nsp), _per(dilation, nsp)
    output_padding = _per(output_padding, nsp)
    if not all(sym.is_static(k) for k in weight.shape[2:]):  # (Dynamo's automatic dynamic shapes can make them so)
        raise UnsupportedError(f"convolution_backward with a symbolic kernel size {tuple(weight.shape[2:])}")
    kernel = tuple(int(k) for k in weight.shape[2:])
    grad_in = grad_w = grad_b = None
    if transposed:  # y = conv_transpose(x, w): x's gradient is the plain conv of y's, w's the same correlation
        if output_mask[0]:
            grad_in = nn.conv(grad_out, weight, None, stride, padding, dilation, groups)
        if output_mask[1]:
            # weight (Cin, Cout/G, *k): the correlation of grad_out's windows with x
            grad_w = _weight_grad(grad_out, x, kernel, stride, padding, dilation, groups)  # (Cin, Cout/G, *k)
    else:
        if output_mask[0]:
            spatial = x.shape[2:]
            out = grad_out.shape[2:]
            extra = [sym.norm(spatial[i] - ((out[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + 1))
                     for i in range(nsp)]
            if not all(sym.is_static(e) for e in extra):
                raise UnsupportedError(f"convolution_backward's input gradient: the rows the strides leave out, {extra}, "
                                       "are symbolic")
            extra = [int(e) for e in extra]
            grad_in = conv_transpose(grad_out, weight, None, stride, padding, extra, dilation, groups)
        if output_mask[1]:
            grad_w = _weight_grad(x, grad_out, kernel, stride, padding, dilation, groups)
    if output_mask[2]:
        grad_b = grad_out.sum([0, *range(2, grad_out.ndim)])
    return grad_in, grad_w, grad_b


def _add_at(cx, x, values, positions):
    """zeros like x (N, C, *spatial) with `values` (N, C, P) added at the flat spatial `positions`
    (an int64 tensor broadcastable to (N, C, P)); the position one past the end (padding) is dropped."""
    lead = x.shape[:2]
    size = int(np.prod(_static(*x.shape[2:])))
    positions = positions.expand(values.shape)
    zeros = cx.full((*lead, size + 1), 0, values.dtype)
    out = zeros.scatter(2, positions, values, reduce="add")
    return out.slice(2, 0, size).reshape(x.shape)


@aten("max_pool2d_with_indices_backward.default", "max_pool3d_with_indices_backward.default",
      "adaptive_max_pool2d_backward.default", "adaptive_max_pool3d_backward.default")
def max_pool_backward(cx, grad_out, x, *args):
    indices = args[-1]  # the windows' geometry is in the indices the forward saved
    flat = (*grad_out.shape[:2], sym.product(grad_out.shape[2:]))
    return _add_at(cx, x, grad_out.reshape(flat), indices.reshape(flat))


def _pool_dim(n, k, s, p, o):
    """One spatial dim of an average pooling: (input index per (output, tap), -1 outside the input;
    the window's size counting the padding, cut at the padded end; its size inside the input)."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    idx = start[:, None] + np.arange(k)[None, :]
    idx = np.where((idx >= 0) & (idx < n), idx, -1)
    return idx, end - start, np.minimum(end, n) - np.maximum(start, 0)


def _adaptive_dim(n, o):
    """One spatial dim of an adaptive average pooling: window [floor(i n / o), ceil((i + 1) n / o))."""
    start = (np.arange(o) * n) // o
    end = -((-(np.arange(o) + 1) * n) // o)
    k = int((end - start).max()) if o else 0
    idx = start[:, None] + np.arange(k)[None, :]
    idx = np.where(idx < end[:, None], idx, -1)
    return idx, end - start, end - start


def _windows_table(spatial, dims, divisor):
    """The per-dim windows combined: (flat input positions (O, K), one past the end outside the
    input; divisors (O,)) with `divisor` "all" (counting the padding), "valid", or a number."""
    pos, pad = np.zeros((1, 1), np.int64), np.zeros((1, 1), bool)
    count_all, count_valid = np.ones(1, np.int64), np.ones(1, np.int64)
    for (idx, size, valid), n in zip(dims, spatial):
        k = idx.shape[1]
        pos = (pos[:, None, :, None] * n + np.maximum(idx, 0)[None, :, None, :]).reshape(-1, pos.shape[1] * k)
        pad = (pad[:, None, :, None] | (idx < 0)[None, :, None, :]).reshape(pos.shape)
        count_all = (count_all[:, None] * size[None, :]).reshape(-1)
        count_valid = (count_valid[:, None] * valid[None, :]).reshape(-1)
    counts = count_all if divisor == "all" else count_valid if divisor == "valid" else np.full_like(count_all, divisor)
    return np.where(pad, int(np.prod(spatial)), pos), counts


def _spread_back(cx, grad_out, x, pos, divisor):
    """x's gradient of an average pooling: each output's gradient / its divisor, added at its window."""
    o, k = pos.shape
    lead = grad_out.shape[:2]
    g = grad_out.reshape((*lead, o, 1))
    g = g.div(cx.g.constant(divisor.reshape(o, 1).astype(grad_out.dtype.numpy)))
    g = g.expand((*lead, o, k)).reshape((*lead, o * k))
    return _add_at(cx, x, g, cx.g.constant(pos.reshape(1, 1, o * k)))


def _static(*dims):
    if not all(sym.is_static(d) for d in dims):
        raise UnsupportedError("a pooling's gradient over symbolic spatial dims")
    return [int(d) for d in dims]


@aten("avg_pool2d_backward.default", "avg_pool3d_backward.default")
def avg_pool_backward(cx, grad_out, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    nsp = len(kernel_size)
    kernel = _per(kernel_size, nsp)
    stride, padding = _per(stride or kernel, nsp), _per(padding, nsp)
    spatial, out = _static(*x.shape[2:]), _static(*grad_out.shape[2:])
    dims = [_pool_dim(*a) for a in zip(spatial, kernel, stride, padding, out)]
    divisor = divisor_override if divisor_override else "all" if count_include_pad else "valid"
    return _spread_back(cx, grad_out, x, *_windows_table(spatial, dims, divisor))


@aten("_adaptive_avg_pool2d_backward.default", "_adaptive_avg_pool3d_backward.default")
def adaptive_avg_pool_backward(cx, grad_out, x):
    spatial, out = _static(*x.shape[2:]), _static(*grad_out.shape[2:])
    dims = [_adaptive_dim(n, o) for n, o in zip(spatial, out)]
    return _spread_back(cx, grad_out, x, *_windows_table(spatial, dims, "valid"))


@aten("replication_pad1d_backward.default", "replication_pad2d_backward.default", "replication_pad3d_backward.default")
def replication_pad_backward(cx, grad_out, x, padding):
    nsp = len(padding) // 2
    spatial, out = _static(*x.shape[x.ndim - nsp:]), _static(*grad_out.shape[grad_out.ndim - nsp:])
    befores = [padding[2 * (nsp - 1 - i)] for i in range(nsp)]  # torch lists the pads last dim first
    pos = np.zeros(1, np.int64)
    for n, o, before in zip(spatial, out, befores):  # the input element each output copies, flat
        pos = (pos[:, None] * n + np.clip(np.arange(o) - before, 0, n - 1)[None, :]).reshape(-1)
    lead = x.shape[: x.ndim - nsp]
    flat = (sym.product(lead), 1, len(pos))
    grad = _add_at(cx, x.reshape((flat[0], 1, *spatial)), grad_out.reshape(flat), cx.g.constant(pos.reshape(1, 1, -1)))
    return grad.reshape(x.shape)


@aten("_weight_norm_interface_backward.default")
def weight_norm_backward(cx, grad_w, v, g, norms, dim):
    """w = g * v / |v| (the norm over every axis but `dim`; all of them for dim -1), as ATen's
    `_weight_norm_differentiable_backward`: per-direction sums s = sum(grad_w * v), then
    grad_g = s / |v| and grad_v = (g / |v|) (grad_w - v s / |v|²)."""
    axes = list(range(v.ndim)) if dim == -1 else [a for a in range(v.ndim) if a != dim % v.ndim]
    per_direction = grad_w.mul(v).sum(axes, keepdim=True)
    norms, g = norms.reshape(per_direction.shape), g.reshape(per_direction.shape)
    grad_v = g.div(norms).mul(grad_w.sub(v.mul(per_direction.div(norms.mul(norms)))))
    return grad_v, per_direction.div(norms)
