"""Cold start: what a torch.compile(backend="luminal") first call costs, cold and warm.

    python -m benchmarks --cold-start [--layers 32] [--models ...] [--devices numpy cpu] [--repeat 2]
    python -m benchmarks.cold_start   (the same options)

Every measurement runs in a fresh Python process (imports, Dynamo and egglog all paid as a user's
first call pays them):
- `eager`: the first call of `torch.compile(model, backend="eager")`: Dynamo's tracing alone,
  the floor under any backend's first call;
- `cold`: the first call with backend="luminal", the compile cache (`luminal.compile_cache`, and
  with it the C library cache) in a new, empty `LUMINAL_CACHE_DIR`; on `cpu` the C library then
  builds in the background and that first call runs on the NumPy runtime (`first_call_on`;
  `background_s` says how long the build took: `luminal/kernels/cpu/tiered.py`);
- `warm`: the same again in another process, the cache that `cold` filled (a user's second run).

luminal's share is the time spent inside luminal: its backend function (the lowering to
core ATen, the compile cache's key) plus the compiled function's first call (the FX import,
egglog, the kernel plan, the C build where the first call waits for it), less one steady-state
call of the compiled function (the model's own run, measured right after, once the C is built:
so a first call the NumPy runtime served counts that runtime's time, less the C's, as luminal's).
It is measured around luminal's entry points, not summed
from the report's phases, so nothing luminal does is left out; as wall time, and as CPU time
(the process's and its children's: on a loaded machine, closer to what a quiet one would show
as wall time). Not in it: importing luminal (`import_s`, its own column: a user pays it once
per process, wherever the import happens), which comes before the model and the compile.
The Llama of `--layers` layers
(the benchmark's llama-tiny, 16 tokens) gets all three on every device; every other benchmark
model gets `cold` (to fill the cache) and `warm`.

luminal's modules are byte-compiled before the first measurement (`compileall`, as `pip install`
does): an environment that sets PYTHONDONTWRITEBYTECODE (the VM these figures come from does)
would otherwise bill each process for compiling luminal's source again, 50-80 ms of a cold
share, where torch's modules come byte-compiled from their wheel.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ["llama-tiny", "llama-small", "qwen3-tiny", "qwen3-small", "bert-tiny", "bert-small", "minilm", "resnet-ish",
          "mobilenet-ish"]


def first_call(model_name: str, layers: int | None, backend: str, device: str) -> dict:
    """In this (fresh) process: the first call of torch.compile(model, backend=...) and, for luminal,
    the time spent inside luminal and the report's phases and cache answers."""
    started = time.perf_counter()
    import torch

    imported_torch = time.perf_counter()
    import_s = 0.0
    if backend == "luminal":  # timed: `import luminal` (its torch frontend then imports torch._dynamo,
        import luminal  # noqa: F401 - which torch.compile imports for any backend)

        import_s = time.perf_counter() - imported_torch
        from luminal.frontends.torch.dynamo import backend as luminal_backend
    from benchmarks.models import example_inputs, make

    model = make(model_name, layers=layers)
    if hasattr(model, "config"):
        model.config.use_cache = False
    args = example_inputs(model_name, 16)
    spent = {"backend": 0.0, "first": 0.0, "steady": 0.0}  # wall seconds
    cpu = {"backend": 0.0, "first": 0.0, "steady": 0.0}  # this process's CPU seconds (plus its children's)
    if backend == "luminal":
        def measured(gm, example_inputs):
            t0, c0 = time.perf_counter(), cpu_s()
            fn = luminal_backend(gm, example_inputs, options={"device": device})
            spent["backend"] += time.perf_counter() - t0
            cpu["backend"] += cpu_s() - c0
            calls = [0]

            def call(*a):
                t0, c0 = time.perf_counter(), cpu_s()
                out = fn(*a)
                if calls[0] == 0:
                    spent["first"] += time.perf_counter() - t0
                    cpu["first"] += cpu_s() - c0
                calls[0] += 1
                return out

            return call

        target = measured
    else:
        target = "eager"
    torch._dynamo.reset()
    from luminal.compiler import STATS

    before = len(STATS.compiled)
    fast = torch.compile(model, backend=target)
    with torch.no_grad():
        t0 = time.perf_counter()
        fast(*args)
        first = time.perf_counter() - t0
        if backend == "luminal":  # one steady call of the compiled model: its own run, not compile work
            for g in STATS.compiled[before:]:  # the compile cache's writes after the first call: not in a steady call
                g.wait_writes()
            steady, steady_cpu = [], []
            for _ in range(3):
                t0, c0 = time.perf_counter(), cpu_s()
                fast(*args)
                steady.append(time.perf_counter() - t0)
                steady_cpu.append(cpu_s() - c0)
            spent["steady"], cpu["steady"] = min(steady), min(steady_cpu)
    graphs = STATS.compiled[before:]
    phases: dict[str, float] = {}
    background: dict[str, float] = {}  # off the first call's path (a cold C library: kernels/cpu/tiered.py)
    cache: dict[str, str] = {}
    for g in graphs:
        rep = g._report
        for k, v in rep.phases.items():
            phases[k] = phases.get(k, 0.0) + v
        for k, v in rep.background.items():
            background[k] = background.get(k, 0.0) + v
        cache.update(rep.cache)
    share = spent["backend"] + max(0.0, spent["first"] - spent["steady"])
    share_cpu = cpu["backend"] + max(0.0, cpu["first"] - cpu["steady"])
    return {"model": model_name, "layers": layers, "backend": backend, "device": device, "first_call_s": first,
            "luminal_s": share if backend == "luminal" else 0.0, "luminal_cpu_s": share_cpu if backend == "luminal" else 0.0,
            "spent_s": spent, "cpu_s": cpu, "phases_s": phases, "background_s": background, "cache": cache,
            "graphs": len(graphs), "first_call_on": _first_call_on(graphs), "import_s": import_s,
            "torch_import_s": imported_torch - started}


