"""Tiny random-weight Hugging Face models built offline from configs (hidden 64, 2 layers).

After shared/reference/hf_tiny_models.py (transformers 5.x, torch 2.13). MoE models run
transformers' default experts (sort + histc + `transformers::grouped_mm_fallback`, no graph
break); `moe_impl="batched_mm"` (topk + index + bmm) or "eager" (a loop that breaks the graph)
picks another.
"""

from __future__ import annotations

import torch

V = 256
COMMON = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
DECODERS = ["llama", "qwen3", "mistral", "phi3", "gemma3", "mixtral", "qwen2_moe", "qwen3_moe", "gpt2"]
ALL = DECODERS + ["bert", "modernbert", "t5", "vit"]
MOE = ["mixtral", "qwen2_moe", "qwen3_moe"]  # at transformers' default experts (grouped_mm)


def make(name: str, attn: str = "sdpa", seed: int = 0, moe_impl: str | None = None, layers: int = 2) -> torch.nn.Module:
    import transformers as T

    torch.manual_seed(seed)
    common = dict(COMMON, num_hidden_layers=layers)
    kw = dict(attn_implementation=attn)
    moe = {} if moe_impl is None else dict(experts_implementation=moe_impl)
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


# --- vision-language models: a tiny vision tower (32x32 images, patch 8) + a tiny text decoder ---
VLMS = ["gemma3_mm", "llava", "paligemma", "qwen2_vl", "qwen2_5_vl", "idefics3"]
IMAGE_TOKEN = V - 1  # the placeholder token the image features replace
_TEXT = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=32,
               patch_size=8)
# image placeholder tokens per image: Gemma 3 pools 16 patches to 4, Idefics3's pixel shuffle
# merges 2x2, Qwen2-VL and Qwen2.5-VL merge 2x2 of a 4x4 grid; LLaVA and PaliGemma keep all 16
IMAGE_TOKENS = {"gemma3_mm": 4, "llava": 16, "paligemma": 16, "qwen2_vl": 4, "qwen2_5_vl": 4, "idefics3": 4}


def make_vlm(name: str, seed: int = 0, attn: str = "sdpa") -> torch.nn.Module:
    """A tiny random-weight vision-language model (no downloads), in eval mode."""
    import transformers as T

    torch.manual_seed(seed)
    kw = dict(attn_implementation=attn)
    if name == "gemma3_mm":
        cfg = T.Gemma3Config(text_config=dict(_TEXT, head_dim=16, sliding_window=16), vision_config=_VISION,
                             mm_tokens_per_image=4, image_token_index=IMAGE_TOKEN, boi_token_index=V - 2,
                             eoi_token_index=V - 3, **kw)
        return T.Gemma3ForConditionalGeneration(cfg).eval()
    if name == "llava":
        vision = T.CLIPVisionConfig(**_VISION)
        cfg = T.LlavaConfig(vision_config=vision, text_config=T.LlamaConfig(**_TEXT), image_token_index=IMAGE_TOKEN,
                            image_seq_length=16, vision_feature_layer=-1, **kw)
        return T.LlavaForConditionalGeneration(cfg).eval()
    if name == "paligemma":
        text = T.GemmaConfig(**_TEXT, head_dim=16)
        cfg = T.PaliGemmaConfig(vision_config=T.SiglipVisionConfig(**_VISION), text_config=text,
                                image_token_index=IMAGE_TOKEN, vocab_size=V, projection_dim=64, hidden_size=64, **kw)
        return T.PaliGemmaForConditionalGeneration(cfg).eval()
    if name == "qwen2_vl":  # 3-D (multimodal) RoPE: sections of head_dim/2 = 8 for (t, h, w)
        text = dict(_TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3]))
        vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=8, spatial_merge_size=2,
                      temporal_patch_size=2)
        cfg = T.Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN,
                              video_token_id=V - 2, vision_start_token_id=V - 3, vision_end_token_id=V - 4, **kw)
        return T.Qwen2VLForConditionalGeneration(cfg).eval()
    if name == "qwen2_5_vl":  # + window attention: block 0 attends within windows of 2x2 patches
        # (window_size 16 px = one merged unit), block 1 (fullatt_block_indexes) over the whole image
        text = dict(_TEXT, rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3]))
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, out_hidden_size=64, num_heads=2, patch_size=8,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=16, fullatt_block_indexes=[1])
        cfg = T.Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN,
                                 video_token_id=V - 2, vision_start_token_id=V - 3, vision_end_token_id=V - 4, **kw)
        return T.Qwen2_5_VLForConditionalGeneration(cfg).eval()
    if name == "idefics3":
        cfg = T.Idefics3Config(vision_config=T.Idefics3VisionConfig(**_VISION), text_config=T.LlamaConfig(**_TEXT),
                               image_token_id=IMAGE_TOKEN, scale_factor=2, **kw)
        return T.Idefics3ForConditionalGeneration(cfg).eval()
    raise KeyError(name)


def vlm_example(name: str, T_text: int = 6) -> dict:
    """input_ids with one image's placeholder tokens after a text prefix, and the image inputs."""
    g = torch.Generator().manual_seed(1)
    n = IMAGE_TOKENS[name]
    text = torch.randint(0, V - 8, (1, T_text), generator=g)
    ids = torch.cat([text[:, :2], torch.full((1, n), IMAGE_TOKEN), text[:, 2:]], 1)
    image = torch.randn(1, 3, 32, 32, generator=g)
    kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
    if name in ("qwen2_vl", "qwen2_5_vl"):  # patches flattened (grid t*h*w, C * temporal * 8 * 8), as its processor does
        patches = image.repeat(2, 1, 1, 1).reshape(1, 2, 3, 4, 8, 4, 8).permute(0, 3, 5, 2, 1, 4, 6)
        kw.update(pixel_values=patches.reshape(16, 3 * 2 * 8 * 8), image_grid_thw=torch.tensor([[1, 4, 4]]))
        # the merge (2x2) reorders the 4x4 grid into blocks; the processor does it on the patches
        kw["pixel_values"] = kw["pixel_values"].reshape(2, 2, 2, 2, -1).permute(0, 2, 1, 3, 4).reshape(16, -1)
        kw["mm_token_type_ids"] = ids.eq(IMAGE_TOKEN).int()  # 1 marks an image token (for the 3-D RoPE)
    elif name == "idefics3":
        kw["pixel_values"] = image.unsqueeze(1)  # (batch, images, C, H, W)
    elif name == "paligemma":
        kw["pixel_values"] = image
        kw["token_type_ids"] = torch.cat([torch.zeros_like(ids[:, :-1]), torch.ones_like(ids[:, -1:])], 1)
    else:
        kw["pixel_values"] = image
    return kw
