"""Recurrent ops: RNN, GRU, LSTM (forward, reverse, bidirectional; sequence_lens; initial
states; layout 0 and 1; activations with alpha/beta; clip; LSTM peepholes and input_forget;
GRU linear_before_reset).

Lowered to HLIR primitives by unrolling the recurrence over the sequence length, which is the
input's static dim in each compiled graph: a model whose sequence dim is symbolic compiles once
per distinct length (`NeedsShape`; under `recurrence="auto"`, the default, only the first length:
later ones, and any past MAX_STEPS, step the cell on the host, `staged_rnn.py`). The input
projection X @ W^T is one MatMul over all steps and both directions (a projection per step
commutes with reversing the steps: one GEMM twice as wide, which the CPU backend may split across
threads); each step adds H @ R^T (one GEMM for all of a GRU's gates when linear_before_reset) and
the gates.
`sequence_lens` masks per batch row: past its length a row keeps its state and its Y is 0, and
the reverse direction walks each row's own prefix backwards (a per-row gather).
"""

from __future__ import annotations

import numpy as np
import onnx

from luminal.builder import functional as F
from luminal.frontends.onnx.errors import NeedsShape, OnnxImportError
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Op

MAX_STEPS = 4096  # an unrolled recurrence's steps: more compile too slowly (the graph grows with the length)
# The host-stepped cell's private domain (`staged_rnn.py`): the same ops with X already projected,
# X @ W^T of shape (seq, batch, directions * gates * hidden), and no W (the host computes the
# projection of every step as one GEMM before stepping).
PROJECTED = "ai.luminal.projected"


class TooManySteps(OnnxImportError):
    """A recurrence longer than MAX_STEPS asked to unroll: `recurrence="auto"` steps it on the host instead."""


PRODUCT_MAX = 1 << 24  # elements of a weight read by a constant state's product (`_constant_product`)
LOOKUP_MAX = 1 << 22  # elements of a precomputed embedding-projection table (16 MB of f32)


def _activation(c, name: str, alpha, beta):
    n = name.lower()
    if n == "tanh":
        return lambda x: x.tanh()
    if n == "sigmoid":
        return lambda x: x.sigmoid()
    if n == "relu":
        return lambda x: x.relu()
    if n == "affine":
        return lambda x: x.mul(1.0 if alpha is None else alpha).add(0.0 if beta is None else beta)
    if n == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: x.where_(x.ge(0.0), x.mul(a))
    if n == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: x.where_(x.gt(a), x.mul(0.0))
    if n == "scaledtanh":
        return lambda x: x.mul(1.0 if beta is None else beta).tanh().mul(1.0 if alpha is None else alpha)
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: x.mul(a).add(b).clamp(0.0, 1.0)
    if n == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: x.where_(x.ge(0.0), x.exp().sub(1.0).mul(a))
    if n == "softsign":
        return lambda x: x.div(x.abs().add(1.0))
    if n == "softplus":
        return lambda x: x.exp().add(1.0).log()
    c.fail(f"activation {name!r} is not supported")


def _activations(c, names, alphas, betas, per_dir: int, dirs: int, defaults):
    names = list(names or defaults * dirs)
    if len(names) == per_dir and dirs == 2:
        names = names * 2
    alphas, betas = list(alphas or []), list(betas or [])
    out = []
    for i, n in enumerate(names):
        out.append(_activation(c, n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None))
    return [out[d * per_dir:(d + 1) * per_dir] for d in range(dirs)]


def _prepare(c, x, seq_lens, layout):
    """x as (seq, batch, input); the static length; per-step masks (or None)."""
    if layout:
        x = x.permute(1, 0, 2)
    n = x.shape[0]
    if not sym.is_static(n):
        raise NeedsShape(f"{c.node.op_type} node {c.name!r}: the sequence length {n} is symbolic; luminal unrolls "
                         "recurrences, so this model compiles once per sequence length", c.node.input[0])
    n = int(n)
    if n > MAX_STEPS:
        raise TooManySteps(f"{c.node.op_type} node {c.name!r}: a sequence of {n} steps: luminal unrolls at most "
                           f"{MAX_STEPS} (recurrence='auto' or 'host' steps it on the host)")
    return x, n


