"""The GPU check: one command, no arguments, self-checking (under 8 minutes on an H200).

    python benchmarks/gpu_check.py                        # on the GPU machine: device "cuda"
    python benchmarks/gpu_check.py --device cuda-emulator # here: the same logic, tiny models, CPU
    python benchmarks/gpu_check.py --prepare              # CPU machine with egglog: compile + save
    python benchmarks/gpu_check.py --prepare --only bench # only the timed models
    python benchmarks/gpu_check.py --roofline             # any machine with egglog: the 1B plans' H200 roofline

1. Checks: every model saved under `benchmarks/gpu_models/` (the torch zoo, tiny Llama, Qwen3,
   GPT-2, BERT, MiniLM) is loaded with `luminal.load(path, device)` and run; its outputs must
   match the NumPy runtime's (saved by `--prepare`). Each model runs three times: eager, CUDA
   graph capture, replay; the runtime's graph counters must say one capture and one replay. On
   "cuda" one model also goes through torch tensors (DLPack in and out, torch's stream).
2. Timing: a model of Llama-3.2-1B's shapes (hidden 2048, 16 layers, 32 query / 8 KV heads,
   ffn 8192, vocab 128256, tied embeddings; bf16; weights regenerated from seeds: nothing big
   travels) for prefill (512 tokens) and decode (batch 1, 128 greedy steps against a static
   640-position KV cache, everything on the device: the next token by argmax, the cache written
   by `index_copy_`), side by side in this process: luminal, PyTorch eager, and `torch.compile`
   (inductor) in its default mode and "reduce-overhead" (CUDA graphs, as luminal replays one per
   binding). Tokens/s, the achieved bandwidth (weights, and the KV cache for decode, read once
   per call) against the H200's 4.8 TB/s, and luminal's time per kernel class (GEMM,
   elementwise, reduction, other: each launch timed alone, `KernelRuntime.profile`) against its
   roofline prediction (`compiled.roofline(gpu="h200")`). On the emulator the same code times
   the tiny version (f32 and bf16) against eager on the CPU.
The saved models carry sm_90 cubins built by `--prepare` (made here: loaded with trust_binaries=True), so the H200 runs no NVRTC; another GPU
compiles `kernels.cu` through CuPy instead. An inductor mode is skipped once less than 90 s of
`--budget` (420 s) are left, so the whole run stays under 8 minutes.
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
H200_BANDWIDTH = 4.8e12  # B/s: the H200's HBM3e peak (its datasheet), what the issue measures against
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
        loaded = luminal.load(models / entry["file"], device=device, trust_binaries=True)
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
        loaded = luminal.load(models / "llama.lum", device=device, trust_binaries=True)
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


def check_collectives(device: str) -> dict:
    """A graph with a torch.distributed all-reduce on a 1-rank group (NCCL on "cuda", Gloo on the
    emulator): its pieces' torch tensors go to the collective as they are. Compiled without the
    egraph (`optimize=False`: the GPU image has no egglog)."""
    import os
    import socket

    import torch
    import torch.distributed as dist

    from luminal.hlir.dtypes import DType
    from luminal.hlir.ops import Node, Op
    from luminal.runtime import collectives as rc

    row = {"model": f"all_reduce on a 1-rank {'NCCL' if device == 'cuda' else 'Gloo'} group", "ok": False}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)
        x = Node(Op.INPUT, DType.F32, (64, 48), (), "x")
        sent = Node(Op.MUL, DType.F32, x.shape, (x, x))
        c = rc.new_collective("all_reduce", sent, x.shape, dist.group.WORLD.group_name, (("reduce_op", "sum"),))
        out = Node(Op.ADD, DType.F32, x.shape, (c.result, x))
        compiled = rc.compile_outputs([x], [out], None, [c], device=device, optimize=False, name="collectives_check")
        a = torch.randn(64, 48, device="cuda" if device == "cuda" else "cpu")
        got = compiled(x=a)[0]
        err = float((got - (a * a + a)).abs().max())
        row["max_err"] = err
        row["output_type"] = f"{type(got).__name__} on {getattr(got, 'device', 'host')}"
        row["ok"] = isinstance(got, torch.Tensor) and got.device == a.device and err < 1e-5
        if not row["ok"]:
            row["errors"] = [f"output {row['output_type']}, max error {err:.3g}"]
    except Exception as exc:
        row["errors"] = [f"{type(exc).__name__}: {exc}"[:500]]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
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
    """luminal vs eager vs inductor (default and "reduce-overhead") on the Llama-shaped model,
    prefill and a decode loop, one dtype; luminal's measured time per kernel class against roofline()."""
    import torch

    rows = []
    try:
        bench = Bench(entry_prefill, entry_decode, device, models)
    except Exception as exc:
        return [{"model": f"llama {entry_prefill['dtype']}", "mode": "setup", "ok": False,
                 "errors": [f"{type(exc).__name__}: {exc}"[:500], traceback.format_exc(limit=4)[-1000:]]}]
    for mode in ("prefill", "decode"):
        cfg = bench.cfg
        row = {"model": f"llama{cfg['layers']}x{cfg['hidden']} {bench.dtype} {mode}", "dtype": bench.dtype, "mode": mode,
               "ok": False, "luminal_load_s": bench.load_s[mode]}
        try:
            bench.run(mode, row, inductor, repeats, deadline)
        except Exception as exc:
            row["errors"] = [f"{type(exc).__name__}: {exc}"[:500], traceback.format_exc(limit=4)[-1000:]]
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


