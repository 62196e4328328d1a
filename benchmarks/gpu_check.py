"""The GPU check: one command, no arguments, self-checking (under 5 minutes on an H200).

    python benchmarks/gpu_check.py                        # on the GPU machine: device "cuda"
    python benchmarks/gpu_check.py --device cuda-emulator # here: the same logic, tiny models, CPU
    python benchmarks/gpu_check.py --prepare              # CPU machine with egglog: compile + save

1. Checks: every model saved under `benchmarks/gpu_models/` (the torch zoo, tiny Llama, Qwen3,
   GPT-2, BERT, MiniLM) is loaded with `luminal.load(path, device)` and run; its outputs must
   match the NumPy runtime's (saved by `--prepare`). Each model runs three times: eager, CUDA
   graph capture, replay; the runtime's graph counters must say one capture and one replay. On
   "cuda" one model also goes through torch tensors (DLPack in and out, torch's stream).
2. Timing: a Llama-shaped model (hidden 2048, 16 layers, ffn 5632, vocab 32000; f32 and bf16;
   random weights regenerated from seeds) for prefill (512 tokens) and a decode step (one token
   against a 512-token KV cache), side by side in this process: luminal, PyTorch eager and
   `torch.compile` (inductor; "reduce-overhead", i.e. CUDA graphs, for decode, as luminal replays
   a CUDA graph per step). Median latency, tokens/s, and for decode the achieved memory
   bandwidth (weights + KV cache read once) against the H200's ~4.3 TB/s. On the emulator the
   same code times the tiny version against eager on the CPU.
The saved models carry sm_90 cubins built by `--prepare`, so the H200 runs no NVRTC; another GPU
compiles `kernels.cu` through CuPy instead. Inductor is skipped once less than 90 s of `--budget`
(270 s) are left, so the whole run stays under 5 minutes.
Writes `gpu_check.json` (into $OUT when set, else the current directory), prints a table, and
exits 1 if any check failed. Needs numpy, sympy, ml_dtypes, safetensors, cupy (and torch for the
timing); not egglog, transformers or onnx.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
H200_BANDWIDTH = 4.3e12  # B/s: the H200 bandwidth the issue measures against (HBM3e peak is 4.8 TB/s)
NEEDED = {"numpy": "numpy", "sympy": "sympy", "ml_dtypes": "ml_dtypes", "safetensors": "safetensors"}


def missing_packages(device: str) -> list[str]:
    import importlib.util

    need = dict(NEEDED, **({"cupy": "cupy-cuda13x"} if device == "cuda" else {}))
    return [pip for mod, pip in need.items() if importlib.util.find_spec(mod) is None]


def tolerance(name: str, dtype) -> tuple[float, float]:
    import numpy as np

    if np.dtype(dtype).kind not in "fc" and str(dtype) != "bfloat16":
        return 0.0, 0.0
    if str(dtype) in ("bfloat16", "float16"):
        return 2e-2, 2e-2
    return 1e-4, 1e-4  # f32: another summation order than NumPy's (and CUDA's fast intrinsics)


def check_model(entry: dict, device: str, models: Path) -> dict:
    import numpy as np

    import luminal
    from luminal.kernels.runtime import KernelRuntime

    row = {"model": entry["name"], "ok": False}
    t0 = time.perf_counter()
    loaded = None
    try:
        loaded = luminal.load(models / entry["file"], device=device)
        row["load_s"] = round(time.perf_counter() - t0, 3)
        data = np.load(models / entry["file"].replace(".lum", ".npz"))
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        want = [data[f"out:{n}"] for n in loaded.output_names]
        errors = []
        for attempt in ("eager", "capture", "replay"):
            got = loaded(feeds)
            for name, g, w in zip(loaded.output_names, got, want):
                if g.shape != w.shape or g.dtype != w.dtype:
                    errors.append(f"{attempt} {name}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}")
                    continue
                rtol, atol = tolerance(name, w.dtype)
                g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
                err = float(np.nanmax(np.abs(g64 - w64))) if g.size else 0.0
                row["max_err"] = max(row.get("max_err", 0.0), 0.0 if np.isnan(err) else err)
                if not np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
                    errors.append(f"{attempt} {name}: max error {err:.3g}")
        rt = loaded.runtime
        if isinstance(rt, KernelRuntime):
            stats = rt.graph_cache.stats()
            row["graphs"] = stats
            if rt.graphs_enabled and rt.plan.launches and (stats["captures"], stats["replays"]) != (1, 2):
                errors.append(f"CUDA graphs: expected 1 capture and 2 replays, got {stats}")
            row["kernels"] = len({k.name for k in rt.plan.launches})
            row["launches"] = len(rt.plan.launches)
        row["ok"] = not errors
        if errors:
            row["errors"] = errors[:5]
    except Exception as exc:  # one broken model must not hide the others
        row["errors"] = [f"{type(exc).__name__}: {exc}"[:500], traceback.format_exc(limit=3)[-800:]]
    module = getattr(getattr(getattr(loaded, "runtime", None), "launcher", None), "module", None)
    if hasattr(module, "release"):  # the emulator: its fiber stacks would add up over 130 libraries
        module.release()
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row


def check_torch_exchange(models: Path, device: str) -> dict:
    """A torch CUDA tensor in, torch CUDA tensors out (DLPack, no host copy), on torch's stream."""
    import numpy as np
    import torch

    import luminal

    row = {"model": "llama (torch tensors, DLPack)", "ok": False}
    try:
        loaded = luminal.load(models / "llama.lum", device=device)
        data = np.load(models / "llama.npz")
        ids = torch.from_numpy(data["in:input_ids"]).to("cuda" if device == "cuda" else "cpu")
        s = torch.cuda.Stream() if device == "cuda" else None
        outs = []
        for _ in range(3):
            if s is not None:
                with torch.cuda.stream(s):
                    outs.append(loaded(input_ids=ids)[0])
            else:
                outs.append(loaded(input_ids=ids)[0])
        if s is not None:
            s.synchronize()
        want = data[f"out:{loaded.output_names[0]}"]
        got = outs[-1]
        row["output_type"] = f"{type(got).__module__}.{type(got).__name__} on {getattr(got, 'device', 'host')}"
        ok_type = isinstance(got, torch.Tensor) and (device != "cuda" or got.is_cuda)
        err = max(float(np.abs(o.float().cpu().numpy() - want).max()) for o in outs)
        row["max_err"] = err
        row["ok"] = ok_type and err < 1e-4
        if not row["ok"]:
            row["errors"] = [f"type ok: {ok_type}, max error {err:.3g}"]
    except Exception as exc:
        row["errors"] = [f"{type(exc).__name__}: {exc}"[:500]]
    return row


