"""The models `benchmarks/gpu_check.py` runs, and `--prepare`, which compiles and saves them.

Two kinds:
- checked models: the torch zoo (`tests/torch/zoo.py`) and tiny Llama, Qwen3, GPT-2, BERT and
  MiniLM, compiled by `luminal.compile` and saved with their weights (they are small); next to
  each `.lum`, an `.npz` holds its inputs and the NumPy runtime's outputs (the reference).
- timed models: a model of Llama-3.2-1B's shapes built with the luminal builder (`build_llama`:
  hidden 2048, 16 layers, 32 query / 8 KV heads, ffn 8192, vocab 128256, tied embeddings), a
  prefill graph and a decode-step graph (one token against a static KV cache given as inputs,
  with its position), bf16 (and f32 at the tiny, emulator-sized config), saved with
  `weights="seeded"` (no weight bytes travel: 1.24B parameters are regenerated from seeds on the
  GPU machine). `torch_llama` is the same model in PyTorch for eager and inductor.

Only `--prepare` (run on a CPU machine with torch, transformers and egglog) needs more than
NumPy: loading and running the saved models needs numpy, sympy, ml_dtypes, safetensors (+ CuPy).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

MODELS = Path(__file__).parent / "gpu_models"
# Llama-3.2-1B's shapes (GQA, tied embeddings, rope theta 500000): 1.24 B parameters, 2.47 GB in bf16
BIG = dict(hidden=2048, heads=32, kv_heads=8, layers=16, ffn=8192, vocab=128256, prefill=512, steps=128, ctx=640,
           theta=500000.0)
TINY = dict(hidden=64, heads=4, kv_heads=2, layers=2, ffn=128, vocab=256, prefill=8, steps=4, ctx=130,
            theta=500000.0)  # the same graphs, emulator-sized (a cache past 128 keys: attention fused, split-K in two chunks)
DTYPES = {"tiny": ("f32", "bf16"), "big": ("bf16",)}
ARCHS = ("sm_90",)  # the H200's: its kernels are built here, so the GPU machine runs NVRTC for nothing else


# --- the Llama-shaped benchmark model, luminal builder -----------------------------------------
def weight_shapes(cfg) -> dict[str, tuple]:
    h, f, hd = cfg["hidden"], cfg["ffn"], cfg["hidden"] // cfg["heads"]
    kv = cfg["kv_heads"] * hd
    shapes = {"embed": (cfg["vocab"], h), "norm": (h,)}  # the LM head is the embedding (tied)
    for i in range(cfg["layers"]):
        shapes.update({f"{i}.wq": (h, h), f"{i}.wk": (kv, h), f"{i}.wv": (kv, h), f"{i}.wo": (h, h),
                       f"{i}.gate": (f, h), f"{i}.up": (f, h), f"{i}.down": (h, f), f"{i}.norm1": (h,), f"{i}.norm2": (h,)})
    return shapes


def weight_stats(cfg) -> dict[str, dict]:
    """Mean and std of each weight (what seeded weights reproduce): norms near 1, linears 1/sqrt(fan_in)."""
    return {n: {"mean": 1.0, "std": 0.1} if len(s) == 1 else {"mean": 0.0, "std": 0.5 if n == "embed" else 1 / np.sqrt(s[1])}
            for n, s in weight_shapes(cfg).items()}


def inv_freq(cfg) -> np.ndarray:
    hd = cfg["hidden"] // cfg["heads"]
    return (1.0 / (cfg["theta"] ** (np.arange(0, hd, 2) / hd))).astype(np.float32)


def build_llama(cfg, dtype: str, mode: str, weights: dict | None = None):
    """The luminal graph of the prefill (`ids` (1, seq) -> logits) or of one decode step against a
    static KV cache: `ids` (1, 1), `pos` (1,) int32 (the tokens already in the cache) and `k{i}`,
    `v{i}` (1, kv_heads, ctx, head_dim), of which the first `pos` positions are valid -> logits,
    and the new token's k and v per layer (the caller writes them at `pos`, on the device).
    Attention is grouped (GQA): each KV head serves heads // kv_heads query heads, without copies
    of k and v per query head; in decode the cache and the new token are concatenated as
    `torch_llama`'s torch.cat does (2% more bytes than the compulsory at ctx 640), so that the
    step's attention is one fused op (split-K on CUDA), not scores, softmax and two products.
    Without `weights`, weights are lazily allocated zeros (placeholders for seeded saving)."""
    import luminal as lm

    dt = {"f32": lm.f32, "bf16": lm.bf16}[dtype]
    h, nh, kvh, layers = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["layers"]
    hd, grp = h // nh, nh // kvh
    if weights is None:
        weights = {n: np.zeros(s, dt.numpy) for n, s in weight_shapes(cfg).items()}  # calloc: untouched pages
    g = lm.Graph(f"llama{layers}-{mode}-{dtype}")
    c = {k: g.constant(v, name=k) for k, v in weights.items()}
    if mode == "prefill":
        ids = g.input("ids", (1, "seq"), lm.int64)
        seq = ids.shape[1]
        pos = g.iota(seq, lm.int32).cast(lm.f32)
    else:
        ids = g.input("ids", (1, 1), lm.int64)
        at = g.input("pos", (1,), lm.int32)
        ctx = cfg["ctx"]
        past = [(g.input(f"k{i}", (1, kvh, ctx, hd), dt), g.input(f"v{i}", (1, kvh, ctx, hd), dt)) for i in range(layers)]
        position = g.iota(ctx + 1, lm.int32).reshape(1, 1, 1, ctx + 1)
        kept = (position < at.reshape(1, 1, 1, 1)).logical_or(position.eq(ctx))  # the valid positions and the new token
        seq = 1
        pos = at.cast(lm.f32)
    freqs = pos.reshape(seq, 1) * g.constant(inv_freq(cfg), name="inv_freq").reshape(1, hd // 2)
    cos, sin = freqs.cos().cast(dt), freqs.sin().cast(dt)

    def rope(t):  # (1, heads, s, hd), rotate-half form
        t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
        return lm.concat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], -1)

    def heads_of(t, n):
        return t.reshape(1, seq, n, hd).permute(0, 2, 1, 3)

    x = c["embed"].index_select(0, ids.flatten()).reshape(1, seq, h)
    outs = []
    scale = 1.0 / np.sqrt(hd)
    for i in range(layers):
        y = x.rms_norm(c[f"{i}.norm1"], eps=1e-5)
        q = rope(heads_of(y.linear(c[f"{i}.wq"]), nh))
        k = rope(heads_of(y.linear(c[f"{i}.wk"]), kvh))
        v = heads_of(y.linear(c[f"{i}.wv"]), kvh)
        qg = q.reshape(1, kvh, grp * seq, hd)  # query head kv * grp + j reads KV head kv (as HF's repeat_kv)
        if mode == "prefill":
            causal = g.ones((seq, seq), lm.bool_).tril().reshape(1, 1, 1, seq, seq)
            scores = (qg.matmul(k.transpose(-1, -2)) * scale).reshape(1, kvh, grp, seq, seq)
            p = lm.where(causal, scores, float("-inf")).softmax(-1).reshape(1, kvh, grp * seq, seq)
            attn = p.matmul(v)
        else:  # the cache and the new token (copied, as torch.cat does), the cache's valid part and the token kept
            pk, pv = past[i]
            keys, values = lm.concat([pk, k], 2), lm.concat([pv, v], 2)
            scores = qg.matmul(keys.transpose(-1, -2)) * scale
            attn = lm.where(kept, scores, float("-inf")).softmax(-1).matmul(values)  # one fused Attention (split-K)
            outs += [(k, f"k{i}_new"), (v, f"v{i}_new")]
        attn = attn.reshape(1, nh, seq, hd).permute(0, 2, 1, 3).reshape(1, seq, h)
        x = x + attn.linear(c[f"{i}.wo"])
        y = x.rms_norm(c[f"{i}.norm2"], eps=1e-5)
        x = x + (y.linear(c[f"{i}.gate"]).silu() * y.linear(c[f"{i}.up"])).linear(c[f"{i}.down"])
    g.output(x.rms_norm(c["norm"], eps=1e-5).linear(c["embed"]), "logits")
    for t, name in outs:
        g.output(t, name)
    return g


def torch_llama(cfg, weights: dict, mode: str):
    """The same model as a torch.nn.Module over `weights` (torch tensors, already on their device):
    prefill `forward(ids)` -> (logits,); decode `forward(ids, pos, *caches)` -> (logits, k0, v0, ...)
    with the caches static (the caller writes the new k and v at `pos`)."""
    import torch
    import torch.nn.functional as F

    h, nh, kvh, layers = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["layers"]
    hd = h // nh

    class Llama(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for k, v in weights.items():
                self.register_buffer(k.replace(".", "_"), v)
            self.register_buffer("inv", torch.from_numpy(inv_freq(cfg)).to(next(iter(weights.values())).device))

        def w(self, name):
            return getattr(self, name.replace(".", "_"))

        def forward(self, ids, pos=None, *past):
            seq = ids.shape[1]
            dt = self.w("embed").dtype
            at = torch.arange(seq, device=ids.device, dtype=torch.float32) if pos is None else pos.float()
            freqs = at[:, None] * self.inv[None, :]
            cos, sin = freqs.cos().to(dt), freqs.sin().to(dt)

            def rope(t):
                t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
                return torch.cat([t1 * cos - t2 * sin, t2 * cos + t1 * sin], -1)

            def heads_of(t, n):
                return t.reshape(1, seq, n, hd).permute(0, 2, 1, 3)

            if past:
                ctx = past[0].shape[2]
                valid = torch.cat([torch.arange(ctx, device=ids.device) < pos, pos.new_ones(1, dtype=torch.bool)]).reshape(1, 1, 1, ctx + 1)
            x = F.embedding(ids, self.w("embed"))
            news = []
            for i in range(layers):
                y = F.rms_norm(x, (h,), self.w(f"{i}.norm1"), eps=1e-5)
                q = rope(heads_of(F.linear(y, self.w(f"{i}.wq")), nh))
                k = rope(heads_of(F.linear(y, self.w(f"{i}.wk")), kvh))
                v = heads_of(F.linear(y, self.w(f"{i}.wv")), kvh)
                if past:
                    keys, values = torch.cat([past[2 * i], k], 2), torch.cat([past[2 * i + 1], v], 2)
                    attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=valid, enable_gqa=True)
                    news += [k, v]
                else:
                    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                x = x + F.linear(attn.permute(0, 2, 1, 3).reshape(1, seq, h), self.w(f"{i}.wo"))
                y = F.rms_norm(x, (h,), self.w(f"{i}.norm2"), eps=1e-5)
                x = x + F.linear(F.silu(F.linear(y, self.w(f"{i}.gate"))) * F.linear(y, self.w(f"{i}.up")), self.w(f"{i}.down"))
            return (F.linear(F.rms_norm(x, (h,), self.w("norm"), eps=1e-5), self.w("embed")), *news)

    return Llama().eval()


def prepare_bench(t0: float) -> list[dict]:
    """Compile and save the timed models (seeded weights; the big ones with sm_90 cubins)."""
    entries = []
    for size, cfg in (("tiny", TINY), ("big", BIG)):
        for dtype in DTYPES[size]:
            for mode in ("prefill", "decode"):
                name = f"bench_{size}_{dtype}_{mode}"
                g = build_llama(cfg, dtype, mode)
                compiled = g.compile()
                compiled.save(MODELS / f"{name}.lum", {"bench": {"size": size, "dtype": dtype, "mode": mode, **cfg}},
                              weights="seeded", weight_specs=weight_stats(cfg), archs=ARCHS if size == "big" else ())
                entries.append({"name": name, "kind": "timed", "file": f"{name}.lum", "size": size, "dtype": dtype,
                                "mode": mode, "config": cfg})
        print(f"  bench {size}: {time.perf_counter() - t0:.0f} s", flush=True)
    return entries


# --- the checked models --------------------------------------------------------------------------
def hf_models() -> dict:
    """Tiny Hugging Face models from configs (random weights), and MiniLM with its real weights."""
    import torch
    import transformers as tf

    def tiny(make):
        torch.manual_seed(0)
        return make().eval()

    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64)
    models = {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, use_cache=False, **common)),
        "qwen3": lambda: tf.Qwen3ForCausalLM(tf.Qwen3Config(num_key_value_heads=2, head_dim=16, use_cache=False, **common)),
        "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                                         use_cache=False)),
        "bert": lambda: tf.BertModel(tf.BertConfig(**common)),
    }
    out = {name: (lambda m=make: tiny(m)) for name, make in models.items()}
    try:
        from benchmarks.models import load_minilm

        load_minilm()  # the package is present
        out["minilm"] = load_minilm
    except (ImportError, FileNotFoundError):
        pass
    return out


def _zoo():
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "torch"))
    import zoo

    return zoo


def _numpy(t):
    from luminal.frontends.torch.fx_import import to_numpy

    return to_numpy(t)


def save_checked(name: str, cm, inputs, weights: str = "embed") -> dict:
    """Save `cm` and its NumPy-runtime reference (computed from the saved file) next to it."""
    import luminal

    path = cm.save(MODELS / f"{name}.lum", weights=weights, archs=ARCHS)
    loaded = luminal.load(path, device="numpy")  # the reference: the NumPy runtime on the file, seeded weights and all
    from torch.utils._pytree import tree_leaves

    flat = tree_leaves(list(inputs))
    graph_names = [cm._rename.get(n, n) for n in cm._user_inputs]  # a user input's name in the graph
    feeds = {n: _numpy(v) for n, v in zip(graph_names, flat) if n in loaded.input_names}
    missing = [n for n in loaded.input_names if n not in feeds]
    if missing:
        raise ValueError(f"graph inputs {missing} are not user inputs (symbolic-size carriers)")
    expected = loaded(feeds)
    np.savez(MODELS / f"{name}.npz", **{f"in:{k}": v for k, v in feeds.items()},
             **{f"out:{k}": v for k, v in zip(loaded.output_names, expected)})
    return {"name": name, "kind": "checked", "file": path.name, "weights": weights}


def prepare(zoo_limit: int | None = None, only: list[str] | None = None) -> list[dict]:
    """Compile and save every model (CPU machine, egglog), or redo just the Hugging Face models
    named in `only`, or with "bench" in `only` the timed models (the manifest's other entries are kept)."""
    import torch

    import luminal

    MODELS.mkdir(exist_ok=True)
    if only is None:
        for old in MODELS.glob("*"):
            old.unlink()
    entries = []
    t0 = time.perf_counter()
    failed = []
    for name, make in hf_models().items():
        if only is not None and name not in only:
            continue
        model = make()
        vocab = 30000 if name == "minilm" else 256
        ids = torch.randint(0, vocab, (1, 12), generator=torch.Generator().manual_seed(1))
        try:
            try:
                with torch.no_grad():  # the sequence length stays symbolic (up to the position table)
                    cm = luminal.compile(model, (ids,), dynamic={"input_ids": {1: torch.export.Dim("seq", max=64)}})
            except luminal.LuminalError as exc:  # e.g. BERT's pooler: fall back to the example's shapes
                print(f"  {name}: static shapes ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
                with torch.no_grad():
                    cm = luminal.compile(model, (ids,))
            entries.append(save_checked(name, cm, (ids,), weights="seeded" if name == "minilm" else "embed"))
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
        print(f"  {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    if only is not None and "bench" in only:
        for old in MODELS.glob("bench_*"):
            old.unlink()
        entries += prepare_bench(t0)
        only = list(only) + [e["name"] for e in json.loads((MODELS / "manifest.json").read_text())["models"]
                             if e["kind"] == "timed"]
    if only is not None:
        manifest = json.loads((MODELS / "manifest.json").read_text())
        manifest["models"] = [e for e in manifest["models"] if e["name"] not in only] + entries
        manifest["not_saved"] = [f for f in manifest["not_saved"] if f.split(":")[0] not in only] + failed
        (MODELS / "manifest.json").write_text(json.dumps(manifest, indent=1))
        return entries
    zoo = _zoo()
    cases = zoo.CASES[:zoo_limit] if zoo_limit else zoo.CASES
    for name, make_model, make_inputs in cases:
        inputs = zoo.case_inputs(name, make_inputs)
        try:
            with torch.no_grad():
                cm = luminal.compile(make_model(), [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            entries.append(save_checked(f"zoo_{name}", cm, inputs))
        except Exception as exc:  # a zoo case the export path cannot save: listed, not fatal
            failed.append(f"{name}: {type(exc).__name__}: {exc}"[:200])
    print(f"  zoo and hf: {len(failed)} not saved, {time.perf_counter() - t0:.0f} s", flush=True)
    entries += prepare_bench(t0)
    manifest = {"models": entries, "not_saved": failed, "prepared": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "torch": torch.__version__, "luminal": luminal.__version__}
    (MODELS / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return entries
