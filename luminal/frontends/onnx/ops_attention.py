"""Attention (opset 23+) and RotaryEmbedding (opset 23), following the ONNX reference exactly.

Attention: masks become an additive bias (select, never multiply: True -> 0, False -> -inf),
causal and sliding-window frontiers are bottom-right aligned (offset by the past length, or
per batch by `nonpad_kv_seqlen`), GQA repeats each KV head, and a row whose bias is all -inf
yields zeros (the reference's fully-masked-row guard) instead of NaN.
"""

from __future__ import annotations

import math

import numpy as np

from luminal.builder import functional as F
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType

NEG_INF = float("-inf")


def _split_heads(x, heads):
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, sym.floordiv(hidden, heads)).permute(0, 2, 1, 3)


def _select_bias(c, allowed, dtype):
    zero = c.g.scalar(0.0, dtype).expand(allowed.shape)
    return F.where(allowed, zero, NEG_INF)


def _add(a, b):
    return b if a is None else a.add(b)


def _frontier(c, s, length, offset):
    """diff[i, j] = (i + offset) - j, as (s, L) or (B, 1, s, L) when offset is per batch."""
    i = c.g.iota(s, DType.I64).reshape(s, 1)
    j = c.g.iota(length, DType.I64).reshape(1, length)
    if offset is None:
        return i.sub(j)
    if isinstance(offset, int) or not hasattr(offset, "node"):
        return i.add(c.g.scalar(offset, DType.I64)).sub(j)
    per = offset.cast(DType.I64).reshape(-1, 1, 1, 1)
    return i.reshape(1, 1, s, 1).add(per).sub(j.reshape(1, 1, 1, length))


@onnx_op("Attention", since=23)
def attention(c, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, is_causal=0,
              kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
              softmax_precision=None, left_window_size=-1, right_window_size=-1):
    rank3 = q.ndim == 3
    if rank3:
        q, k, v = _split_heads(q, q_num_heads), _split_heads(k, kv_num_heads), _split_heads(v, kv_num_heads)
    dt = q.dtype
    if scale is None:
        scale = 1 / math.sqrt(q.shape[3])
    s = float(dt.numpy.type(np.sqrt(scale)))
    k = F.concat([past_key, k], 2) if past_key is not None else k
    v = F.concat([past_value, v], 2) if past_value is not None else v
    present_k, present_v = k, v
    sq, lk = q.shape[2], k.shape[2]
    if attn_mask is not None and not sym.equal(attn_mask.shape[-1], lk):
        width = sym.norm(lk - attn_mask.shape[-1])
        pads = [(0, 0)] * (attn_mask.ndim - 1) + [(0, width)]
        attn_mask = attn_mask.pad(pads, False if attn_mask.dtype is DType.BOOL else NEG_INF)
    if attn_mask is not None and attn_mask.dtype is DType.BOOL:
        attn_mask = _select_bias(c, attn_mask, dt)
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = nonpad_kv_seqlen.cast(DType.I64).sub(c.g.scalar(sq, DType.I64))
    else:
        offset = past_key.shape[2] if past_key is not None else 0
    bias = attn_mask
    if is_causal:
        bias = _add(bias, _select_bias(c, _frontier(c, sq, lk, offset).ge(0), dt))
    if left_window_size >= 0 or right_window_size >= 0:
        diff = _frontier(c, sq, lk, offset)
        allowed = c.g.scalar(True, DType.BOOL).expand(diff.shape)
        if left_window_size >= 0:
            allowed = allowed.logical_and(diff.le(left_window_size))
        if right_window_size >= 0:
            allowed = allowed.logical_and(diff.neg().le(right_window_size))
        bias = _add(bias, _select_bias(c, allowed, dt))
    if nonpad_kv_seqlen is not None:
        pos = c.g.iota(lk, DType.I64).reshape(1, lk)
        keep = pos.lt(nonpad_kv_seqlen.cast(DType.I64).reshape(-1, 1))
        bias = _add(bias, _select_bias(c, keep, dt).reshape(keep.shape[0], 1, 1, lk))
    qh, kh = q.shape[1], k.shape[1]
    if not sym.equal(qh, kh):
        reps = sym.floordiv(qh, kh)
        b, _, length, hd = k.shape
        k = k.unsqueeze(2).expand(b, kh, reps, length, hd).reshape(b, qh, length, hd)
        vd = v.shape[3]
        v = v.unsqueeze(2).expand(b, kh, reps, length, vd).reshape(b, qh, length, vd)
    qk = q.mul(s).matmul(k.mul(s).transpose(-1, -2))
    if softcap and softcap > 0:
        qk = qk.div(softcap).tanh().mul(softcap)
    out_qk = qk
    qkb = qk if bias is None else qk.add(bias)
    if qk_matmul_output_mode == 2:
        out_qk = qkb
    if softmax_precision is not None:
        qkb = qkb.cast(c.dtype(softmax_precision))
    probs = _safe_softmax(qkb)
    if bias is not None:
        masked = bias.max(-1, keepdim=True).eq(NEG_INF)
        probs = F.where(masked, c.g.scalar(0.0, probs.dtype).expand(masked.shape), probs)
    if qk_matmul_output_mode == 3:
        out_qk = probs
    out_qk = out_qk.cast(dt)
    y = probs.cast(dt).matmul(v)
    if rank3:
        y = y.permute(0, 2, 1, 3)
        y = y.reshape(y.shape[0], y.shape[1], sym.norm(y.shape[2] * y.shape[3]))
    return y, present_k, present_v, out_qk


def _safe_softmax(x):
    """Softmax over the last axis; an all -inf row gives zeros, not NaN (the reference's)."""
    m = x.max(-1, keepdim=True)
    m = F.where(m.eq(NEG_INF), x.graph.scalar(0.0, x.dtype).expand(m.shape), m)
    e = x.sub(m).exp()
    total = e.sum(-1, keepdim=True)
    total = F.where(total.eq(0.0), x.graph.scalar(1.0, x.dtype).expand(total.shape), total)
    return e.div(total)


@onnx_op("RotaryEmbedding", since=23)
def rotary_embedding(c, x, cos_cache, sin_cache, position_ids=None, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0):
    shape = x.shape
    rank4 = x.ndim == 4
    y = x.permute(0, 2, 1, 3) if rank4 else x.reshape(shape[0], shape[1], num_heads, sym.floordiv(shape[2], num_heads))
    head = y.shape[3]
    rd = rotary_embedding_dim or head
    rot, rest = y.slice(3, 0, rd), y.slice(3, rd, head)
    if position_ids is not None:
        cos_cache = _take_rows(cos_cache, position_ids)
        sin_cache = _take_rows(sin_cache, position_ids)
    cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
    half = rd // 2
    if interleaved:
        x1, x2 = rot.slice(3, 0, rd, 2), rot.slice(3, 1, rd, 2)
    else:
        x1, x2 = rot.slice(3, 0, half), rot.slice(3, half, rd)
    real = cos.mul(x1).sub(sin.mul(x2))
    imag = sin.mul(x1).add(cos.mul(x2))
    if interleaved:
        rot = F.stack([real, imag], -1).reshape(rot.shape)
    else:
        rot = F.concat([real, imag], -1)
    out = F.concat([rot, rest], -1) if not sym.equal(rd, head) else rot
    return out.permute(0, 2, 1, 3) if rank4 else out.reshape(shape)


def _take_rows(cache, ids):
    flat = cache.index_select(0, ids.flatten())
    return flat.reshape(ids.shape + (cache.shape[-1],))