class Bench:
    """One dtype of the benchmark model: the saved prefill and decode graphs (seeded weights,
    regenerated here), the same model in torch over the very same weights, inputs."""

    def __init__(self, entry_prefill: dict, entry_decode: dict, device: str, models: Path):
        import numpy as np
        import torch

        import luminal
        from benchmarks.gpu_models import torch_llama
        from luminal.hlir.ops import ConstantArray, Op, toposort

        self.cfg, self.dtype, self.device = entry_prefill["config"], entry_prefill["dtype"], device
        self.tdev = "cuda" if device == "cuda" else "cpu"
        self.tdtype = {"f32": torch.float32, "bf16": torch.bfloat16}[self.dtype]
        self.sync = torch.cuda.synchronize if self.tdev == "cuda" else (lambda: None)
        self.lum, self.load_s = {}, {}
        for mode, entry in (("prefill", entry_prefill), ("decode", entry_decode)):
            t0 = time.perf_counter()
            self.lum[mode] = luminal.load(models / entry["file"], device=device, trust_binaries=True)  # seeded weights regenerated here
            self.load_s[mode] = round(time.perf_counter() - t0, 2)
        consts = {n.arg.name: n.arg.array for n in toposort(self.lum["prefill"].outputs)
                  if n.op is Op.CONSTANT and isinstance(n.arg, ConstantArray)}
        self.weight_bytes = sum(a.nbytes for k, a in consts.items() if k != "inv_freq")
        tw = {}
        for k, a in consts.items():  # torch gets the very weights luminal runs (read-only arrays: copied by .to/.clone)
            if k == "inv_freq":
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype.name == "bfloat16" else torch.from_numpy(a)
            tw[k] = t.to(self.tdev) if self.tdev == "cuda" else t.clone()
        self.model = torch_llama(self.cfg, tw, "any")

    # -- inputs --
    def prefill_inputs(self):
        import torch

        g = torch.Generator().manual_seed(0)
        return torch.randint(0, self.cfg["vocab"], (1, self.cfg["prefill"]), generator=g).to(self.tdev)

    def fresh_cache(self):
        """A KV cache as after the prefill: `ctx - steps` positions filled, the rest zeros."""
        import torch

        cfg = self.cfg
        hd, start = cfg["hidden"] // cfg["heads"], cfg["ctx"] - cfg["steps"]
        g = torch.Generator().manual_seed(1)
        caches = []
        for _ in range(2 * cfg["layers"]):
            t = torch.zeros(1, cfg["kv_heads"], cfg["ctx"], hd)
            t[:, :, :start] = torch.randn(1, cfg["kv_heads"], start, hd, generator=g) * 0.5
            caches.append(t.to(self.tdev, self.tdtype))
        ids = torch.randint(0, cfg["vocab"], (1, 1), generator=g).to(self.tdev)
        return ids, torch.tensor([start], dtype=torch.int32, device=self.tdev), caches

    def decode_loop(self, step, steps: int) -> float:
        """Seconds for `steps` greedy decode steps of `step(ids, pos, caches) -> (logits, k0, v0, ...)`
        on a fresh cache; everything stays on the device (next token by argmax, cache writes by index_copy_)."""
        import torch

        ids, pos, caches = self.fresh_cache()
        self.sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(steps):
                out = step(ids, pos, caches)
                ids = out[0][:, -1].argmax(-1, keepdim=True)
                for c, new in zip(caches, out[1:]):
                    c.index_copy_(2, pos.long(), new)
                pos += 1
        self.sync()
        return time.perf_counter() - t0

    def luminal_step(self):
        lum = self.lum["decode"]

        def step(ids, pos, caches):
            return lum({"ids": ids, "pos": pos, **{f"{kv}{i}": caches[2 * i + j] for i in range(len(caches) // 2)
                                                  for j, kv in enumerate("kv")}})
        return step

    def torch_step(self, fn):
        def step(ids, pos, caches):
            return fn(ids, pos, *caches)
        return step

    # -- one mode --
    def run(self, mode: str, row: dict, inductor: bool, repeats: int, deadline: float) -> None:
        import torch

        cfg, sync = self.cfg, self.sync
        lum = self.lum[mode]
        with torch.no_grad():
            if mode == "prefill":
                ids = self.prefill_inputs()
                n_tok = cfg["prefill"]
                want = self.model(ids)[0]
                got = lum({"ids": ids})[0]  # torch tensors in, torch tensors out (DLPack on cuda)
                feeds = {"ids": ids}
                lum(feeds)  # the second call of a binding captures its CUDA graph
                row["luminal_ms"] = 1e3 * _median_s(lambda: lum(feeds), repeats, sync)
                row["eager_ms"] = 1e3 * _median_s(lambda: self.model(ids), repeats, sync)
            else:
                n_tok = cfg["steps"]
                ids, pos, caches = self.fresh_cache()
                want = self.model(ids, pos, *caches)
                got = self.luminal_step()(ids, pos, caches)
                err_kv = max(float((g.float() - w.float()).abs().max()) for g, w in zip(got[1:], want[1:]))
                row["kv_max_err_vs_eager"] = err_kv
                want, got = want[0], got[0]
                feeds = {"ids": ids, "pos": pos, **{f"{kv}{i}": caches[2 * i + j] for i in range(cfg["layers"])
                                                    for j, kv in enumerate("kv")}}
                self.decode_loop(self.luminal_step(), 4)  # warm-up: eager call, capture, replays
                row["luminal_ms"] = 1e3 * self.decode_loop(self.luminal_step(), n_tok) / n_tok
                row["eager_ms"] = 1e3 * self.decode_loop(self.torch_step(self.model), n_tok) / n_tok
            err = float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6))
            row["rel_err_vs_eager"] = err
            bound = 1e-3 if self.dtype == "f32" else 5e-2
            row["ok"] = err < bound
            if not row["ok"]:
                row["errors"] = [f"luminal vs eager: relative max error {err:.3g} > {bound}"]
            if inductor:
                self.time_inductor(mode, row, repeats, deadline)
        self.measure(mode, row, n_tok)
        self.against_roofline(mode, row, feeds)

    def time_inductor(self, mode: str, row: dict, repeats: int, deadline: float) -> None:
        import torch

        cfg, sync = self.cfg, self.sync
        for label, kind in (("inductor", None), ("inductor_ro", "reduce-overhead")):
            if time.perf_counter() > deadline:  # keep the whole check inside its budget
                row[f"{label}_error"] = "skipped: the time budget (--budget) is spent"
                continue
            try:
                torch._dynamo.reset()
                t0 = time.perf_counter()
                compiled = torch.compile(self.model, mode=kind)
                if mode == "prefill":
                    ids = self.prefill_inputs()
                    for _ in range(3):  # reduce-overhead records its CUDA graph on a later call
                        compiled(ids)
                    sync()
                    row[f"{label}_compile_s"] = round(time.perf_counter() - t0, 1)
                    row[f"{label}_ms"] = 1e3 * _median_s(lambda c=compiled, i=ids: c(i), repeats, sync)
                else:
                    self.decode_loop(self.torch_step(compiled), 4)
                    row[f"{label}_compile_s"] = round(time.perf_counter() - t0, 1)
                    row[f"{label}_ms"] = 1e3 * self.decode_loop(self.torch_step(compiled), cfg["steps"]) / cfg["steps"]
            except Exception as exc:
                row[f"{label}_error"] = f"{type(exc).__name__}: {exc}"[:300]
        torch._dynamo.reset()

    def measure(self, mode: str, row: dict, n_tok: int) -> None:
        """tokens/s, and the achieved bandwidth: weights (and for decode the KV cache) read once per call."""
        cfg = self.cfg
        hd = cfg["hidden"] // cfg["heads"]
        cache_bytes = 2 * cfg["layers"] * cfg["kv_heads"] * cfg["ctx"] * hd * (4 if self.dtype == "f32" else 2)
        row["bytes_per_call"] = self.weight_bytes + (cache_bytes if mode == "decode" else 0)
        for key in ("luminal", "eager", "inductor", "inductor_ro"):
            if f"{key}_ms" not in row:
                continue
            per_call_s = row[f"{key}_ms"] / 1e3
            row[f"{key}_tok_s"] = (n_tok if mode == "prefill" else 1) / per_call_s
            row[f"{key}_GBps"] = row["bytes_per_call"] / per_call_s / 1e9
            row[f"{key}_of_peak"] = row["bytes_per_call"] / per_call_s / H200_BANDWIDTH
        best = [row[k] for k in ("inductor_ms", "inductor_ro_ms") if k in row]
        if best:
            row["luminal_vs_inductor_best"] = min(best) / row["luminal_ms"]  # > 1: luminal faster

    def against_roofline(self, mode: str, row: dict, feeds: dict) -> None:
        """luminal's roofline (H200) per kernel class, and the measured time of each launch alone."""
        lum = self.lum[mode]
        summary = lum.roofline_summary(gpu="h200")
        rows = lum.roofline(gpu="h200")
        row["predicted_us"] = summary["predicted_us"]
        row["gemm_share_predicted"] = summary["gemm_share"]
        row["bytes_over_compulsory"] = summary["bytes_over_compulsory"]
        classes = {c: {"predicted_us": v["predicted_us"], "launches": v["launches"]} for c, v in summary["classes"].items()}
        profile = getattr(lum.runtime, "profile", None)
        if profile is not None:
            measured = profile(feeds, repeats=3 if self.device == "cuda" else 1)  # the emulator: the code path, once
            if len(measured) == len(rows):
                for r, m in zip(rows, measured):
                    c = classes[r["class"]]
                    c["measured_us"] = c.get("measured_us", 0.0) + 1e6 * m["seconds"]
                for c in classes.values():
                    c["measured_over_predicted"] = c["measured_us"] / c["predicted_us"] if c["predicted_us"] else None
            else:
                row["profile_error"] = f"{len(measured)} launches profiled, {len(rows)} in the roofline"
        row["classes"] = classes