def _reverse_rows(x, seq_lens, n):
    """x (seq, batch, ...) with each batch row's first seq_lens[b] steps reversed."""
    if seq_lens is None:
        return x.slice(0, None, None, -1) if n > 1 else x
    t = F.arange(x.graph, 0, n, dtype=seq_lens.dtype).reshape((n, 1))
    lens = seq_lens.reshape((1, -1))
    idx = lens.sub(1).sub(t).where_(t.lt(lens), t.expand((n, lens.shape[1])))  # (seq, batch): an involution
    for _ in range(x.ndim - 2):
        idx = idx.unsqueeze(-1)
    return x.gather(0, idx.expand(x.shape))


def _run(c, x, W, R, B, seq_lens, initial, direction, layout, gates: int, step, project=None):
    """The common driver: `step(d, xw_t, states, mask_t) -> (h, states)` per direction d;
    `project(x)`: X @ W^T of every direction, (seq, batch, dirs * gates * hidden), when not a
    float GEMM (DynamicQuantizeLSTM's)."""
    x, n = _prepare(c, x, seq_lens, layout)
    dirs = 2 if direction == "bidirectional" else 1
    if direction not in ("forward", "reverse", "bidirectional"):
        c.fail(f"direction {direction!r} is not forward, reverse or bidirectional")
    batch = x.shape[1]
    hidden = R.shape[-1]
    if n == 0:  # no step: Y is empty and the final states are the initial ones (zeros when absent)
        y = F.full(x.graph, (0, dirs, batch, hidden), 0.0, x.dtype)
        finals = [F.full(x.graph, (dirs, batch, hidden), 0.0, x.dtype) if s is None else s for s in initial]
        if layout:
            return [y.permute(2, 0, 1, 3)] + [f.permute(1, 0, 2) for f in finals]
        return [y] + finals
    ys, finals = [], []
    width = gates * hidden
    xw_all = x if c.node.domain == PROJECTED else project(x) if project is not None else _projected_lookup(c, layout)
    if xw_all is None:
        xw_all = x.matmul(W.reshape((dirs * width, W.shape[-1])).T)  # (seq, batch, dirs * gates * hidden)
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        xw = xw_all.slice(2, d * width, (d + 1) * width) if dirs > 1 else xw_all
        xw = _reverse_rows(xw, seq_lens, n) if reverse else xw  # (seq, batch, gates * hidden)
        if B is not None:
            xw = xw.add(B[d].slice(0, 0, gates * hidden)).add(B[d].slice(0, gates * hidden, 2 * gates * hidden))
        states = [None if s is None else s[d] for s in initial]
        states = [F.full(x.graph, (batch, hidden), 0.0, x.dtype) if s is None else s for s in states]
        outs = []
        for t in range(n):
            mask = None
            if seq_lens is not None:
                mask = seq_lens.reshape((-1, 1)).gt(t)  # (batch, 1)
            h, new = step(d, xw[t], states, R[d])
            if mask is not None:
                new = [s_new.where_(mask, s_old) for s_new, s_old in zip(new, states)]
                h = h.where_(mask, h.mul(0.0))
            states = new
            outs.append(h)
        y = F.stack(outs, 0)  # (seq, batch, hidden)
        if reverse:
            y = _reverse_rows(y, seq_lens, n)
        ys.append(y)
        finals.append(states)
    y = F.stack(ys, 1)  # (seq, dirs, batch, hidden)
    finals = [F.stack([f[k] for f in finals], 0) for k in range(len(finals[0]))]  # (dirs, batch, hidden)
    if layout:
        y = y.permute(2, 0, 1, 3)
        finals = [f.permute(1, 0, 2) for f in finals]
    return [y] + finals


