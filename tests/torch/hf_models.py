"""Tiny random-weight Hugging Face models built offline from configs (hidden 64, 2 layers).

After shared/reference/hf_tiny_models.py (transformers 5.x, torch 2.13). MoE models use
`experts_implementation="batched_mm"` (pure ATen: topk + index + bmm, no graph break).
"""

from __future__ import annotations

import torch

V = 256
COMMON = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
DECODERS = ["llama", "qwen3", "mistral", "phi3", "gemma3", "mixtral", "qwen2_moe", "qwen3_moe", "gpt2"]
ALL = DECODERS + ["bert", "modernbert", "t5", "vit"]


def make(name: str, attn: str = "sdpa", seed: int = 0, moe_impl: str = "batched_mm", layers: int = 2) -> torch.nn.Module:
    import transformers as T

    torch.manual_seed(seed)
    common = dict(COMMON, num_hidden_layers=layers)
    kw = dict(attn_implementation=attn)
    moe = dict(experts_implementation=moe_impl)
    cfgs = {
        "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**common, **kw)),
        "qwen3": lambda: T.Qwen3ForCausalLM(T.Qwen3Config(**common, head_dim=16, **kw)),
        "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**common, sliding_window=None, **kw)),
        "phi3": lambda: T.Phi3ForCausalLM(T.Phi3Config(**common, pad_token_id=0, **kw)),
        "gemma3": lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(**common, head_dim=16, sliding_window=16, **kw)),
        "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2, **kw, **moe)),
        "qwen2_moe": lambda: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
            **common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=64, **kw, **moe)),
        "qwen3_moe": lambda: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
            **common, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, **kw, **moe)),
        "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=V, n_embd=64, n_layer=layers, n_head=4, n_positions=128, **kw)),
        "bert": lambda: T.BertModel(T.BertConfig(vocab_size=V, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                                                 intermediate_size=128, max_position_embeddings=128, **kw)),
        "modernbert": lambda: T.ModernBertModel(T.ModernBertConfig(
            vocab_size=V, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=128, pad_token_id=0, **kw)),
        "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(
            vocab_size=V, d_model=64, d_kv=16, d_ff=128, num_layers=layers, num_heads=4, decoder_start_token_id=0, **kw)),
        "vit": lambda: T.ViTModel(T.ViTConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                                              intermediate_size=128, image_size=32, patch_size=8, **kw)),
    }
    return cfgs[name]().eval()


def example(name: str, B: int = 1, T: int = 8, use_cache: bool | None = False) -> dict:
    g = torch.Generator().manual_seed(1)
    if name == "vit":
        return dict(pixel_values=torch.randn(B, 3, 32, 32, generator=g))
    ids = torch.randint(0, V, (B, T), generator=g)
    if name == "t5":  # an EncoderDecoderCache in the output breaks torch.export: no cache
        return dict(input_ids=ids, decoder_input_ids=ids[:, :4], use_cache=False)
    kw = dict(input_ids=ids)
    if name in DECODERS and use_cache is not None:
        kw["use_cache"] = use_cache
    return kw


def first_output(o):
    return o.logits if getattr(o, "logits", None) is not None else o.last_hidden_state