def _first_call_on(graphs) -> str:
    """Which runtime served the first call: "numpy" where a cold cpu library was still building."""
    served = {"numpy" if getattr(g.runtime, "reference_calls", 0) else g.device.name for g in graphs}
    return ",".join(sorted(served))


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (the C compiler): on a loaded
    machine a steadier measure of the work done than wall time (BLAS threads count double)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def in_process(model: str, layers: int | None, backend: str, device: str, cache_dir: str) -> dict:
    """`first_call` in a new Python process whose compile cache lives in `cache_dir`."""
    code = ("import json, sys; from benchmarks.cold_start import first_call; "
            f"print('RESULT', json.dumps(first_call({model!r}, {layers!r}, {backend!r}, {device!r})))")
    env = dict(os.environ, LUMINAL_CACHE_DIR=cache_dir, LUMINAL_COMPILE_CACHE="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    if out.returncode:
        raise RuntimeError(f"{model} {backend} {device} failed:\n{out.stderr[-3000:]}")
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT"))[7:])


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def run(layers: int, models: list[str], devices: list[str], repeat: int, partial: Path | None = None) -> dict:
    import compileall

    compileall.compile_dir(str(ROOT / "luminal"), quiet=1)  # as an installed package is (module docstring)
    compileall.compile_dir(str(ROOT / "benchmarks"), quiet=1)
    rows = []
    for device in devices:
        for model in models:
            deep = layers if model == "llama-tiny" else None
            for r in range(repeat):
                cache_dir = tempfile.mkdtemp(prefix="luminal-cold-start-")
                try:
                    row = {"model": model, "layers": deep, "device": device, "round": r, "load_before": load()}
                    if deep:
                        row["eager"] = in_process(model, deep, "eager", device, cache_dir)
                    row["cold"] = in_process(model, deep, "luminal", device, cache_dir)
                    row["warm"] = in_process(model, deep, "luminal", device, cache_dir)
                    row["load_after"] = load()
                finally:
                    shutil.rmtree(cache_dir, ignore_errors=True)
                rows.append(row)
                print(line(row), flush=True)
                if partial is not None:  # what is measured so far survives an interrupted run
                    partial.write_text(json.dumps({"rows": rows, "partial": True}, indent=1))
    return {"rows": rows, "summary": summary(rows)}


def line(row: dict) -> str:
    name = f"{row['model']}" + (f" ({row['layers']} layers)" if row["layers"] else "")
    cold, warm = row["cold"], row["warm"]
    text = f"{name:<24} {row['device']:<6} cold: luminal {cold['luminal_s']:.2f} s (cpu {cold['luminal_cpu_s']:.2f} s)"
    if "eager" in row:
        eager = row["eager"]["first_call_s"]
        text += (f" (first call {cold['first_call_s']:.2f} s = x{cold['first_call_s'] / eager:.2f} of backend='eager' "
                 f"{eager:.2f} s)")
    text += (f"; warm: luminal {warm['luminal_s']:.2f} s (cpu {warm['luminal_cpu_s']:.2f} s), cache {warm['cache']}; "
             f"import luminal {cold.get('import_s', float('nan')):.2f} s [{row['load_before']}]")
    return text


def summary(rows: list[dict]) -> list[dict]:
    """Per (model, device): the median over rounds of each figure."""
    out = []
    keys = list(dict.fromkeys((r["model"], r["device"]) for r in rows))
    for model, device in keys:
        group = [r for r in rows if (r["model"], r["device"]) == (model, device)]
        s = {"model": model, "layers": group[0]["layers"], "device": device, "rounds": len(group),
             **{f"{k}_{m}": statistics.median(r[k][m] for r in group)
                for k in ("cold", "warm") for m in ("luminal_s", "luminal_cpu_s")},
             "import_s": statistics.median(r["cold"].get("import_s", float("nan")) for r in group)}
        if "eager" in group[0]:
            s["eager_first_call_s"] = statistics.median(r["eager"]["first_call_s"] for r in group)
            s["cold_first_call_s"] = statistics.median(r["cold"]["first_call_s"] for r in group)
            s["cold_vs_eager"] = statistics.median(r["cold"]["first_call_s"] / r["eager"]["first_call_s"] for r in group)
        out.append(s)
    return out


def table(summary_rows: list[dict]) -> str:
    lines = ["| model | device | cold: luminal s (cpu s) | cold first call / backend='eager' | "
             "warm (2nd process): luminal s (cpu s) | import luminal s |", "|---|---|---|---|---|---|"]
    for s in summary_rows:
        name = s["model"] + (f" ({s['layers']} layers)" if s["layers"] else "")
        ratio = (f"{s['cold_first_call_s']:.2f} / {s['eager_first_call_s']:.2f} s (x{s['cold_vs_eager']:.2f})"
                 if "cold_vs_eager" in s else "–")
        lines.append(f"| {name} | {s['device']} | {s['cold_luminal_s']:.2f} ({s['cold_luminal_cpu_s']:.2f}) | {ratio} | "
                     f"{s['warm_luminal_s']:.2f} ({s['warm_luminal_cpu_s']:.2f}) | {s.get('import_s', float('nan')):.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks --cold-start", description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32, help="depth of the Llama measured cold against eager")
    ap.add_argument("--models", nargs="+", default=MODELS, metavar="NAME")
    ap.add_argument("--devices", nargs="+", default=["numpy", "cpu"])
    ap.add_argument("--repeat", type=int, default=1, help="rounds per model and device (medians reported)")
    ap.add_argument("--json", default=str(RESULTS / "cold_start.json"))
    opts = ap.parse_args(argv)
    started = time.perf_counter()
    Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
    result = run(opts.layers, opts.models, opts.devices, opts.repeat, Path(opts.json))
    result["elapsed_s"] = time.perf_counter() - started
    result["cpu_count"] = os.cpu_count()
    Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.json).write_text(json.dumps(result, indent=1))
    print(table(result["summary"]))
    print(f"wrote {opts.json} in {result['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
