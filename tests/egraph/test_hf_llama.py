"""The tiny Hugging Face Llama (config as in shared/reference/hf_tiny_models.py) through the
torch.export frontend: the fusions fire on the frontend's graph, and the optimized f32 output
is at least as close to a float64 run of the same model as PyTorch's own f32 eager output."""

from __future__ import annotations

import copy

import pytest
import torch

import luminal

transformers = pytest.importorskip("transformers")


def tiny_llama(layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(cfg).eval()


def test_hf_llama_fused_and_precise():
    model = tiny_llama(2)
    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    kw = {"input_ids": ids, "use_cache": False}
    with torch.no_grad():
        eager = model(**kw).logits
        ref = copy.deepcopy(model).double()(**kw).logits
    cm = luminal.compile(model, (), kw)
    out = cm(**kw).logits
    rep = cm.report()
    after = rep.ops_after
    for kind in ("Softmax", "MatMul", "KahanSum", "FusedElementwise"):
        assert after.get(kind, 0) > 0, kind
    assert after.get("Exp2", 0) == 0
    assert rep.rules_fired.get("exp2(x*LOG2E) = Exp(x)", 0) > 0
    assert rep.rules_fired.get("recip(1+exp(-x)) = Sigmoid(x)", 0) > 0
    err_lum = (out.double() - ref).abs().max().item()
    err_eager = (eager.double() - ref).abs().max().item()
    print(f"\nHF tiny Llama (2 layers), max |x - float64|: luminal {err_lum:.3e}, torch f32 eager {err_eager:.3e}")
    assert err_lum <= err_eager
    torch.testing.assert_close(out, eager, atol=1e-5, rtol=1e-5)
