"""CPU latency and compile time, side by side in one process, same inputs and weights.

For each model: PyTorch eager, torch.compile (inductor), onnxruntime on the same model exported
to ONNX, and luminal through `luminal.compile`: `device="cpu"` (the compiled C backend; its
"C build s" is the report's `build` phase: render, C compiler, load) and `device="numpy"` (the
reference runtime) at its default precision and with `luminal.set_precision("float32")` (f32
GEMMs and exps). Medians (eager, luminal and onnxruntime measured in alternating rounds, so
that a change in the machine's load falls on all of them alike), ratios to eager.
"""

from __future__ import annotations

import copy
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from benchmarks.timing import interleaved_medians, median_latency, peak_memory_mb, wait_for_builds


def _first(out):
    if isinstance(out, (tuple, list)):
        return out[0]
    for key in ("logits", "last_hidden_state"):
        v = getattr(out, key, None)
        if v is not None:
            return v
    return out


def _err(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def bench_model(name: str, model, args: tuple, inductor: bool = True, onnx: bool = True,
                search: float | None = None) -> dict:
    """A forward pass without KV cache (prefill-shaped), batch 1. `search`: also luminal with
    `options={"search": search}` (`luminal.search`: the device's variants timed on this machine,
    the fastest that matches the reference kept), timed in the same rounds ("cpu_search")."""
    import luminal

    x = args[0]
    row: dict = {"model": name, "tokens": int(x.shape[-1]) if x.dim() == 2 else "x".join(map(str, x.shape[-2:]))}
    if hasattr(getattr(model, "config", None), "use_cache"):
        model.config.use_cache = False
    with torch.no_grad():
        ref = _first(model(*args)).numpy()
        t0 = time.perf_counter()
        compiled = luminal.compile(model, args, device="cpu")  # the compiled C backend
        wait_for_builds()  # its C library, when it builds in the background: part of its compile here
        row["cpu_compile_s"] = time.perf_counter() - t0
        report = compiled.report()
        row["luminal_phases_s"] = {k: round(v, 4) for k, v in report.phases.items()}
        row["cpu_build_s"] = report.phases.get("build", float("nan")) + report.background.get("build", 0.0)  # C render + cc + load
        row["cpu_max_err"] = _err(_first(compiled(*args)), ref)
        t0 = time.perf_counter()
        reference = luminal.compile(model, args, device="numpy")  # the NumPy reference runtime
        row["numpy_compile_s"] = time.perf_counter() - t0
        row["numpy_max_err"] = _err(_first(reference(*args)), ref)

        def numpy_f32():
            previous = luminal.set_precision("float32")
            try:
                return reference(*args)
            finally:
                luminal.set_precision(previous)

        row["numpy_f32_max_err"] = _err(_first(numpy_f32()), ref)
        session = None
        if onnx:  # built first so that it is timed in the same rounds as eager and luminal
            try:
                session, feed, ort_out = _onnxruntime_session(model, args)
                row["onnxruntime_max_err"] = _err(ort_out, ref)
            except Exception as exc:  # recorded, not hidden: the table says why the column is empty
                row["onnxruntime_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                traceback.print_exc()
        timed = {"eager": lambda: model(*args), "cpu": lambda: compiled(*args),
                 "numpy": lambda: reference(*args), "numpy_f32": numpy_f32}
        if search is not None:
            t0 = time.perf_counter()
            searched = luminal.compile(model, args, device="cpu", options={"search": search})
            wait_for_builds()
            row["cpu_search_compile_s"] = time.perf_counter() - t0
            row["cpu_search_max_err"] = _err(_first(searched(*args)), ref)
            found = searched.report().search or {}
            row["cpu_search_chosen"] = found.get("chosen") or "default"
            row["cpu_search_cached"] = bool(found.get("cached"))
            row["cpu_search_candidates"] = [{k: c.get(k) for k in ("choices", "status", "ms")}
                                            for c in found.get("candidates", [])]
            timed["cpu_search"] = lambda: searched(*args)
        if session is not None:
            timed["onnxruntime"] = lambda: session.run(None, feed)
        medians = interleaved_medians(timed)
        row.update({f"{k}_ms": v * 1e3 for k, v in medians.items()})
        # peak memory of one call above the process's resident size before it (luminal's arena
        # and weights are allocated at compile time: what a call adds is its scratch)
        row["eager_peak_mb"] = peak_memory_mb(lambda: model(*args))
        row["cpu_peak_mb"] = peak_memory_mb(lambda: compiled(*args))
        row["cpu_arena_mb"] = getattr(compiled.compiled.runtime, "arena_bytes", float("nan")) / 2**20  # its intermediates

        if inductor:
            torch._dynamo.reset()
            fast = torch.compile(copy.deepcopy(model))
            t0 = time.perf_counter()
            fast(*args)
            row["inductor_compile_s"] = time.perf_counter() - t0
            row["inductor_ms"] = median_latency(lambda: fast(*args)) * 1e3
    for k in ("cpu", "cpu_search", "numpy", "numpy_f32", "inductor", "onnxruntime"):
        if f"{k}_ms" in row:
            row[f"{k}_vs_eager"] = row[f"{k}_ms"] / row["eager_ms"]
    return row


def bench_decode(name: str, model, prompt: torch.Tensor, new_tokens: int = 48, rounds: int = 3) -> dict:
    """Greedy `generate()` with the KV cache, batch 1: eager against `luminal.compile_forward`
    (every forward step through `torch.compile(backend="luminal")`, device "cpu"). Latency per new
    token is a whole `generate` call's median time (prefill included) over `new_tokens`; the
    first luminal call's time is the compiles (prefill, then decode shapes) plus that call."""
    import luminal

    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, use_cache=True,
              pad_token_id=0)
    row: dict = {"model": name, "prompt": int(prompt.shape[-1]), "new_tokens": new_tokens}
    with torch.no_grad():
        torch._dynamo.reset()
        ref = model.generate(prompt, **kw)
        fast = luminal.compile_forward(copy.deepcopy(model))
        t0 = time.perf_counter()
        out = fast.generate(prompt, **kw)
        row["luminal_first_call_s"] = time.perf_counter() - t0
        row["tokens_identical"] = bool(torch.equal(out, ref))
        medians = interleaved_medians({"eager": lambda: model.generate(prompt, **kw),
                                       "luminal": lambda: fast.generate(prompt, **kw)}, rounds=rounds, budget_s=2.0)
    row.update({f"{k}_ms_per_token": v * 1e3 / new_tokens for k, v in medians.items()})
    row["luminal_vs_eager"] = row["luminal_ms_per_token"] / row["eager_ms_per_token"]
    return row


def _onnxruntime_session(model, args):
    """(an onnxruntime session of the model exported to ONNX, with the benchmark's thread count;
    its feed; its output on it)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        with torch.no_grad():
            torch.onnx.export(model, args, str(path), dynamo=True, input_names=["input_ids"], optimize=True)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = torch.get_num_threads()
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: args[0].numpy()}
    return sess, feed, sess.run(None, feed)[0]


def compile_scaling(layer_counts=(1, 2, 4, 8, 16, 32), tokens: int = 16) -> list[dict]:
    """luminal compile time per phase over depth (Llama, hidden 64), both entry points."""
    import luminal
    from benchmarks.models import example_inputs, make

    rows = []
    for n in layer_counts:
        model = make("llama-tiny", layers=n)
        model.config.use_cache = False
        args = example_inputs("llama-tiny", tokens)
        with torch.no_grad():
            t0 = time.perf_counter()
            compiled = luminal.compile(model, args)
            total = time.perf_counter() - t0
            wait_for_builds()  # a cold C library builds in the background: not beside the next timings
            phases = compiled.report().phases
            first_call = {}
            for backend in ("luminal", "eager"):  # "eager": Dynamo's own tracing, for reference
                torch._dynamo.reset()
                fast = torch.compile(model, backend=backend)
                t0 = time.perf_counter()
                fast(*args)
                first_call[backend] = time.perf_counter() - t0
        rows.append({"layers": n, "luminal_compile_s": total, "phases_s": {k: round(v, 4) for k, v in phases.items()},
                     "torch_compile_luminal_first_call_s": first_call["luminal"],
                     "torch_compile_eager_first_call_s": first_call["eager"]})
        print(f"  {n:2d} layers: luminal.compile {total:6.2f} s, torch.compile first call: backend='luminal' "
              f"{first_call['luminal']:6.2f} s, backend='eager' {first_call['eager']:6.2f} s, "
              f"phases {rows[-1]['phases_s']}", flush=True)
    return rows
