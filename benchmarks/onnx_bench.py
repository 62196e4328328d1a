"""ONNX models on `device="cpu"` against onnxruntime, side by side in one process.

    python -m benchmarks.onnx_bench                  # the light models and the real-model sweep
    python -m benchmarks.onnx_bench --models resnet50 squeezenet1_1   # some of them
    python -m benchmarks --onnx [options]            # the same, through the benchmark entry point

Three groups of models:
- the ONNX test suite's "light models" (ResNet50, DenseNet121, VGG19, Inception, SqueezeNet,
  ShuffleNet), which onnx's runner downloads: built offline instead from torchvision's
  architectures with random weights (fixed seed, batch-norm statistics included), eval mode,
  batch 1, 224x224, exported with `torch.onnx.export` and cached under
  `$LUMINAL_BENCH_CACHE` (default: `<tmp>/luminal-onnx-bench`), never in git. "inception" is
  GoogLeNet, the zoo's inception_v1; "shufflenet" is torchvision's v2 (the zoo's is v1).
- "suite": the same light models as the onnx wheel ships them (`onnx/backend/test/data/light`):
  weights computed by ConstantOfShape nodes, the form the suite runs;
- "sklearn": the scikit-learn sweep of `tests/onnx/test_sklearn.py` (fitted on its data, converted
  by skl2onnx with default options, ZipMap included) at a batch of 256 rows, where scikit-learn
  and skl2onnx are installed (the dev extra);
- every model of `tests/onnx/real_models.toml` (ONNX files PyPI wheels ship) whose package is
  installed, at its first listed input shape (those marked heavy with `--heavy`).

Per model: onnxruntime (CPUExecutionProvider, `intra_op_num_threads` = luminal's thread count)
and `luminal.onnx.compile(path, device="cpu")`: compile seconds (the compile plus the first
call, which compiles per shape where the model needs it; cold caches unless `--warm`), median
latencies measured in alternating rounds, their ratio, and the max |luminal - onnxruntime| over
the outputs. Writes
`benchmarks/results/onnx.{json,md}` (a partial run: `onnx_<models>.{json,md}`).

The measuring process does not import torch, as an ONNX user's would not (the light models are
exported by a child process): luminal's threads are the CPU count and its GEMMs the OpenBLAS
NumPy ships. `--with-torch` imports torch first, as a process that also runs PyTorch would: the
C backend then takes torch's thread count and the MKL inside torch (`luminal/kernels/cpu/blas_libs.py`).
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import traceback
from pathlib import Path

import numpy as np

from benchmarks import ort_isa
from benchmarks.timing import cpu_environment, describe_blas, describe_isa, interleaved_medians, wait_for_builds

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
MANIFEST = ROOT / "tests" / "onnx" / "real_models.toml"
TARGET = 1.5  # issue 35's bound: luminal within 1.5x of onnxruntime on every model
# name -> (torchvision builder, input side)
LIGHT = {
    "resnet50": ("resnet50", 224),
    "densenet121": ("densenet121", 224),
    "vgg19": ("vgg19", 224),
    "inception": ("googlenet", 224),
    "squeezenet1_1": ("squeezenet1_1", 224),
    "shufflenet_v2": ("shufflenet_v2_x1_0", 224),
}


def cache_dir() -> Path:
    path = Path(os.environ.get("LUMINAL_BENCH_CACHE") or Path(tempfile.gettempdir()) / "luminal-onnx-bench")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _vision_helpers():
    """tests/torch/vision_models.py (torchvision imported off sys.path, random weights)."""
    spec = importlib.util.spec_from_file_location("_luminal_vision_models", ROOT / "tests" / "torch" / "vision_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module



def threads() -> int:
    """luminal's thread count in this process (`luminal.kernels.cpu.blas_libs.threads`)."""
    from luminal.kernels.cpu import blas_libs

    return blas_libs.threads()


