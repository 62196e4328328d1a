"""A Llama-shaped model built with the luminal builder, and the same model in PyTorch.

Used by `benchmarks/egraph_scaling.py` and the egraph tests: token embedding, N decoder
layers (RMSNorm, attention with RoPE from sin/cos of the positions and a causal mask,
softmax, SwiGLU MLP, residuals), final RMSNorm and LM head. The sequence length is symbolic.
"""

from __future__ import annotations

import numpy as np
import torch

import luminal as lm


def make_weights(layers: int, hidden: int = 64, heads: int = 4, ffn: int = 128, vocab: int = 128, seed: int = 0):
    rng = np.random.default_rng(seed)

    def lin(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def norm():
        return (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)

    w = {"embed": rng.standard_normal((vocab, hidden)).astype(np.float32), "norm": norm(), "lm_head": lin(vocab, hidden)}
    for i in range(layers):
        w.update({f"{i}.wq": lin(hidden, hidden), f"{i}.wk": lin(hidden, hidden), f"{i}.wv": lin(hidden, hidden),
                  f"{i}.wo": lin(hidden, hidden), f"{i}.gate": lin(ffn, hidden), f"{i}.up": lin(ffn, hidden),
                  f"{i}.down": lin(hidden, ffn), f"{i}.norm1": norm(), f"{i}.norm2": norm()})
    w["config"] = {"layers": layers, "hidden": hidden, "heads": heads}
    return w


def inv_freq(head_dim: int) -> np.ndarray:
    return (1.0 / (10000.0 ** (np.arange(0, head_dim, 2) / head_dim))).astype(np.float32)


def build(w) -> lm.Graph:
    cfg = w["config"]
    hidden, heads, layers = cfg["hidden"], cfg["heads"], cfg["layers"]
    hd = hidden // heads
    g = lm.Graph(f"llama{layers}")
    ids = g.input("ids", ("batch", "seq"), lm.int64)
    c = {k: g.constant(v, name=k) for k, v in w.items() if k != "config"}
    seq = ids.shape[1]
    pos = g.iota(seq, lm.int32).cast(lm.f32)
    freqs = pos.reshape(seq, 1) * g.constant(inv_freq(hd), name="inv_freq").reshape(1, hd // 2)
    cos, sin = freqs.cos(), freqs.sin()
    causal = g.ones((seq, seq), lm.bool_).tril()

    def rope(t):  # (b, h, s, hd), rotate-half form
        t1, t2 = t[..., : hd // 2], t[..., hd // 2 :]
        return lm.concat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], -1)

    def heads_of(t):
        return t.reshape(t.shape[0], t.shape[1], heads, hd).permute(0, 2, 1, 3)

    x = c["embed"].index_select(0, ids.flatten()).reshape(ids.shape[0], seq, hidden)
    for i in range(layers):
        h = x.rms_norm(c[f"{i}.norm1"], eps=1e-6)
        q, k, v = (heads_of(h.linear(c[f"{i}.{n}"])) for n in ("wq", "wk", "wv"))
        scores = rope(q).matmul(rope(k).transpose(-1, -2)) * (1.0 / np.sqrt(hd))
        attn = lm.where(causal, scores, float("-inf")).softmax(-1).matmul(v)
        x = x + attn.permute(0, 2, 1, 3).reshape(x.shape).linear(c[f"{i}.wo"])
        h = x.rms_norm(c[f"{i}.norm2"], eps=1e-6)
        x = x + (h.linear(c[f"{i}.gate"]).silu() * h.linear(c[f"{i}.up"])).linear(c[f"{i}.down"])
    g.output(x.rms_norm(c["norm"], eps=1e-6).linear(c["lm_head"]), "logits")
    return g


def torch_forward(w, ids: np.ndarray, dtype=torch.float32) -> np.ndarray:
    """The same model in PyTorch eager, in `dtype` (float32 or float64)."""
    cfg = w["config"]
    hidden, heads, layers = cfg["hidden"], cfg["heads"], cfg["layers"]
    hd = hidden // heads
    F = torch.nn.functional
    t = {k: torch.from_numpy(v).to(dtype) for k, v in w.items() if k != "config"}
    ids_t = torch.from_numpy(ids)
    b, s = ids.shape
    freqs = torch.arange(s, dtype=dtype)[:, None] * torch.from_numpy(inv_freq(hd)).to(dtype)[None, :]
    cos, sin = freqs.cos(), freqs.sin()
    mask = torch.ones(s, s, dtype=torch.bool).tril()

    def rope(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def heads_of(x):
        return x.reshape(b, s, heads, hd).permute(0, 2, 1, 3)

    x = t["embed"][ids_t]
    for i in range(layers):
        h = F.rms_norm(x, (hidden,), t[f"{i}.norm1"], eps=1e-6)
        q, k, v = (heads_of(F.linear(h, t[f"{i}.{n}"])) for n in ("wq", "wk", "wv"))
        scores = rope(q) @ rope(k).transpose(-1, -2) * (1.0 / np.sqrt(hd))
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + F.linear(attn.permute(0, 2, 1, 3).reshape(b, s, hidden), t[f"{i}.wo"])
        h = F.rms_norm(x, (hidden,), t[f"{i}.norm2"], eps=1e-6)
        x = x + F.linear(F.silu(F.linear(h, t[f"{i}.gate"])) * F.linear(h, t[f"{i}.up"]), t[f"{i}.down"])
    return F.linear(F.rms_norm(x, (hidden,), t["norm"], eps=1e-6), t["lm_head"]).numpy()
