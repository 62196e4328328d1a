"""Training steps on the CPU: eager against torch.compile with inductor and with luminal.

    python -m benchmarks --training [--models llama-small bert-small resnet-ish] [--steps 10] [--no-readme]
    python -m benchmarks.training   (the same options)
    python -m benchmarks --training --render   # rewrite training.md and the README table from training.json

Writes benchmarks/results/training.json and training.md and (a full run, without --no-readme)
the README's table between `<!-- training:start -->` and `<!-- training:end -->`. Not part of
the plain `python -m benchmarks` run: that one is kept under 10 minutes on 2 cores and this
adds about 6 more (386 s on 2 shared cores, 2026-12-03; most of it inductor's three cold compiles).

The models are `benchmarks/models.py`'s (random weights), in train() mode, batch 8: llama-small
and bert-small on 128 tokens (the inference benchmark's length), resnet-ish on 3x224x224. Each is
wrapped in a module whose forward returns the loss, and that wrapper is what is compiled, so the
loss and its gradient are in the compiled forward and backward graphs:
- llama-small: next-token cross-entropy of the logits against the input ids;
- bert-small: the last hidden state through a fixed random projection (a buffer, 512 -> the
  1024-token vocabulary), cross-entropy against the input ids;
- resnet-ish: cross-entropy of the logits against fixed random labels (batch norm on batch
  statistics, its running statistics updated by every step).
Dropout is set to p=0 (bert-small's hidden and attention dropout; the others have none): eager
draws torch's random numbers, luminal its own (Philox), so with dropout on no loss could be
compared.

One training step is forward + backward + `torch.optim.AdamW.step()` (lr 1e-3) + `zero_grad()`,
on the same batch every step. Only the model is compiled: the optimizer step runs eagerly (torch's
single-tensor AdamW on CPU) in every configuration alike.

Each configuration (eager, `torch.compile(backend="aot_eager")`, `torch.compile(backend="inductor")`,
`torch.compile(backend="luminal", options={"device": "cpu"})`) runs in its own fresh Python process, so imports, compile caches and
peak memory are per configuration; the compile caches start empty (inductor's as in
`python -m benchmarks`: `cold_inductor`; luminal's in a new `LUMINAL_CACHE_DIR`, where luminal's
per-machine C objects, its GEMM entry points and SGEMM, are built before the model is
compiled, as any earlier compile on the machine leaves them: `per_machine_objects_s` in the JSON).
In each:
- "compile s": the wall time of the first 2 steps (Dynamo, aot_autograd, the backend's compile of
  the forward and the backward graph, the first runs), for luminal plus the wait for any C library
  still building in the background after them (`benchmarks.timing.wait_for_builds`: the first
  calls may run on luminal's NumPy runtime meanwhile, `luminal/kernels/cpu/tiered.py`); for
  eager the same two steps, as a reference;
- "ms": the median wall time of the next `--steps` steps (the JSON also has every step's, and the
  median CPU time, `step_cpu_ms`: the process's threads together, less moved than wall time by
  other processes' load on a shared machine);
- "peak MB": the process's peak resident memory during those timed steps less its resident memory
  right after the model and the batch were built (before any compile). Every configuration first
  imports the libraries any of them compiles with (`LIBRARIES`: Dynamo, aot_autograd, inductor's
  compile entry and decompositions, luminal's torch frontend, optimizer and C backend, egglog;
  about 100 MB resident, the JSON's `libraries_mb`), before that level is read: library code is
  not a training step's memory, and without it eager alone would not pay for it. The peak is the kernel's
  own high-water mark: `VmHWM` of /proc/self/status, reset by writing 5 to /proc/self/clear_refs
  right before the timed steps (after `gc.collect()` and glibc's `malloc_trim(0)`, so heap freed
  by the compile is not counted), read right after them; where clear_refs cannot be written a
  thread sampling /proc/self/statm every millisecond takes its place (the JSON's
  `memory_method`). It includes what the configuration keeps alive: AdamW's two moment buffers
  per parameter (created by the first step, the same in every configuration), the gradients, the
  activations saved for the backward, and the compiled graphs' own buffers;
- "first-step loss rel. diff": |loss - eager loss| / |eager loss| of the first training step,
  the eager loss computed in the same process on a deepcopy of the model before compiling
  (pass: at most 1e-4). The JSON also has every step's loss; the parent compares the last
  step's with the eager process's (`last_loss_rel_diff_vs_eager_run`: a check on the gradients and
  the optimizer steps of all 12 steps, not only on the first forward).
aot_eager compiles nothing (Dynamo and aot_autograd around eager kernels, saving what their default
partition saves): its peak is what torch.compile's own machinery costs (graphs, fake tensors,
guards) without a compiler's choices. After its timed steps
the luminal process also times `ROUNDS` alternating rounds of an eager copy of the model and the
compiled one (`alternating_rounds`): both under the same moments of a shared machine, a steadier
ratio than that of two processes run minutes apart.
The luminal process also checks that luminal really ran the training: `luminal.stats()` lists a
graph whose name ends with `_backward` with calls > 0, and
`luminal.frontends.torch.dynamo.EAGER_FALLBACKS` is empty. Otherwise its row says
NOT ON LUMINAL (and why) in place of a plain number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
README = ROOT / "README.md"
MODELS = ["llama-small", "bert-small", "resnet-ish"]
CONFIGS = ["eager", "aot_eager", "inductor", "luminal"]
BATCH, TOKENS, WARMUP, STEPS = 8, 128, 2, 10
ROUNDS = 8  # the luminal process's alternating rounds: one eager step and one luminal step each
LOSS_RTOL = 1e-4
WORKER_TIMEOUT_S = 420


# --- in the worker process ----------------------------------------------------------------------
def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class PeakRss:
    """The process's peak resident memory (bytes) between `start()` and `stop()`."""

    def __init__(self):
        self.method = "VmHWM"
        self._stop = threading.Event()
        self._peak = 0
        self._thread = None

    def start(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current VmRSS
        except OSError:
            self.method = "statm sampling, 1 ms"
            page = os.sysconf("SC_PAGE_SIZE")
            self._peak = _status_kb("VmRSS") * 1024

            def sample():
                with open("/proc/self/statm") as f:
                    while not self._stop.is_set():
                        f.seek(0)
                        self._peak = max(self._peak, int(f.read().split()[1]) * page)
                        time.sleep(0.001)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()

    def stop(self) -> int:
        if self._thread is None:
            return _status_kb("VmHWM") * 1024
        self._stop.set()
        self._thread.join()
        return max(self._peak, _status_kb("VmRSS") * 1024)


def _trim_heap() -> None:
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# what any configuration's compile imports, imported by every configuration before its baseline:
# library code and tables are not a training step's memory, and eager would otherwise be the only
# process not paying for them
LIBRARIES = ("torch._dynamo", "torch._functorch.aot_autograd", "torch._functorch.partitioners",
             "torch._inductor.compile_fx", "torch._inductor.decomposition", "luminal.frontends.torch.dynamo",
             "luminal.egraph.pipeline", "luminal.kernels.cpu.program", "luminal.kernels.cpu.runtime", "egglog")


def load_libraries() -> float:
    """Import `LIBRARIES`; the MB of resident memory that took (`libraries_mb` in the JSON)."""
    import importlib

    _trim_heap()
    before = _status_kb("VmRSS")
    for module in LIBRARIES:
        importlib.import_module(module)
    _trim_heap()
    return (_status_kb("VmRSS") - before) / 1024


def build(name: str):
    """(the model wrapped to return its training loss, in train() mode; the batch)."""
    import torch
    import torch.nn.functional as F

    from benchmarks.models import CONV, make

    model = make(name)
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0  # see the docstring: losses comparable across eager and luminal
    if hasattr(getattr(model, "config", None), "use_cache"):
        model.config.use_cache = False
    g = torch.Generator().manual_seed(1)
    if name in CONV:
        batch = (torch.randn(BATCH, 3, 224, 224, generator=g), torch.randint(0, 1000, (BATCH,), generator=g))
    else:
        ids = torch.randint(0, model.config.vocab_size, (BATCH, TOKENS), generator=g)
        batch = (ids, ids)

    class WithLoss(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model
            if name.startswith("bert"):
                hidden, vocab = model.config.hidden_size, model.config.vocab_size
                self.register_buffer("proj", torch.randn(hidden, vocab, generator=g) / hidden**0.5)

        def forward(self, x, y):
            if name in CONV:
                return F.cross_entropy(self.model(x), y)
            if name.startswith("bert"):
                logits = self.model(x).last_hidden_state @ self.proj
                return F.cross_entropy(logits.flatten(0, 1), y.flatten())
            logits = self.model(x).logits[:, :-1]
            return F.cross_entropy(logits.flatten(0, 1), y[:, 1:].flatten())

    return WithLoss(model).train(), batch


def worker(name: str, config: str, steps: int) -> dict:
    """One configuration of one model, in this (fresh) process."""
    if config == "inductor":
        from benchmarks.__main__ import cold_inductor

        cold_inductor()
    import copy

    import torch

    row: dict = {"model": name, "config": config, "threads": torch.get_num_threads()}
    row["libraries_mb"] = load_libraries()  # before the baseline, in every configuration alike
    module, batch = build(name)
    _trim_heap()
    base = _status_kb("VmRSS") * 1024
    row["rss_after_build_mb"] = base / 2**20
    if config != "eager":  # the eager loss of the first step, on a copy, before compiling
        reference = copy.deepcopy(module)
        row["eager_first_loss"] = float(reference(*batch).detach())
        del reference
    if config in ("inductor", "aot_eager"):
        torch._dynamo.reset()
        module = torch.compile(module, backend=config)
    elif config == "luminal":
        import luminal  # noqa: F401 - registers the backend
        from luminal.kernels.cpu import build as cpu_build
        from luminal.kernels.cpu import program, sgemm

        # the per-machine C objects (the GEMM entry points, luminal's SGEMM): built once per
        # machine and cached, as any earlier compile leaves them. Cold, a library built while they
        # build takes the prelude's slower GEMMs for the life of the process
        t0 = time.perf_counter()
        cpu_build.compiled_object(program.GEMM_OBJECT)
        if sgemm.isa() is not None:
            sgemm._build()
        row["per_machine_objects_s"] = time.perf_counter() - t0
        torch._dynamo.reset()
        module = torch.compile(module, backend="luminal", options={"device": "cpu"})
    opt = torch.optim.AdamW(module.parameters(), lr=1e-3)

    def step() -> float:
        return train_step(module, opt, batch)

    losses = []
    t0 = time.perf_counter()
    for _ in range(WARMUP):
        losses.append(step())
    row["warmup_s"] = time.perf_counter() - t0
    if config == "luminal":
        from benchmarks.timing import wait_for_builds

        row["build_wait_s"] = wait_for_builds()
        row["warmup_s"] += row["build_wait_s"]
    _trim_heap()
    row["rss_before_timed_mb"] = _status_kb("VmRSS") * 1024 / 2**20
    peak = PeakRss()
    peak.start()
    times, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        losses.append(step())
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    row["peak_growth_mb"] = (peak.stop() - base) / 2**20
    row["memory_method"] = peak.method
    row["step_ms"] = statistics.median(times) * 1e3
    row["step_ms_all"] = [t * 1e3 for t in times]
    row["step_cpu_ms"] = statistics.median(cpu) * 1e3  # all the process's threads: less moved by other load
    row["losses"] = losses
    if "eager_first_loss" in row:
        row["first_loss_rel_diff"] = abs(losses[0] - row["eager_first_loss"]) / abs(row["eager_first_loss"])
    if config == "luminal":
        import luminal
        from luminal.frontends.torch.dynamo import EAGER_FALLBACKS

        row.update(alternating_rounds(module, batch, step))

        graphs = luminal.stats()["graphs"]
        row["luminal_graphs"] = graphs
        row["eager_fallbacks"] = list(EAGER_FALLBACKS)
        row["eager_fallback_count"] = len(EAGER_FALLBACKS)
        backward = [g for g in graphs if g["name"].endswith("_backward") and g["calls"] > 0]
        row["on_luminal"] = bool(backward) and len(EAGER_FALLBACKS) == 0
        if not row["on_luminal"]:
            print(f"!!! NOT ON LUMINAL: {name}: backward graphs served {backward}, "
                  f"eager fallbacks {list(EAGER_FALLBACKS)}", flush=True)
    return row


def train_step(module, opt, batch) -> float:
    """One training step (forward, backward, the optimizer's step, zero_grad); the loss."""
    loss = module(*batch)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss.detach())


def alternating_rounds(module, batch, step) -> dict:
    """After the timed steps (and their peak memory): an eager copy of the model (its weights as
    they are now, an AdamW of its own) and the compiled model take turns, one step each per round,
    `ROUNDS` rounds, the order swapped every round. Both see the same moments of a shared machine,
    so their ratio moves far less than that of two processes run minutes apart."""
    import copy

    import torch

    eager = copy.deepcopy(getattr(module, "_orig_mod", module))
    eager_opt = torch.optim.AdamW(eager.parameters(), lr=1e-3)

    def eager_step() -> float:
        return train_step(eager, eager_opt, batch)

    for _ in range(WARMUP):
        eager_step()
    times: dict[str, list[float]] = {"eager": [], "luminal": []}
    for i in range(ROUNDS):
        turns = [("eager", eager_step), ("luminal", step)]
        for config, fn in turns if i % 2 == 0 else turns[::-1]:
            t0 = time.perf_counter()
            fn()
            times[config].append(time.perf_counter() - t0)
    eager_ms, luminal_ms = (statistics.median(times[c]) * 1e3 for c in ("eager", "luminal"))
    return {"rounds_eager_ms": eager_ms, "rounds_luminal_ms": luminal_ms, "rounds_vs_eager": luminal_ms / eager_ms,
            "rounds_ms_all": {c: [t * 1e3 for t in ts] for c, ts in times.items()}}


# --- in the parent process ----------------------------------------------------------------------
def run_worker(name: str, config: str, steps: int) -> dict:
    env = dict(os.environ)
    cache = None
    if config == "luminal":
        cache = tempfile.mkdtemp(prefix="luminal-bench-training-")
        env["LUMINAL_CACHE_DIR"] = cache
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [sys.executable, "-m", "benchmarks.training", "--worker", name, config, "--steps", str(steps), "--out", str(out)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
        if proc.returncode != 0 or not out.stat().st_size:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
            print("\n".join("    " + line for line in tail), flush=True)
            return {"model": name, "config": config, "error": f"exit {proc.returncode}: " + " | ".join(tail[-3:])}
        row = json.loads(out.read_text())
        for line in proc.stdout.splitlines():
            if "NOT ON LUMINAL" in line:
                print("  " + line, flush=True)
    except subprocess.TimeoutExpired:
        return {"model": name, "config": config, "error": f"timed out after {WORKER_TIMEOUT_S} s"}
    finally:
        out.unlink(missing_ok=True)
        if cache is not None:
            import shutil

            shutil.rmtree(cache, ignore_errors=True)
    row["process_s"] = time.perf_counter() - t0
    return row


def combine(name: str, runs: dict) -> dict:
    """One table row from the three processes' results."""
    row: dict = {"model": name, "batch": BATCH,
                 "input": f"{TOKENS} tokens" if name != "resnet-ish" else "3x224x224", "runs": runs}
    eager = runs.get("eager", {})
    for config, r in runs.items():
        if "error" in r:
            row[f"{config}_error"] = r["error"]
            continue
        row[f"{config}_ms"] = r["step_ms"]
        row[f"{config}_peak_mb"] = r["peak_growth_mb"]
        row[f"{config}_compile_s"] = r["warmup_s"]
        if "first_loss_rel_diff" in r:
            row[f"{config}_first_loss_rel_diff"] = r["first_loss_rel_diff"]
        if "step_ms" in eager and config != "eager":
            row[f"{config}_vs_eager"] = r["step_ms"] / eager["step_ms"]
            row[f"{config}_peak_vs_eager"] = r["peak_growth_mb"] / eager["peak_growth_mb"]
            row[f"{config}_last_loss_rel_diff_vs_eager_run"] = abs(r["losses"][-1] - eager["losses"][-1]) / abs(
                eager["losses"][-1])
    lum = runs.get("luminal", {})
    if "rounds_vs_eager" in lum:
        row["luminal_rounds_vs_eager"] = lum["rounds_vs_eager"]
    row["on_luminal"] = bool(lum.get("on_luminal"))
    if "error" not in lum and not row["on_luminal"]:
        row["not_on_luminal"] = {"graphs": lum.get("luminal_graphs"), "eager_fallbacks": lum.get("eager_fallbacks")}
    return row


def table(rows: list[dict]) -> str:
    def f(row, key, fmt="{:.1f}"):
        return fmt.format(row[key]) if key in row else "–"

    def lum(row, text):
        if "luminal_error" in row:
            return "FAILED"
        return text if row["on_luminal"] else f"NOT ON LUMINAL: {text}"

    lines = ["| model | batch × input | eager ms | inductor ms (×eager) | luminal cpu ms (×eager) | luminal ÷ eager, "
             "alternating rounds | eager peak MB | aot_eager peak MB (×eager) | inductor peak MB (×eager) | "
             "luminal peak MB (×eager) | first-step loss rel. diff (luminal; inductor) | compile s: inductor | "
             "compile s: luminal | eager first 2 steps s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = f(r, "luminal_first_loss_rel_diff", "{:.1e}")
        if "luminal_first_loss_rel_diff" in r:
            diff += " ok" if r["luminal_first_loss_rel_diff"] <= LOSS_RTOL else " FAIL"
        lines.append(
            f"| {r['model']} | {r['batch']} × {r['input']} | {f(r, 'eager_ms')} | "
            f"{f(r, 'inductor_ms')} ({f(r, 'inductor_vs_eager', '{:.2f}')}) | "
            f"{lum(r, f(r, 'luminal_ms') + ' (' + f(r, 'luminal_vs_eager', '{:.2f}') + ')')} | "
            f"{lum(r, f(r, 'luminal_rounds_vs_eager', '{:.2f}'))} | "
            f"{f(r, 'eager_peak_mb', '{:.0f}')} | "
            f"{f(r, 'aot_eager_peak_mb', '{:.0f}')} ({f(r, 'aot_eager_peak_vs_eager', '{:.2f}')}) | "
            f"{f(r, 'inductor_peak_mb', '{:.0f}')} ({f(r, 'inductor_peak_vs_eager', '{:.2f}')}) | "
            f"{lum(r, f(r, 'luminal_peak_mb', '{:.0f}') + ' (' + f(r, 'luminal_peak_vs_eager', '{:.2f}') + ')')} | "
            f"{diff}; {f(r, 'inductor_first_loss_rel_diff', '{:.1e}')} | {f(r, 'inductor_compile_s')} | "
            f"{lum(r, f(r, 'luminal_compile_s'))} | {f(r, 'eager_compile_s')} |")
    return "\n".join(lines)


def notes(rows: list[dict], steps: int) -> str:
    out = []
    for r in rows:
        for config in CONFIGS:
            if f"{config}_error" in r:
                out.append(f"- {r['model']}, {config}: **failed**: `{r[f'{config}_error']}`")
        if "not_on_luminal" in r:
            out.append(f"- {r['model']}: **NOT ON LUMINAL**: {json.dumps(r['not_on_luminal'])}")
        cpu = {c: r["runs"][c]["step_cpu_ms"] for c in CONFIGS if "step_cpu_ms" in r["runs"].get(c, {})}
        if cpu:
            out.append(f"- {r['model']}: median CPU time per step (the process's threads together; less moved by "
                       "other processes' load than wall time): " + ", ".join(f"{c} {v:.0f} ms" for c, v in cpu.items()))
        lum = r["runs"].get("luminal", {})
        if "rounds_vs_eager" in lum:
            out.append(f"- {r['model']}: alternating rounds in the luminal process: eager {lum['rounds_eager_ms']:.1f} "
                       f"ms, luminal {lum['rounds_luminal_ms']:.1f} ms ({lum['rounds_vs_eager']:.2f}x)")
        last = r.get("luminal_last_loss_rel_diff_vs_eager_run")
        if last is not None:
            out.append(f"- {r['model']}: loss after {WARMUP + steps} luminal steps vs the eager process's: "
                       f"rel. diff {last:.1e} (inductor "
                       f"{r.get('inductor_last_loss_rel_diff_vs_eager_run', float('nan')):.1e})")
    return "\n".join(out)


def render(result: dict) -> str:
    """The markdown of a run's JSON (results/training.json)."""
    env, rows, steps = result["environment"], result["rows"], result["steps"]
    machine = f" ({env['cpu_model']})" if env.get("cpu_model") else ""  # (older JSONs lack the CPU and ISA)
    isa = (f", ISA {env['isa']} (torch's {env.get('torch_cpu_capability') or '?'}), BLAS {env.get('blas') or '?'}"
           if env.get("isa") else "")
    # (JSONs before the same-imports baseline lack libraries_mb)
    libraries = max((run.get("libraries_mb", 0) for r in rows for run in r.get("runs", {}).values()), default=0)
    markdown = (f"Measured {env['date']} on {env['platform']}{machine}, {env['cpu_count']} threads{isa}, torch {env['torch']}, "
                f"egglog {env['egglog']} (`python -m benchmarks --training`, {result['elapsed_s']:.0f} s; load "
                f"average {env['loadavg_start'][0]:.2f} before, {env['loadavg_end'][0]:.2f} after). One training "
                f"step: forward + backward + AdamW step (eager, not compiled, in every column) + zero_grad, batch "
                f"{BATCH}, dropout off; medians of {steps} steps after {result['warmup_steps']} warm-up steps, each "
                "configuration in its own process. Alternating rounds: in the luminal process after its timed "
                f"steps, an eager copy and the compiled model take turns, {ROUNDS} rounds of one step each (medians; "
                "the steadier ratio on a shared machine). Peak MB: resident memory's peak during the timed steps "
                "above the level after building the model (optimizer state included)"
                + (f", every process having first imported the libraries any configuration compiles with "
                   f"(Dynamo, aot_autograd, inductor, luminal, egglog: {libraries:.0f} MB resident, not counted)"
                   if libraries else "")
                + "; aot_eager: Dynamo and aot_autograd around eager kernels, no compiler. "
                "Compile s: the first 2 steps, cold caches.\n\n" + table(rows))
    if env["loadavg_start"][0] >= 1.0:  # before this run's own processes: someone else's load
        markdown += (f"\n\nOther processes were running (load average {env['loadavg_start'][0]:.2f} on "
                     f"{env['cpu_count']} threads before this run started): wall times are noisy (every step's is "
                     "in the JSON); the CPU-time lines below move less.")
    extra = notes(rows, steps)
    return markdown + ("\n\n" + extra if extra else "")


def update_readme(markdown: str) -> bool:
    start, end = "<!-- training:start -->", "<!-- training:end -->"
    text = README.read_text()
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        README.write_text(head + start + "\n" + markdown + "\n" + end + tail)
        return True
    return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks --training")
    parser.add_argument("--models", nargs="+", default=MODELS, metavar="NAME", help=f"of {', '.join(MODELS)}")
    parser.add_argument("--steps", type=int, default=STEPS, help="timed steps after the 2 warm-up steps")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--render", action="store_true", help="only rewrite training.md (and the README's table) "
                        "from results/training.json")
    opts = parser.parse_args(argv)
    if opts.render:
        markdown = render(json.loads((RESULTS / "training.json").read_text()))
        (RESULTS / "training.md").write_text(markdown + "\n")
        if not opts.no_readme:
            update_readme(markdown)
        print(markdown)
        return 0
    if opts.worker:
        row = worker(*opts.worker, steps=opts.steps)
        Path(opts.out).write_text(json.dumps(row))
        return 0

    from benchmarks.__main__ import environment

    RESULTS.mkdir(exist_ok=True)
    started = time.perf_counter()
    env = environment()
    env["loadavg_start"] = os.getloadavg()
    print(f"luminal training benchmark on {env['platform']} ({env['cpu_count']} threads), torch {env['torch']}; "
          f"load average {env['loadavg_start'][0]:.2f}", flush=True)
    rows = []
    for name in opts.models:
        runs = {}
        for config in CONFIGS:
            print(f"- {name}: {config}", flush=True)
            runs[config] = run_worker(name, config, opts.steps)
            r = runs[config]
            if "error" in r:
                print(f"  FAILED: {r['error']}", flush=True)
            else:
                print(f"  step {r['step_ms']:.1f} ms (median of {opts.steps}), first 2 steps {r['warmup_s']:.1f} s, "
                      f"peak +{r['peak_growth_mb']:.0f} MB, first loss {r['losses'][0]:.6f}"
                      + (f" (rel. diff {r['first_loss_rel_diff']:.1e})" if "first_loss_rel_diff" in r else "")
                      + (f", on luminal: {r['on_luminal']}" if config == "luminal" else ""), flush=True)
        rows.append(combine(name, runs))
    elapsed = time.perf_counter() - started
    env["loadavg_end"] = os.getloadavg()
    partial = opts.models != MODELS or opts.steps != STEPS
    stem = "training_" + "_".join(opts.models) if opts.models != MODELS else "training"
    result = {"environment": env, "steps": opts.steps, "warmup_steps": WARMUP, "rows": rows, "elapsed_s": elapsed}
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1))
    markdown = render(result)
    (RESULTS / f"{stem}.md").write_text(markdown + "\n")
    if not opts.no_readme and not partial:
        update_readme(markdown)
    print(markdown)
    print(f"wrote {RESULTS}/{stem}.json, {stem}.md in {elapsed:.0f} s")
    return 0 if all(r["on_luminal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
