"""Saved models and the GPU check, proven on the CPU: a tiny Llama compiled through
`luminal.compile` round-trips through `.save()` on "cpu" and "cuda-emulator", and
`benchmarks/gpu_check.py` runs end to end with the emulator as the device."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import luminal

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "benchmarks" / "gpu_models"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, use_cache=False)).eval()
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cm = luminal.compile(model, (ids,), dynamic={"input_ids": {1: "seq"}})
    path = cm.save(tmp_path_factory.mktemp("llama") / "llama.lum")
    return model, path


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
def test_saved_tiny_llama_matches_eager(tiny_llama, device):
    import torch

    model, path = tiny_llama
    loaded = luminal.load(path, device=device)
    assert loaded.frontend_meta["frontend"] == "torch.export" and loaded.frontend_meta["user_inputs"] == ["input_ids"]
    for n in (8, 5, 8):  # a second sequence length: the symbolic dim survived saving
        ids = torch.randint(0, 128, (1, n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = model(ids).logits
        out = loaded(ids.numpy())  # the model's own call signature and output type again
        assert type(out).__name__ == "CausalLMOutputWithPast"
        torch.testing.assert_close(out.logits, want, rtol=1e-4, atol=1e-4)
    if device == "cuda-emulator":
        assert loaded.runtime.graph_cache.stats()["captures"] == 1  # seq 8: warm-up, then capture + replay


def test_what_travels_to_the_gpu_is_small():
    if not (MODELS / "manifest.json").exists():
        pytest.skip("benchmarks/gpu_models not prepared (python benchmarks/gpu_check.py --prepare)")
    total = sum(p.stat().st_size for p in MODELS.iterdir())
    assert total < 16 * 2**20, f"benchmarks/gpu_models is {total / 2**20:.1f} MiB"
    manifest = json.loads((MODELS / "manifest.json").read_text())
    names = {e["name"] for e in manifest["models"]}
    assert {"llama", "qwen3", "gpt2", "bert"} <= names
    assert {"bench_big_bf16_decode", "bench_big_bf16_prefill"} <= names
    assert sum(n.startswith("zoo_") for n in names) >= 40


def test_gpu_check_runs_on_the_emulator(tmp_path):
    if not (MODELS / "manifest.json").exists():
        pytest.skip("benchmarks/gpu_models not prepared (python benchmarks/gpu_check.py --prepare)")
    pytest.importorskip("torch")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cuda-emulator", "--limit", "1",
           "--only", "llama", "--dtypes", "bf16", "--out", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(result["checks"]) == 1 + 1 + 1 + 1 and all(c["ok"] for c in result["checks"])
    assert any(c["model"].startswith("all_reduce on a 1-rank Gloo group") for c in result["checks"])
    assert all(c["graphs"]["captures"] == 1 and c["graphs"]["replays"] == 2 for c in result["checks"] if "graphs" in c)
    modes = {t["mode"]: t for t in result["timings"]}
    assert set(modes) == {"prefill", "decode"} and all(t["ok"] for t in modes.values())
    assert modes["decode"]["luminal_GBps"] > 0 and modes["prefill"]["eager_ms"] > 0
    for t in modes.values():  # luminal's roofline per kernel class, each class also measured (KernelRuntime.profile)
        assert t["predicted_us"] > 0 and 0 < t["gemm_share_predicted"] < 1 and "gemm" in t["classes"]
        assert all(c["measured_us"] > 0 for c in t["classes"].values())
    assert "checks: 4/4 passed" in out.stdout


def test_gpu_check_says_what_is_missing(tmp_path):
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('safetensors', 'cupy', 'egglog'):
            raise ImportError('blocked ' + name)
import importlib.util
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name in ('safetensors', 'cupy') else real(name, *a)
sys.argv = ['gpu_check.py', '--out', {str(tmp_path)!r}]
sys.path.insert(0, {str(ROOT / "benchmarks")!r})
import gpu_check
sys.exit(gpu_check.main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "pip install safetensors cupy-cuda13x" in out.stderr


def test_roofline_of_tiny_llama(tiny_llama):
    """`roofline()` from the plan of a saved tiny Llama: every launch a row, its bytes at least
    the weights', the GEMM share stated in the summary and in report()."""
    import torch

    _, path = tiny_llama
    loaded = luminal.load(path, device="cpu")
    loaded(torch.randint(0, 128, (1, 8)).numpy())  # binds "seq" for the roofline
    rows = loaded.roofline(gpu="h200")
    assert len(rows) == len(loaded.kernel_plan().launches) and all(r["predicted_us"] > 0 for r in rows)
    summary = loaded.roofline_summary(gpu="h200")
    weights = sum(n.nbytes for n in (w.arg.array for w in loaded.kernel_plan().weights))
    assert summary["bytes"] >= weights and summary["compulsory_bytes"] >= weights
    assert summary["classes"]["gemm"]["launches"] >= 2 * 7 and 0 < summary["gemm_share"] < 1
    assert summary["predicted_us"] == pytest.approx(sum(r["predicted_us"] for r in rows))
    text = str(loaded.report())
    assert "roofline (h200)" in text and "GEMMs" in text and "compulsory" in text
    from luminal.kernels.roofline import last_bindings

    bound = last_bindings(loaded.runtime)  # the sequence dim's name is Dynamo's ("s70")
    assert list(bound.values()) == [8]
    longer = loaded.roofline_summary(gpu="a100", bindings={k: 64 for k in bound})  # dims given: any length
    assert longer["bytes"] > summary["bytes"] and longer["predicted_us"] > summary["predicted_us"]
