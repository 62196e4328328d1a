"""Compile time per phase of a Llama-shaped model (hidden 64) at 1..32 layers.

    .venv/bin/python benchmarks/egraph_scaling.py [--layers 1 2 4 8 16 32] [--json PATH]

Every depth is compiled with an empty template cache (so each row includes its own egglog
work; only the egglog import is paid once, in the first row). The egglog phases (encode,
saturate, extract) should not grow with depth: repeated layers share one template. Also
prints the NumPy runtime latency next to PyTorch eager for the same model (seq 32).

    --torch-compile N   also time the first call of torch.compile(model, backend="luminal") on a
                        Hugging Face LlamaForCausalLM with N layers (hidden 64), split into
                        luminal's phases (lowering to ATen and import included) and the rest
                        (Dynamo), next to the first call with backend="eager" (Dynamo alone)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_graph as L  # noqa: E402

from luminal.egraph import pipeline  # noqa: E402

PHASES = ("egglog import", "partition", "encode", "saturate", "extract", "splice", "regions")


def best_of(fn, repeats=10) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(layers: int) -> dict:
    w = L.make_weights(layers)
    t0 = time.perf_counter()
    g = L.build(w)
    frontend = time.perf_counter() - t0
    pipeline._CACHE.clear()
    t0 = time.perf_counter()
    cg = g.compile()
    total = time.perf_counter() - t0
    rep = cg.report()
    ids = np.random.default_rng(0).integers(0, 128, (1, 32))
    luminal_s = best_of(lambda: cg(ids=ids))
    with torch.no_grad():
        torch_s = best_of(lambda: L.torch_forward(w, ids, torch.float32))
    return {"layers": layers, "frontend_s": frontend, "compile_s": total,
            "phases_s": {k: rep.phases.get(k, 0.0) for k in PHASES + ("plan", "runtime") if k in rep.phases},
            "ops_before": sum(rep.ops_before.values()), "ops_after": sum(rep.ops_after.values()),
            "egraph_size": rep.egraph_size, "parts": next((n for n in rep.notes if "distinct" in n), ""),
            "numpy_run_s": luminal_s, "torch_eager_s": torch_s}


def torch_compile_first_call(layers: int) -> dict:
    import transformers

    from luminal.compiler import STATS

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 256, (1, 16))
    pipeline._CACHE.clear()
    torch._dynamo.reset()
    before = len(STATS.compiled)
    with torch.no_grad():
        t0 = time.perf_counter()
        torch.compile(model, backend="luminal")(input_ids=ids, use_cache=False)
        first = time.perf_counter() - t0
    phases = {k: v for g in STATS.compiled[before:] for k, v in g.report().phases.items()}
    torch._dynamo.reset()
    with torch.no_grad():
        t0 = time.perf_counter()
        torch.compile(model, backend="eager")(input_ids=ids, use_cache=False)
        dynamo_alone = time.perf_counter() - t0
    return {"layers": layers, "first_call_s": first, "luminal_phases_s": phases,
            "other_s": first - sum(phases.values()), "eager_backend_first_call_s": dynamo_alone}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent / "results" / "egraph_scaling.json"))
    ap.add_argument("--torch-compile", type=int, metavar="N", default=0)
    args = ap.parse_args(argv)
    rows = [measure(n) for n in args.layers]
    head = f"{'layers':>6} {'build':>7} " + " ".join(f"{p[:9]:>9}" for p in PHASES) + \
        f" {'compile':>8} {'ops':>11} {'e-nodes':>7} {'run ms':>7} {'torch ms':>8}"
    print(head)
    for r in rows:
        ph = " ".join(f"{r['phases_s'].get(p, 0.0) * 1e3:9.1f}" for p in PHASES)
        print(f"{r['layers']:>6} {r['frontend_s'] * 1e3:7.1f} {ph} {r['compile_s'] * 1e3:8.1f} "
              f"{r['ops_before']:>5}->{r['ops_after']:<5} {r['egraph_size']:>7} "
              f"{r['numpy_run_s'] * 1e3:7.2f} {r['torch_eager_s'] * 1e3:8.2f}")
    print("(times in ms; build = the builder frontend; compile = luminal compile incl. all phases)")
    result = {"builder": rows}
    if args.torch_compile:
        tc = result["torch_compile"] = torch_compile_first_call(args.torch_compile)
        ph = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in tc["luminal_phases_s"].items())
        print(f"torch.compile(backend='luminal') first call, {tc['layers']} layers: {tc['first_call_s']:.1f} s "
              f"(luminal: {ph}; the rest, Dynamo: {tc['other_s']:.1f} s); with backend='eager' "
              f"(Dynamo alone): {tc['eager_backend_first_call_s']:.1f} s")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