def table(checks: list[dict], timings: list[dict]) -> str:
    failed = [c for c in checks if not c["ok"]]
    lines = [f"checks: {len(checks) - len(failed)}/{len(checks)} passed"]
    lines += [f"  FAIL {c['model']}: {'; '.join(c.get('errors', [])[:2])}" for c in failed]
    worst = sorted((c for c in checks if "max_err" in c), key=lambda c: -c["max_err"])[:3]
    lines += [f"  largest error: {c['model']} {c['max_err']:.2e}" for c in worst]
    if timings:
        def f(row, key, fmt="{:.2f}"):
            return fmt.format(row[key]) if row.get(key) is not None else "-"

        lines.append("")
        lines.append("per call (prefill: the whole prompt; decode: one token of a greedy loop on the device)")
        lines.append(f"{'model':<30} {'':>9} {'luminal':>9} {'eager':>9} {'inductor':>9} {'ind. r-o':>9}  "
                     f"{'luminal GB/s':>12} {'of 4.8 TB/s':>11} {'vs best ind.':>12} {'ok':>3}")
        for r in timings:
            lines.append(f"{r['model']:<30} {'ms':>9} {f(r, 'luminal_ms'):>9} {f(r, 'eager_ms'):>9} "
                         f"{f(r, 'inductor_ms'):>9} {f(r, 'inductor_ro_ms'):>9}  {f(r, 'luminal_GBps', '{:.0f}'):>12} "
                         f"{f(r, 'luminal_of_peak', '{:.0%}'):>11} {f(r, 'luminal_vs_inductor_best', '{:.2f}x'):>12} "
                         f"{'yes' if r['ok'] else 'NO':>3}")
            lines.append(f"{'':<30} {'tokens/s':>9} {f(r, 'luminal_tok_s', '{:.0f}'):>9} {f(r, 'eager_tok_s', '{:.0f}'):>9} "
                         f"{f(r, 'inductor_tok_s', '{:.0f}'):>9} {f(r, 'inductor_ro_tok_s', '{:.0f}'):>9}")
            if "predicted_us" in r:
                lines.append(f"{'':<30} roofline (H200): {r['predicted_us'] / 1e3:.3f} ms predicted, "
                             f"GEMMs {r['gemm_share_predicted']:.0%}, bytes {r['bytes_over_compulsory']:.2f}x compulsory")
                for c, v in r.get("classes", {}).items():
                    lines.append(f"{'':<32}{c:<12} {v['launches']:>4} launches  predicted {v['predicted_us']:>10.1f} us  "
                                 f"measured {f(v, 'measured_us', '{:.1f}'):>10} us  ({f(v, 'measured_over_predicted', '{:.2f}x')})")
            for key in ("inductor_error", "inductor_ro_error", "profile_error"):
                if key in r:
                    lines.append(f"    {key}: {r[key][:150]}")
            if not r["ok"]:
                lines.append(f"    {'; '.join(r.get('errors', [])[:1])}")
    return "\n".join(lines)