def light_model(name: str) -> tuple[Path, dict]:
    """The light model `name` as an ONNX file (exported once by a child process, then cached)
    and its feeds."""
    builder, side = LIGHT[name]
    path = cache_dir() / f"{name}_{side}.onnx"
    x = np.random.default_rng(0).standard_normal((1, 3, side, side)).astype(np.float32)
    if not path.exists():
        subprocess.run([sys.executable, "-m", "benchmarks.onnx_bench", "--export", name], check=True, cwd=ROOT)
    return path, {"x": x}


def export(name: str) -> None:
    """Export the light model `name` to its cache path (imports torch and torchvision)."""
    import torch

    builder, side = LIGHT[name]
    path = cache_dir() / f"{name}_{side}.onnx"
    x = np.random.default_rng(0).standard_normal((1, 3, side, side)).astype(np.float32)
    if not path.exists():
        helpers = _vision_helpers()
        tv = helpers.import_torchvision()
        if tv is None:
            raise RuntimeError("torchvision is not installed (make installs it into .venv/torchvision)")
        kwargs = {"aux_logits": False, "init_weights": False} if builder == "googlenet" else {}
        torch.manual_seed(0)
        model = helpers.randomize(getattr(tv.models, builder)(weights=None, **kwargs), seed=0)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with torch.no_grad():
            torch.onnx.export(model, (torch.from_numpy(x),), str(tmp), input_names=["x"], dynamo=False,
                              training=torch.onnx.TrainingMode.PRESERVE,
                              opset_version=17, do_constant_folding=True)
        tmp.replace(path)  # atomic: a concurrent run never reads half a file


SUITE = ("resnet50", "densenet121", "vgg19", "inception_v1", "inception_v2", "squeezenet", "shufflenet",
         "bvlc_alexnet", "zfnet512")


