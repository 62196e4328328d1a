"""The decomposition table aot_autograd gets for graphs luminal differentiates.

torch's `core_aten_decompositions()` is right for forward graphs but not for training: its entry
for `aten._scaled_dot_product_flash_attention_for_cpu` (the op CPU `scaled_dot_product_attention`
dispatches to) returns the attention *weights* where the op returns the row log-sum-exp. Autograd
records the flash op before the table applies, so the backward calls
`_scaled_dot_product_flash_attention_for_cpu_backward` with those weights as its log-sum-exp, and
every gradient through attention is silently wrong.
Here the forward returns the true log-sum-exp and the backward op has a decomposition of its own,
so both graphs are core ATen that luminal lowers:

    P  = exp(S - lse)   where S = scale * Q Kᵀ + mask (rows masked everywhere: P = 0)
    dV = Pᵀ dO          dS = P * (dO Vᵀ - rowsum(dO * O))
    dQ = scale * dS K   dK = scale * dSᵀ Q

The forward's scores and probabilities are annotated (`RECOMPUTE`, an FX node annotation) so
that the partition (`partition.partition`) recomputes them in the backward from
Q, K and the log-sum-exp, as the flash kernel does, rather than saving a (heads, length, length)
tensor per layer.

Batch norm in training mode (`_native_batch_norm_legit_functional`) takes torch's own
decomposition: the batch statistics, then the normalization as pointwise ops, which the partition
(`partition.py`) recomputes in the backward rather than saving the normalized tensor. Its backward
is autograd's formula as before, and luminal lowered the op to the same computation.

Grouped-query attention (fewer key/value heads than query heads) repeats K and V per group in
the forward and sums the groups' gradients back. Dropout inside the flash op is refused, as
torch's own decomposition refuses it (CPU SDPA with dropout takes the math path, which autograd
differentiates op by op).
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch
import torch.fx.traceback as fx_traceback

aten = torch.ops.aten
RECOMPUTE = "luminal_recompute"  # node.meta["custom"] key: recomputed in the backward, not saved


def _recomputed():
    """The nodes traced inside are annotated RECOMPUTE (torch without `annotate`: saved, as before)."""
    annotate = getattr(fx_traceback, "annotate", None)
    return annotate({RECOMPUTE: True}) if annotate is not None else contextlib.nullcontext()


@functools.lru_cache(maxsize=1)
def training_decompositions() -> dict:
    """core ATen's table with the flash attention pair replaced (see the module docstring)."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    table = core_aten_decompositions()
    table = {op: table[op] for op in table}
    table[aten._scaled_dot_product_flash_attention_for_cpu.default] = flash_attention_for_cpu
    table[aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = flash_attention_for_cpu_backward
    table[aten._native_batch_norm_legit_functional.default] = decomposition_table[aten._native_batch_norm_legit_functional.default]
    return table


def _scores(query, key, is_causal, attn_mask, scale):
    """S = scale * Q Kᵀ (+ the causal or given mask), in f32 at least, with K repeated per group."""
    groups = query.size(1) // key.size(1)
    if groups != 1:
        key = key.repeat_interleave(groups, dim=1)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    acc = torch.promote_types(query.dtype, torch.float32)
    s = torch.matmul(query.to(acc), key.to(acc).transpose(-2, -1)) * scale
    length, source = query.size(-2), key.size(-2)
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool, device=query.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.to(acc)
    return s


def _probabilities(s, lse):
    """exp(S - lse), 0 on rows masked everywhere (lse = -inf), as the flash kernel's backward."""
    lse = lse.unsqueeze(-1)
    return torch.where(lse == float("-inf"), torch.zeros_like(s), torch.exp(s - lse))


def flash_attention_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    torch._check(dropout_p == 0.0, lambda: f"flash attention for cpu with dropout {dropout_p} is not decomposed")
    with _recomputed():
        s = _scores(query, key, is_causal, attn_mask, scale)
    lse = torch.logsumexp(s, dim=-1)
    groups = query.size(1) // value.size(1)
    v = value.repeat_interleave(groups, dim=1) if groups != 1 else value
    # P as torch's safe softmax (0 on rows masked everywhere, as exp(S - lse) there), not from
    # lse: the form `egraph/attention.py` fuses, so an inference graph that takes this path (a
    # decode step: symbolic shapes, the KV cache) gets the fused kernel, its lse left unused;
    # the backward recomputes its own P from lse (`flash_attention_for_cpu_backward`)
    with _recomputed():
        p = aten._safe_softmax.default(s, -1)
    out = torch.matmul(p, v.to(s.dtype)).to(query.dtype)
    # the kernel's layouts: out (N, H, L, E) contiguous after a (N, L, H, E) allocation, lse (N, L, H)
    out = out.transpose(1, 2).contiguous().transpose(1, 2)
    return out, lse


def flash_attention_for_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *,
                                     attn_mask=None, scale=None):
    torch._check(dropout_p == 0.0, lambda: f"flash attention for cpu with dropout {dropout_p} is not decomposed")
    s = _scores(query, key, is_causal, attn_mask, scale)
    p = _probabilities(s, logsumexp.to(s.dtype))
    acc = s.dtype
    groups = query.size(1) // key.size(1)
    k = key.repeat_interleave(groups, dim=1) if groups != 1 else key
    v = value.repeat_interleave(groups, dim=1) if groups != 1 else value
    do, o = grad_out.to(acc), out.to(acc)
    dv = torch.matmul(p.transpose(-2, -1), do)
    dp = torch.matmul(do, v.to(acc).transpose(-2, -1))
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    dq = torch.matmul(ds, k.to(acc)) * scale
    dk = torch.matmul(ds.transpose(-2, -1), query.to(acc)) * scale
    if groups != 1:  # the repeated heads' gradients summed back onto their key/value head
        n, h, sk, e = dk.shape
        dk = dk.view(n, h // groups, groups, sk, e).sum(2)
        dv = dv.view(n, h // groups, groups, sk, dv.size(-1)).sum(2)
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)