def print_roofline() -> int:
    """The timed 1B models compiled by this tree (placeholder weights: the plan does not depend on
    their values), each plan's H200 roofline summary: bytes against the compulsory bytes, launches."""
    from benchmarks.gpu_models import BIG, build_llama
    from luminal.kernels.roofline import format_summary

    for mode, bindings in (("prefill", {"seq": BIG["prefill"]}), ("decode", {})):
        compiled = build_llama(BIG, "bf16", mode).compile()
        print(f"{mode} ({bindings or 'static'}):")
        print(format_summary(compiled.roofline_summary("h200", bindings), "h200"))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cuda-emulator"))
    parser.add_argument("--prepare", action="store_true", help="compile and save the models (CPU machine, egglog)")
    parser.add_argument("--models", default=None, help="folder of saved models (default benchmarks/gpu_models)")
    parser.add_argument("--limit", type=int, default=None, help="check at most this many zoo models")
    parser.add_argument("--only", default=None, help="comma-separated names of the non-zoo models to check")
    parser.add_argument("--dtypes", default="f32,bf16", help="dtypes of the timed model (the 1B one is bf16 only)")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--budget", type=float, default=420, help="seconds; inductor is skipped once less than 90 are left")
    parser.add_argument("--inductor", action="store_true", help="time inductor on the emulator too (slow on a CPU)")
    parser.add_argument("--out", default=None, help="where gpu_check.json goes (default $OUT or .)")
    parser.add_argument("--roofline", action="store_true",
                        help="print the H200 roofline of the 1B-shaped prefill and decode plans as this tree compiles them")
    opts = parser.parse_args(argv)
    if opts.roofline:
        return print_roofline()
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
    if torch_ok:
        checks.append(check_collectives(opts.device))
        print(f"  {'ok  ' if checks[-1]['ok'] else 'FAIL'} {checks[-1]['model']}", flush=True)
    timings = []
    if not opts.no_timing and torch_ok:
        size = "big" if big else "tiny"
        for dtype in opts.dtypes.split(","):
            pair = {e["mode"]: e for e in manifest["models"] if e["kind"] == "timed" and e["size"] == size and e["dtype"] == dtype}
            if len(pair) == 2:
                print(f"  timing llama {size} {dtype} ...", flush=True)
                timings += time_llama(pair["prefill"], pair["decode"], opts.device, models,
                                      inductor=big or opts.inductor, repeats=10 if big else 3,
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