def _median_s(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_llama(entry_prefill: dict, entry_decode: dict, device: str, models: Path, inductor: bool, repeats: int,
               deadline: float = float("inf")) -> list[dict]:
    """luminal vs eager vs inductor on the Llama-shaped model, prefill and decode, one dtype."""
    rows, kept = [], []  # the prefill's weights stay alive, so loading the decode graph reuses them
    for entry in (entry_prefill, entry_decode):
        cfg = entry["config"]
        row = {"model": f"llama{cfg['layers']}x{cfg['hidden']} {entry['dtype']} {entry['mode']}", "dtype": entry["dtype"],
               "mode": entry["mode"], "ok": False}
        try:
            late = time.perf_counter() > deadline  # keep the whole check inside its 5 minutes
            if inductor and late:
                row["inductor_error"] = "skipped: the time budget (--budget) is spent"
            kept.append(_time_one(entry, row, device, models, inductor and not late, repeats))
        except Exception as exc:
            row["errors"] = [f"{type(exc).__name__}: {exc}"[:500], traceback.format_exc(limit=4)[-1000:]]
        rows.append(row)
        if device == "cuda":
            import torch

            torch.cuda.empty_cache()
    return rows


def _time_one(entry: dict, row: dict, device: str, models: Path, inductor: bool, repeats: int) -> dict:
    import numpy as np
    import torch

    import luminal
    from benchmarks.gpu_models import torch_llama
    from luminal.hlir.ops import ConstantArray, Op, toposort

    cfg, dtype, mode = entry["config"], entry["dtype"], entry["mode"]
    tdev = "cuda" if device == "cuda" else "cpu"
    tdtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    sync = torch.cuda.synchronize if tdev == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    lum = luminal.load(models / entry["file"], device=device)  # seeded weights regenerated here
    row["luminal_load_s"] = round(time.perf_counter() - t0, 2)
    consts = {n.arg.name: n.arg.array for n in toposort(lum.outputs) if n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray)}
    weight_bytes = sum(a.nbytes for a in consts.values())
    tw = {}
    for k, a in consts.items():  # torch gets the very weights luminal runs (read-only arrays: copied by .to/.clone)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype.name == "bfloat16" else torch.from_numpy(a)
        tw[k] = t.to(tdev) if tdev == "cuda" else t.clone()
    model = torch_llama(cfg, tw, mode)
    g = torch.Generator().manual_seed(0)
    n_tok = cfg["prefill"] if mode == "prefill" else 1
    ids = torch.randint(0, cfg["vocab"], (1, n_tok), generator=g).to(tdev)
    hd = cfg["hidden"] // cfg["heads"]
    past = [(torch.randn(1, cfg["heads"], cfg["ctx"], hd, generator=g) * 0.5).to(tdev, tdtype)
            for _ in range(2 * cfg["layers"])] if mode == "decode" else []
    feeds = {"ids": ids, **{f"{kv}{i}": past[2 * i + j] for i in range(len(past) // 2) for j, kv in enumerate("kv")}}
    with torch.no_grad():
        want = model(ids, *past)[0]
        got = lum(feeds)[0]  # torch tensors in, torch tensors out (DLPack on cuda)
        err = float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6))
        row["rel_err_vs_eager"] = err
        bound = 1e-3 if dtype == "f32" else 5e-2
        row["ok"] = err < bound
        if not row["ok"]:
            row["errors"] = [f"luminal vs eager: relative max error {err:.3g} > {bound}"]
        lum(feeds)  # the second call of a binding captures its CUDA graph
        row["luminal_ms"] = 1e3 * _median_s(lambda: lum(feeds), repeats, sync)
        row["eager_ms"] = 1e3 * _median_s(lambda: model(ids, *past), repeats, sync)
        if inductor:
            try:
                t0 = time.perf_counter()
                # decode is launch-bound: inductor gets CUDA graphs too ("reduce-overhead"), as luminal has
                row["inductor_mode"] = "reduce-overhead" if mode == "decode" and tdev == "cuda" else "default"
                compiled = torch.compile(model, mode=None if row["inductor_mode"] == "default" else row["inductor_mode"])
                compiled(ids, *past)
                sync()
                row["inductor_compile_s"] = round(time.perf_counter() - t0, 1)
                row["inductor_ms"] = 1e3 * _median_s(lambda: compiled(ids, *past), repeats, sync)
            except Exception as exc:
                row["inductor_error"] = f"{type(exc).__name__}: {exc}"[:300]
    row["graphs"] = lum.runtime.graph_cache.stats() if hasattr(lum.runtime, "graph_cache") else {}
    for key in ("luminal", "eager", "inductor"):
        if f"{key}_ms" in row:
            row[f"{key}_tok_s"] = n_tok / (row[f"{key}_ms"] / 1e3)
    if mode == "decode":  # every weight and the whole KV cache are read once per step
        row["bytes_per_step"] = weight_bytes + sum(t.numel() * t.element_size() for t in past)
        for key in ("luminal", "eager", "inductor"):
            if f"{key}_ms" in row:
                bw = row["bytes_per_step"] / (row[f"{key}_ms"] / 1e3)
                row[f"{key}_GBps"] = bw / 1e9
                row[f"{key}_of_peak"] = bw / H200_BANDWIDTH
    return consts


def table(checks: list[dict], timings: list[dict]) -> str:
    failed = [c for c in checks if not c["ok"]]
    lines = [f"checks: {len(checks) - len(failed)}/{len(checks)} passed"]
    lines += [f"  FAIL {c['model']}: {'; '.join(c.get('errors', [])[:2])}" for c in failed]
    worst = sorted((c for c in checks if "max_err" in c), key=lambda c: -c["max_err"])[:3]
    lines += [f"  largest error: {c['model']} {c['max_err']:.2e}" for c in worst]
    if timings:
        def f(row, key, fmt="{:.2f}"):
            return fmt.format(row[key]) if key in row else "-"

        lines.append("")
        lines.append(f"{'model':<34} {'luminal ms':>11} {'eager ms':>9} {'inductor ms':>12} {'luminal tok/s':>14} "
                     f"{'eager tok/s':>12} {'inductor tok/s':>15} {'luminal GB/s':>13} {'of peak':>8} {'ok':>3}")
        for r in timings:
            lines.append(f"{r['model']:<34} {f(r, 'luminal_ms'):>11} {f(r, 'eager_ms'):>9} {f(r, 'inductor_ms'):>12} "
                         f"{f(r, 'luminal_tok_s', '{:.0f}'):>14} {f(r, 'eager_tok_s', '{:.0f}'):>12} "
                         f"{f(r, 'inductor_tok_s', '{:.0f}'):>15} {f(r, 'luminal_GBps', '{:.0f}'):>13} "
                         f"{f(r, 'luminal_of_peak', '{:.0%}'):>8} {'yes' if r['ok'] else 'NO':>3}")
            if not r["ok"]:
                lines.append(f"    {'; '.join(r.get('errors', [])[:1])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cuda-emulator"))
    parser.add_argument("--prepare", action="store_true", help="compile and save the models (CPU machine, egglog)")
    parser.add_argument("--models", default=None, help="folder of saved models (default benchmarks/gpu_models)")
    parser.add_argument("--limit", type=int, default=None, help="check at most this many zoo models")
    parser.add_argument("--only", default=None, help="comma-separated names of the non-zoo models to check")
    parser.add_argument("--dtypes", default="f32,bf16", help="dtypes of the timed model")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--budget", type=float, default=270, help="seconds; inductor is skipped once less than 90 are left")
    parser.add_argument("--inductor", action="store_true", help="time inductor on the emulator too (slow on a CPU)")
    parser.add_argument("--out", default=None, help="where gpu_check.json goes (default $OUT or .)")
    opts = parser.parse_args(argv)
    if opts.prepare:
        from benchmarks.gpu_models import prepare

        entries = prepare(opts.limit, opts.only.split(",") if opts.only else None)
        print(f"saved {len(entries)} models to benchmarks/gpu_models")
        return 0
    missing = missing_packages(opts.device)
    if missing:
        print(f"gpu_check needs: pip install {' '.join(missing)}", file=sys.stderr)
        return 2
    from benchmarks.gpu_models import MODELS

    models = Path(opts.models) if opts.models else MODELS
    manifest_path = models / "manifest.json"
    if not manifest_path.exists():
        print(f"no {manifest_path}: run `python benchmarks/gpu_check.py --prepare` on a machine with egglog first",
              file=sys.stderr)
        return 2
    manifest = json.loads(manifest_path.read_text())
    started = time.perf_counter()
    big = opts.device == "cuda"
    checked = [e for e in manifest["models"] if e["kind"] == "checked"]
    zoo = [e for e in checked if e["name"].startswith("zoo_")]
    others = [e for e in checked if not e["name"].startswith("zoo_")]
    if opts.only is not None:
        others = [e for e in others if e["name"] in opts.only.split(",")]
    n_zoo = len(zoo) if opts.limit is None else min(len(zoo), opts.limit)
    print(f"gpu_check on {opts.device}: {len(others) + n_zoo} models to check", flush=True)
    checks = []

    def run_checks(entries):
        for entry in entries:
            checks.append(check_model(entry, opts.device, models))
            c = checks[-1]
            print(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['model']:<40} {c['seconds']:6.2f} s  max err {c.get('max_err', 0):.1e}",
                  flush=True)

    phases = {}
    run_checks(others)  # the Hugging Face models first, then the timing, then the zoo
    phases["hf_checks_s"] = round(time.perf_counter() - started, 1)
    torch_ok = True
    try:
        import torch  # noqa: F401
    except ImportError:
        torch_ok = False
    if torch_ok and (models / "llama.lum").exists():
        checks.append(check_torch_exchange(models, opts.device))
        print(f"  {'ok  ' if checks[-1]['ok'] else 'FAIL'} {checks[-1]['model']}", flush=True)
    timings = []
    if not opts.no_timing and torch_ok:
        size = "big" if big else "tiny"
        for dtype in opts.dtypes.split(","):
            pair = {e["mode"]: e for e in manifest["models"] if e["kind"] == "timed" and e["size"] == size and e["dtype"] == dtype}
            if len(pair) == 2:
                print(f"  timing llama {size} {dtype} ...", flush=True)
                timings += time_llama(pair["prefill"], pair["decode"], opts.device, models,
                                      inductor=big or opts.inductor, repeats=20 if big else 3,
                                      deadline=started + opts.budget - 90)
    elif not torch_ok:
        print("  timing skipped: torch is not importable", flush=True)
    phases["timing_s"] = round(time.perf_counter() - started - sum(phases.values()), 1)
    run_checks(zoo if opts.limit is None else zoo[: opts.limit])
    phases["zoo_checks_s"] = round(time.perf_counter() - started - sum(phases.values()), 1)
    elapsed = time.perf_counter() - started
    result = {"device": opts.device, "elapsed_s": round(elapsed, 1), "phases": phases, "checks": checks, "timings": timings,
              "environment": environment(opts.device), "manifest": {k: v for k, v in manifest.items() if k != "models"}}
    out_dir = Path(opts.out or os.environ.get("OUT") or ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    print()
    print(table(checks, timings))
    print(f"\nwrote {out_dir / 'gpu_check.json'} in {elapsed:.0f} s")
    ok = all(c["ok"] for c in checks) and all(t["ok"] for t in timings)
    return 0 if ok else 1


def environment(device: str) -> dict:
    import numpy

    env = {"python": platform.python_version(), "platform": platform.platform(), "numpy": numpy.__version__}
    try:
        import torch

        env["torch"] = torch.__version__
        if device == "cuda":
            env["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    if device == "cuda":
        import cupy

        env["cupy"] = cupy.__version__
        env["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    return env


if __name__ == "__main__":
    sys.exit(main())
