"""Compile time per phase of a Llama-shaped model (hidden 64) at 1..32 layers.

    .venv/bin/python benchmarks/egraph_scaling.py [--layers 1 2 4 8 16 32] [--json PATH]

Every depth is compiled with an empty template cache (so each row includes its own egglog
work; only the egglog import is paid once, in the first row). The egglog phases (encode,
saturate, extract) should not grow with depth: repeated layers share one template. Also
prints the NumPy runtime latency next to PyTorch eager for the same model (seq 32).

    --torch-compile N   also time the first call of torch.compile(model, backend="luminal") on a
                        Hugging Face LlamaForCausalLM with N layers (hidden 64), split into
                        luminal's phases (lowering to ATen and import included) and the rest
                        (Dynamo), next to the first call with backend="eager" (Dynamo alone);
                        then again in a second process with the compile cache warm
    --device NAME       the device compiled for (default "cpu"; "numpy" leaves the C build out)

The compile cache (`luminal.compile_cache`) starts empty in a temporary folder: "compile" is a
cold compile; "warm" compiles the same graph again (builder rows: in this process, with the
egglog template cache cleared, so everything comes from the disk cache; torch.compile: in a new
process, as a user's second run would).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_graph as L  # noqa: E402

PHASES = ("egglog import", "partition", "encode", "saturate", "extract", "splice", "regions")


def best_of(fn, repeats=10) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(layers: int, device: str = "cpu") -> dict:
    from luminal.egraph import pipeline
    w = L.make_weights(layers)
    t0 = time.perf_counter()
    g = L.build(w)
    frontend = time.perf_counter() - t0
    pipeline._CACHE.clear()
    t0 = time.perf_counter()
    cg = g.compile(device=device)
    total = time.perf_counter() - t0
    rep = cg.report()
    pipeline._CACHE.clear()
    t0 = time.perf_counter()
    warm = g.compile(device=device)
    warm_s = time.perf_counter() - t0
    ids = np.random.default_rng(0).integers(0, 128, (1, 32))
    luminal_s = best_of(lambda: cg(ids=ids))
    with torch.no_grad():
        torch_s = best_of(lambda: L.torch_forward(w, ids, torch.float32))
    return {"layers": layers, "frontend_s": frontend, "compile_s": total, "warm_compile_s": warm_s,
            "warm_cache": warm.report().cache,
            "phases_s": {k: rep.phases.get(k, 0.0) for k in PHASES + ("plan", "runtime") if k in rep.phases},
            "ops_before": sum(rep.ops_before.values()), "ops_after": sum(rep.ops_after.values()),
            "egraph_size": rep.egraph_size, "parts": next((n for n in rep.notes if "distinct" in n), ""),
            "numpy_run_s": luminal_s, "torch_eager_s": torch_s}


def torch_compile_first_call(layers: int, backend: str = "luminal", device: str = "cpu") -> dict:
    """The first call of torch.compile(model, backend=...) on a Llama of `layers` layers, and for
    luminal the phases its reports list (a fresh process measures everything: imports included)."""
    import transformers

    from luminal.compiler import STATS

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 256, (1, 16))
    torch._dynamo.reset()
    before = len(STATS.compiled)
    options = {"options": {"device": device}} if backend == "luminal" else {}
    with torch.no_grad():
        t0 = time.perf_counter()
        torch.compile(model, backend=backend, **options)(input_ids=ids, use_cache=False)
        first = time.perf_counter() - t0
    phases = {k: v for g in STATS.compiled[before:] for k, v in g.report().phases.items()}
    cache = {k: v for g in STATS.compiled[before:] for k, v in g.report().cache.items()}
    return {"layers": layers, "backend": backend, "device": device, "first_call_s": first, "luminal_phases_s": phases,
            "luminal_s": sum(phases.values()), "cache": cache}


def in_process(layers: int, backend: str, device: str) -> dict:
    """torch_compile_first_call in a new process (the compile cache: this process's folder)."""
    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import egraph_scaling as E; "
            f"print('RESULT', json.dumps(E.torch_compile_first_call({layers}, {backend!r}, {device!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent, env=dict(os.environ))
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT"))[7:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent / "results" / "egraph_scaling.json"))
    ap.add_argument("--torch-compile", type=int, metavar="N", default=0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    if "LUMINAL_CACHE_DIR" not in os.environ:  # cold: an empty compile cache (and native build cache)
        os.environ["LUMINAL_CACHE_DIR"] = tempfile.mkdtemp(prefix="luminal-bench-cache-")
    os.environ["LUMINAL_COMPILE_CACHE"] = "1"
    rows = [measure(n, args.device) for n in args.layers]
    head = f"{'layers':>6} {'build':>7} " + " ".join(f"{p[:9]:>9}" for p in PHASES) + \
        f" {'compile':>8} {'warm':>7} {'ops':>11} {'e-nodes':>7} {'run ms':>7} {'torch ms':>8}"
    print(head)
    for r in rows:
        ph = " ".join(f"{r['phases_s'].get(p, 0.0) * 1e3:9.1f}" for p in PHASES)
        print(f"{r['layers']:>6} {r['frontend_s'] * 1e3:7.1f} {ph} {r['compile_s'] * 1e3:8.1f} "
              f"{r['warm_compile_s'] * 1e3:7.1f} "
              f"{r['ops_before']:>5}->{r['ops_after']:<5} {r['egraph_size']:>7} "
              f"{r['numpy_run_s'] * 1e3:7.2f} {r['torch_eager_s'] * 1e3:8.2f}")
    print(f"(times in ms, device {args.device}; build = the builder frontend; compile = luminal compile incl. all "
          "phases, compile cache cold; warm = the same compile again, from the compile cache)")
    result = {"device": args.device, "builder": rows}
    if args.torch_compile:  # each in a fresh process: Dynamo's and egglog's imports counted alike
        n = args.torch_compile
        eager = result["torch_compile_eager"] = in_process(n, "eager", args.device)
        print(f"torch.compile first call, {n} layers, each in a new process: backend='eager' (Dynamo alone) "
              f"{eager['first_call_s']:.2f} s")
        for label in ("cold", "warm"):  # the second finds what the first stored
            tc = result[f"torch_compile_{label}"] = in_process(n, "luminal", args.device)
            ph = ", ".join(f"{k} {v * 1e3:.0f}" for k, v in tc["luminal_phases_s"].items())
            print(f"  backend='luminal', compile cache {label}: {tc['first_call_s']:.2f} s "
                  f"(x{tc['first_call_s'] / eager['first_call_s']:.2f} eager; luminal's phases {tc['luminal_s']:.2f} s: "
                  f"{ph} ms; cache {tc['cache']})")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