def suite_model(name: str) -> tuple[Path, dict]:
    """The onnx wheel's light model `name` as it ships, and a random feed for its data input."""
    import onnx

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    data = next(i for i in model.graph.input if i.name not in inits)
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    return path, {data.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def sklearn_models() -> dict[str, tuple[Path, dict]]:
    """The scikit-learn sweep's estimators (`tests/onnx/test_sklearn.py`, loaded by path), fitted,
    converted and cached as ONNX files, each with a feed of 256 rows; {} without scikit-learn."""
    if importlib.util.find_spec("sklearn") is None or importlib.util.find_spec("skl2onnx") is None:
        return {}
    import warnings

    import skl2onnx

    spec = importlib.util.spec_from_file_location("_luminal_sklearn", ROOT / "tests" / "onnx" / "test_sklearn.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    out = {}
    for name, (estimator, x, y) in sweep.MODELS.items():
        path = cache_dir() / f"sklearn_{name}.onnx"
        if not path.exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                estimator.fit(x, y)
                model = skl2onnx.to_onnx(estimator, x[:1])
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(model.SerializeToString())
            tmp.replace(path)
        rows = np.resize(x, (256, x.shape[1])).astype(np.float32)
        out[name] = (path, {"X": rows})
    return out


def real_models(heavy: bool = False) -> dict[str, tuple[Path, dict]]:
    """The manifest's models whose package (at the listed version) is installed (heavy ones only
    with `heavy`), with feeds for the first listed shape: the sweep test's own input recipe
    (`tests/onnx/test_real_onnx_models.py`, loaded by path)."""
    spec = importlib.util.spec_from_file_location("_luminal_real_onnx", ROOT / "tests" / "onnx" / "test_real_onnx_models.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    site = Path(sysconfig.get_paths()["purelib"])
    entries = tomllib.loads(MANIFEST.read_text())["model"]
    stems = collections.Counter(Path(e["path"]).stem for e in entries)
    found = {}
    for entry in entries:
        if entry.get("heavy") and not heavy:
            continue
        try:
            if importlib.metadata.version(entry["package"]) != entry["version"]:
                continue
        except importlib.metadata.PackageNotFoundError:
            continue
        stem = Path(entry["path"]).stem
        if stem == "model":
            stem = entry["package"]
        elif stems[stem] > 1:  # two generations' rec.onnx: their folders below the package's (ppocrv5-rec)
            stem = "-".join(p for p in Path(entry["path"]).parent.parts[1:] if p != "models")
        found[stem] = (site / entry["path"], sweep._feeds(entry["inputs"], 0, np.random.default_rng(0)))
    return found


def _max_diff(got, want) -> float:
    def flat(v):  # ZipMap's list of {label: probability} as the probabilities in label order
        if isinstance(v, list):
            return np.array([[row[k] for k in row] for row in v], np.float64)
        return np.asarray(v, np.float64)

    diffs = [float(np.max(np.abs(flat(g) - flat(w)), initial=0.0)) for g, w in zip(got, want)]
    return max(diffs, default=0.0)


def bench_one(name: str, path: Path, feeds: dict, group: str) -> dict:
    import onnxruntime as ort

    import luminal.onnx

    row: dict = {"model": name, "group": group, "inputs": {k: list(v.shape) for k, v in feeds.items()}}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads()
    t0 = time.perf_counter()
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    row["onnxruntime_load_s"] = time.perf_counter() - t0
    want = sess.run(None, feeds)
    t0 = time.perf_counter()
    model = luminal.onnx.compile(str(path), device="cpu")
    first = model(feeds)  # a cold C library builds in the background meanwhile: this may be the NumPy runtime's
    row["luminal_first_result_s"] = time.perf_counter() - t0
    wait_for_builds()
    row["luminal_compile_s"] = time.perf_counter() - t0  # the C built and loaded
    row["max_diff"] = max(_max_diff(first, want), _max_diff(model(feeds), want))  # the C's too
    medians = interleaved_medians({"onnxruntime": lambda: sess.run(None, feeds), "luminal": lambda: model(feeds)})
    row.update({f"{k}_ms": v * 1e3 for k, v in medians.items()})
    row["ratio"] = row["luminal_ms"] / row["onnxruntime_ms"]
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | group | onnxruntime ms | luminal cpu ms | ratio (luminal / ort) | luminal compile s | max diff |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['group']} | – | – | – | – | {r['error']} |")
            continue
        flag = "" if r["ratio"] <= TARGET else " **"
        lines.append(f"| {r['model']} | {r['group']} | {r['onnxruntime_ms']:.2f} | {r['luminal_ms']:.2f} | "
                     f"{r['ratio']:.2f}{flag} | {r['luminal_compile_s']:.1f} | {r['max_diff']:.1e} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.onnx_bench")
    parser.add_argument("--models", nargs="+", metavar="NAME", help="only these models (light: "
                        f"{', '.join(LIGHT)}; suite: {', '.join(SUITE)}; real: the stems of real_models.toml's paths, or the package where the stem is 'model', or where two share a stem their folders below the package's, joined by '-')")
    parser.add_argument("--light", action="store_true", help="the light models only (both groups)")
    parser.add_argument("--real", action="store_true", help="the real-model sweep only")
    parser.add_argument("--heavy", action="store_true", help="the manifest's heavy models too")
    parser.add_argument("--sklearn", action="store_true", help="the scikit-learn models only")
    parser.add_argument("--with-torch", action="store_true", help="import torch first (its threads and MKL)")
    parser.add_argument("--warm", action="store_true", help="keep luminal's cache (default: a fresh, empty "
                        "$LUMINAL_CACHE_DIR, so compile seconds include the C compiler)")
    parser.add_argument("--export", metavar="NAME", help=argparse.SUPPRESS)  # the child process of light_model
    opts = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if opts.export:
        export(opts.export)
        return 0
    if opts.with_torch:
        import torch  # noqa: F401
    if not opts.warm:
        os.environ["LUMINAL_CACHE_DIR"] = tempfile.mkdtemp(prefix="luminal-onnx-bench-")
    ort_isa.apply()  # LUMINAL_ISA=avx2: onnxruntime's AVX2 kernels too, before it loads
    started = time.perf_counter()
    real = real_models(opts.heavy)
    sklearn = sklearn_models() if not (opts.light or opts.real) else {}
    todo = ([(n, "light") for n in LIGHT] + [(n, "suite") for n in SUITE]) * (not (opts.real or opts.sklearn))
    todo += [(n, "real") for n in real] * (not (opts.light or opts.sklearn))
    todo += [(n, "sklearn") for n in sklearn]
    if opts.models:
        unknown = set(opts.models) - set(LIGHT) - set(SUITE) - set(real) - set(sklearn)
        if unknown:
            parser.error(f"unknown models {sorted(unknown)}")
        todo = [(n, g) for n, g in todo if n in opts.models]
    rows = []
    for name, group in todo:
        print(f"- {name}", flush=True)
        try:
            path, feeds = (light_model(name) if group == "light" else suite_model(name) if group == "suite"
                           else sklearn[name] if group == "sklearn" else real[name])
            rows.append(bench_one(name, path, feeds, group))
        except Exception as exc:  # recorded, not hidden: the table says why the row is empty
            traceback.print_exc()
            rows.append({"model": name, "group": group, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"})
        print("  " + ", ".join(f"{k}={v:.3g}" for k, v in rows[-1].items() if isinstance(v, float)), flush=True)
    elapsed = time.perf_counter() - started
    torch_version = sys.modules["torch"].__version__ if "torch" in sys.modules else None
    # the environment may pin OpenBLAS's kernels (OPENBLAS_CORETYPE=Haswell: AVX2 GEMMs on an
    # AVX-512 CPU, where onnxruntime's own GEMMs use AVX-512): luminal leaves the user's setting
    # be, and its own AVX-512 SGEMM then stands in front of OpenBLAS (`sgemm`: who serves it)
    env = {"python": platform.python_version(), "platform": platform.platform(), "threads": threads(),
           "torch_loaded": torch_version, **cpu_environment(), "numpy": np.__version__,
           "luminal": importlib.metadata.version("luminal"), "load_avg": os.getloadavg(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    RESULTS.mkdir(exist_ok=True)
    stem = "onnx_" + "_".join(opts.models) if opts.models else "onnx" + (
        "_light" if opts.light else "_real" if opts.real else "_sklearn" if opts.sklearn else "")
    stem += "_torch" if opts.with_torch else ""
    stem += "" if env["isa"] == "native" else f"_{env['isa']}"  # LUMINAL_ISA=avx2: beside the native results
    (RESULTS / f"{stem}.json").write_text(json.dumps({"environment": env, "rows": rows, "elapsed_s": elapsed}, indent=1))
    within = sum(1 for r in rows if r.get("ratio", float("inf")) <= TARGET)
    how = f"torch {torch_version} loaded, " if torch_version else "torch not loaded, "
    markdown = (f"Measured {env['date']} on {env['platform']} ({env['cpu_model']}), {env['threads']} threads, {how}"
                f"{describe_blas(env)}, "
                f"ISA {describe_isa(env)}, onnxruntime {env['onnxruntime']}, load average {env['load_avg'][0]:.1f} at the end "
                f"(`python -m benchmarks.onnx_bench{' --with-torch' if opts.with_torch else ''}`, {elapsed:.0f} s). "
                f"Batch 1 (the sklearn group: 256 rows); medians in alternating rounds; ** marks a ratio above {TARGET:g}x. "
                f"{within} of {len(rows)} within {TARGET:g}x.\n\n" + table(rows))
    (RESULTS / f"{stem}.md").write_text(markdown + "\n")
    print(markdown)
    print(f"wrote {RESULTS}/{stem}.json, {stem}.md in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
