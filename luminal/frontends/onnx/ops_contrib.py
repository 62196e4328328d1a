"""The com.microsoft contrib ops that onnxruntime's transformer optimizer emits (FusedMatMul,
Gelu, FastGelu, BiasGelu, SkipLayerNormalization, Attention, RotaryEmbedding), lowered to the
same primitives as their unfused forms, with onnxruntime's CPU kernels as the definition."""

from __future__ import annotations

import math

from luminal.builder import functional as F
from luminal.frontends.onnx.ops_attention import rotary_embedding
from luminal.frontends.onnx.registry import onnx_op
from luminal.hlir import symbolic as sym

MS = "com.microsoft"


@onnx_op("FusedMatMul", domain=MS)
def fused_matmul(c, a, b, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):  # noqa: N803 - ORT names
    if transBatchA or transBatchB:
        c.fail("transBatchA / transBatchB are not supported")
    a = a.transpose(-2, -1) if transA and a.ndim >= 2 else a
    b = b.transpose(-2, -1) if transB and b.ndim >= 2 else b
    y = a.matmul(b)
    return y if alpha == 1.0 else y.mul(alpha)


@onnx_op("Gelu", domain=MS)
def gelu(c, x):
    return x.gelu()


@onnx_op("BiasGelu", domain=MS)
def bias_gelu(c, x, bias):
    return x.add(bias).gelu()


@onnx_op("FastGelu", domain=MS)
def fast_gelu(c, x, bias=None):
    return (x if bias is None else x.add(bias)).gelu("tanh")


@onnx_op("SkipLayerNormalization", domain=MS)
def skip_layer_norm(c, x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    s = x.add(skip)
    if bias is not None:
        s = s.add(bias)
    out = s.layer_norm((s.shape[-1],), gamma, beta, eps=epsilon)
    wanted = c.n_outputs
    return [out] + [None] * max(0, min(wanted, 3) - 1) + ([s] if wanted >= 4 else [])


@onnx_op("Attention", domain=MS)
def attention(c, x, weights, bias=None, mask_index=None, past=None, attention_bias=None, past_sequence_length=None,
              *, num_heads, unidirectional=0, qkv_hidden_sizes=None, scale=0.0, mask_filter_value=-10000.0,
              do_rotary=0, rotary_embedding_dim=0, past_present_share_buffer=0):
    """Packed-QKV self-attention of BERT-style exports: x (B, S, H) @ weights (H, 3H) + bias;
    mask_index as a (B, S) key mask of 1 / 0 or (B, S, S); unidirectional = causal."""
    if past is not None or do_rotary or past_sequence_length is not None:
        c.fail("Attention with past state or rotary is not supported (export without KV cache)")
    bsz, seq = x.shape[0], x.shape[1]
    qkv = x.matmul(weights)
    if bias is not None:
        qkv = qkv.add(bias)
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [sym.floordiv(weights.shape[1], 3)] * 3
    q, k, v = F.split_sizes(qkv, 2, sizes)

    def heads(t, size):
        return t.reshape((bsz, seq, num_heads, sym.floordiv(size, num_heads))).permute(0, 2, 1, 3)

    q, k, v = heads(q, sizes[0]), heads(k, sizes[1]), heads(v, sizes[2])
    head = q.shape[3]
    s = scale or 1.0 / math.sqrt(head)
    scores = q.matmul(k.transpose(-2, -1)).mul(s)  # (B, N, S, S)
    if attention_bias is not None:
        scores = scores.add(attention_bias)
    if mask_index is not None:
        if mask_index.ndim == 2:
            keep = mask_index.reshape((bsz, 1, 1, seq)).ne(0)
        elif mask_index.ndim == 3:
            keep = mask_index.unsqueeze(1).ne(0)
        else:
            c.fail(f"mask_index of rank {mask_index.ndim} is not supported (1-D lengths: export a 2-D mask)")
        scores = scores.where_(keep, scores.mul(0.0).add(mask_filter_value))
    if unidirectional:
        causal = F.triangle(scores.mul(0.0).add(1.0), 0, upper=False).ne(0.0)
        scores = scores.where_(causal, scores.mul(0.0).add(mask_filter_value))
    out = scores.softmax(-1).matmul(v)  # (B, N, S, h)
    return out.permute(0, 2, 1, 3).reshape((bsz, seq, sizes[2]))


@onnx_op("RotaryEmbedding", domain=MS)
def rotary_embedding_ms(c, x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                        rotary_embedding_dim=0, scale=1.0, is_packed_batching=0):
    if is_packed_batching:
        c.fail("packed batching is not supported")
    if position_ids.ndim == 1 and x.ndim >= 3:  # (1,): the offset of consecutive positions
        position_ids = F.arange(c.g, 0, x.shape[-2] if x.ndim == 4 else x.shape[1], dtype=position_ids.dtype) \
            .reshape((1, -1)).add(position_ids.reshape((1, 1)))
    return rotary_embedding(c, x, cos_cache, sin_cache, position_ids, interleaved=interleaved, num_heads=num_heads,
                            rotary_embedding_dim=rotary_embedding_dim)