def _projected_lookup(c, layout):
    """X @ W^T for every direction as a row lookup when X is an embedding: a Gather (axis 0) of
    a constant table E by run-time ids, transposed from (batch, seq) or not. (E @ W^T)[ids] is
    E[ids] @ W^T row for row, so the table E @ W^T is computed once here (in float64, rounded
    once) and the model's first GEMM becomes a gather of seq * batch rows (the GRU encoder of
    arabic-name-romanizer: a 14 x 256 by 256 x 768 GEMM per call). None otherwise,
    or when the table would be large (`LOOKUP_MAX`) or more than 4x the embedding."""
    w = c.known(1)
    if layout or w is None or w.dtype != np.float32 or w.ndim != 3:
        return None
    producers = {o: n for n in c.importer.proto.graph.node for o in n.output}
    node, transposed = producers.get(c.node.input[0]), False
    if node is not None and node.op_type == "Transpose":
        perm = next((list(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "perm"), None)
        if perm != [1, 0, 2]:
            return None
        node, transposed = producers.get(node.input[0]), True
    if node is None or node.op_type != "Gather" or len(node.input) != 2:
        return None
    if any(a.name == "axis" and onnx.helper.get_attribute_value(a) != 0 for a in node.attribute):
        return None
    table, ids = c.importer.values.get(node.input[0]), c.importer.values.get(node.input[1])
    if table is None or table.known is None or ids is None or ids.known is not None or ids.tensor is None:
        return None
    emb = table.known.array
    rows = w.reshape(-1, w.shape[-1])
    if (emb.dtype != np.float32 or emb.ndim != 2 or emb.shape[1] != rows.shape[1] or ids.tensor.ndim != 2
            or emb.shape[0] * rows.shape[0] > min(LOOKUP_MAX, 4 * emb.size)):
        return None
    from luminal.frontends.onnx.ops_tensor import gather  # the Gather's own index handling (negative ids)

    projected = (emb.astype(np.float64) @ rows.astype(np.float64).T).astype(np.float32)
    out = gather(c, c.g.constant(projected), ids.tensor, 0)  # ids' shape + (dirs * gates * hidden,)
    return out.permute(1, 0, 2) if transposed else out


def _initial(layout, *states):
    return [None if s is None else (s.permute(1, 0, 2) if layout else s) for s in states]


def _clip(x, clip):
    return x if clip is None else x.clamp(-clip, clip)


def _recurrent(h, r):
    """h @ r^T, (batch, hidden) by (gates * hidden, hidden). At batch 1 (one direction) the product
    h[m, 1, k] * r[1, n, k] reads r with r's own shape: the view is dropped and the MatMul rule,
    which matches views, finds no GEMM (a 512x128 product and sum per step): spelled r @ h^T,
    transposed back, the same dot products as a GEMV."""
    known = _constant_product(h, r)
    if known is not None:
        return known
    if sym.equal(h.shape[0], 1):
        return r.matmul(h.T).T
    return h.matmul(r.T)


def _constant_source(t):
    """The CONSTANT node `t` reads through views and copies only (a weight's slice, a zero state
    broadcast to (batch, hidden)), or None; None too through a padded view (its padding reads as
    zero, not as the constant)."""
    node = t.node
    for _ in range(16):
        if node.op is Op.CONSTANT:
            return node
        if node.op not in (Op.VIEW, Op.CONTIGUOUS) or len(node.src) != 1:
            return None
        if node.op is Op.VIEW and node.arg.mask is not None:
            return None
        node = node.src[0]
    return None


def _constant_product(h, r):
    """h @ r^T computed now, as a constant, when the state h is a constant (the first step's,
    zeros when the model gives none) and r a weight: a product the graph would otherwise compute
    every call (a broadcast product and sum of 0 * R per direction). In float64, rounded once; NaN
    and inf in either propagate as the product's would (0 * inf is NaN). A state of symbolic batch is a broadcast scalar: one row, expanded.
    None where h or r depends on an input, or neither dtype is float32/float64."""
    h_src, r_src = _constant_source(h), _constant_source(r)
    if h_src is None or r_src is None or h.dtype.numpy not in (np.float32, np.float64) or r.dtype != h.dtype:
        return None
    if not all(sym.is_static(d) for d in r.shape) or int(np.prod([int(d) for d in r.shape])) > PRODUCT_MAX:
        return None
    from luminal.runtime import NumpyRuntime

    (r_now,) = NumpyRuntime([r.node])({})
    if all(sym.is_static(d) for d in h.shape):
        (h_now,) = NumpyRuntime([h.node])({})
        rows = h_now
    elif not h_src.shape and isinstance(h_src.arg, (int, float, np.number)) and not isinstance(h_src.arg, bool):
        # F.full: a scalar broadcast to (batch, hidden)
        rows = np.full((1, h.shape[-1]), h_src.arg, h.dtype.numpy)
    else:
        return None
    product = (np.asarray(rows, np.float64) @ np.asarray(r_now, np.float64).T).astype(h.dtype.numpy)
    out = h.graph.constant(product, h.dtype)
    return out if product.shape[0] == h.shape[0] else out.expand((h.shape[0], product.shape[1]))


@onnx_op("RNN", domain=PROJECTED)
@onnx_op("RNN", since=7)
def rnn(c, x, W, R, B=None, seq_lens=None, initial_h=None, *, activation_alpha=None, activation_beta=None,
        activations=None, clip=None, direction="forward", hidden_size=None, layout=0):
    dirs = 2 if direction == "bidirectional" else 1
    acts = _activations(c, activations, activation_alpha, activation_beta, 1, dirs, ["Tanh"])

    def step(d, xw, states, r):
        h = acts[d][0](_clip(xw.add(_recurrent(states[0], r)), clip))
        return h, [h]

    return _run(c, x, W, R, B, seq_lens, _initial(layout, initial_h), direction, layout, 1, step)


@onnx_op("GRU", domain=PROJECTED)
@onnx_op("GRU", since=7)
def gru(c, x, W, R, B=None, seq_lens=None, initial_h=None, *, activation_alpha=None, activation_beta=None,
        activations=None, clip=None, direction="forward", hidden_size=None, layout=0, linear_before_reset=0):
    dirs = 2 if direction == "bidirectional" else 1
    acts = _activations(c, activations, activation_alpha, activation_beta, 2, dirs, ["Sigmoid", "Tanh"])
    hs = R.shape[-1]

    def step(d, xw, states, r):
        f, g = acts[d]
        h_prev = states[0]
        if linear_before_reset:  # every gate's recurrent product at once
            both = _recurrent(h_prev, r)
            rz, hr = both[:, :2 * hs], both[:, 2 * hs:]
        else:
            rz = _recurrent(h_prev, r[:2 * hs])
        rb = B[d][3 * hs:] if B is not None else None
        # the recurrent bias of the h gate belongs inside r * (...) when linear_before_reset: undo its early add
        z = f(_clip(xw[:, :hs].add(rz[:, :hs]), clip))
        rt = f(_clip(xw[:, hs:2 * hs].add(rz[:, hs:]), clip))
        xh = xw[:, 2 * hs:]
        if linear_before_reset:
            if rb is not None:
                xh = xh.sub(rb[2 * hs:])
                hr = hr.add(rb[2 * hs:])
            ht = g(_clip(xh.add(rt.mul(hr)), clip))
        else:
            ht = g(_clip(xh.add(_recurrent(rt.mul(h_prev), r[2 * hs:])), clip))
        h = z.mul(-1.0).add(1.0).mul(ht).add(z.mul(h_prev))
        return h, [h]

    return _run(c, x, W, R, B, seq_lens, _initial(layout, initial_h), direction, layout, 3, step)


@onnx_op("LSTM", domain=PROJECTED)
@onnx_op("LSTM", since=7)
def lstm(c, x, W, R, B=None, seq_lens=None, initial_h=None, initial_c=None, P=None, *, activation_alpha=None,
         activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, input_forget=0,
         layout=0):
    dirs = 2 if direction == "bidirectional" else 1
    acts = _activations(c, activations, activation_alpha, activation_beta, 3, dirs, ["Sigmoid", "Tanh", "Tanh"])
    step = lstm_step(acts, R.shape[-1], P, clip, input_forget)
    y, y_h, y_c = _run(c, x, W, R, B, seq_lens, _initial(layout, initial_h, initial_c), direction, layout, 4, step)
    return [y, y_h, y_c]


def lstm_step(acts, hs, P, clip, input_forget, recurrent=None):
    """The LSTM cell as `_run`'s step; `recurrent(d, h)`: h @ R[d]^T when not a float GEMM
    (DynamicQuantizeLSTM's quantized product)."""

    def step(d, xw, states, r):
        f, g, h_act = acts[d]
        h_prev, c_prev = states
        gates = xw.add(_recurrent(h_prev, r) if recurrent is None else recurrent(d, h_prev))
        gi, go, gf, gc = (gates[:, k * hs:(k + 1) * hs] for k in range(4))
        if P is not None:
            gi = gi.add(P[d][:hs].mul(c_prev))
            gf = gf.add(P[d][2 * hs:].mul(c_prev))
        i = f(_clip(gi, clip))
        ft = i.mul(-1.0).add(1.0) if input_forget else f(_clip(gf, clip))
        ct = g(_clip(gc, clip))
        c_new = ft.mul(c_prev).add(i.mul(ct))
        if P is not None:
            go = go.add(P[d][hs:2 * hs].mul(c_new))
        o = f(_clip(go, clip))
        h = o.mul(h_act(c_new))
        return h, [h, c_new]

    return step
