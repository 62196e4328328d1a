"""Tiny Hugging Face models (random weights, built offline from configs) exported with
`torch.onnx.export(..., dynamo=True)` and a dynamic sequence dim: luminal matches onnxruntime
(the oracle) at atol 1e-5 for three sequence lengths from one compile.

Exports take seconds each, so the .onnx files are cached in pytest's cache folder, keyed by
the torch / transformers / onnxscript versions.
"""

import importlib.metadata
import importlib.util
import os
import warnings

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
NEEDS = ("torch", "transformers", "onnxscript")
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in NEEDS), reason=f"exporting needs {', '.join(NEEDS)}"
)

import luminal.onnx as lo  # noqa: E402

V = 256
COMMON = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def make(name: str):
    import torch
    import transformers as t

    torch.manual_seed(0)
    kw = dict(attn_implementation="sdpa")
    cfgs = {
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**COMMON, **kw)),
        "qwen3": lambda: t.Qwen3ForCausalLM(t.Qwen3Config(**COMMON, head_dim=16, **kw)),
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(vocab_size=V, n_embd=64, n_layer=2, n_head=4, n_positions=128, **kw)),
        "bert": lambda: t.BertModel(t.BertConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                 intermediate_size=128, max_position_embeddings=128, **kw)),
    }
    return cfgs[name]().eval()


def export(name: str, path):
    import torch

    class FirstOutput(torch.nn.Module):
        """input_ids -> logits (decoders, no KV cache) or last_hidden_state (BERT)."""

        def __init__(self, model, decoder: bool):
            super().__init__()
            self.model, self.decoder = model, decoder

        def forward(self, input_ids):
            out = self.model(input_ids=input_ids, **({"use_cache": False} if self.decoder else {}))
            return out.logits if self.decoder else out.last_hidden_state

    model = FirstOutput(make(name), decoder=name != "bert")
    ids = torch.randint(0, V, (1, 8), generator=torch.Generator().manual_seed(1))
    seq = torch.export.Dim("seq", min=2, max=64)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, (ids,), dynamo=True, dynamic_shapes={"input_ids": {1: seq}},
                                    input_names=["input_ids"], output_names=["out"], verbose=False)
    program.save(str(path))


@pytest.fixture(scope="module")
def export_dir(request):
    key = "luminal_onnx_exports-" + "-".join(f"{m}{importlib.metadata.version(m)}" for m in NEEDS)
    return request.config.cache.mkdir(key.replace("+", "_"))


@pytest.mark.parametrize("name", ["llama", "qwen3", "gpt2", "bert"])
def test_exported_model_matches_onnxruntime(name, export_dir):
    path = export_dir / f"{name}.onnx"
    if not path.exists():
        tmp = export_dir / f"{name}.{os.getpid()}.tmp.onnx"
        export(name, tmp)
        os.replace(tmp, path)  # never leave a half-written model in the cache
    model = lo.compile(path)  # the default pipeline: egglog optimizer on
    assert model.inputs[0].shape[1] == "seq"
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for t in (3, 8, 17):
        ids = np.random.default_rng(t).integers(0, V, (1, t)).astype(np.int64)
        (ref,) = sess.run(None, {"input_ids": ids})
        (out,) = model(ids)
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)
    assert model.compiled.calls == 3  # one compile served every length (no windows: not specialized)
