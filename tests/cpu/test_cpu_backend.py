"""The compiled CPU backend (`device="cpu"`, luminal/kernels/cpu/) against the NumPy runtime:
every op case (one graph, one C build), the NaN/±inf edge cases through the fused kernels, the
torch zoo (one graph) and the tiny Hugging Face models; GEMM operand views (transposed, sliced,
broadcast, half types, integers); error flags; the no-compiler fallback; threads; the disk cache."""

import os
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from graph_helpers import renamed_inputs
from op_cases import CASES, case_graph

import luminal as lm
from luminal.archive import read_archive
from luminal.errors import DivisionByZero
from luminal.hlir.ops import Op, toposort
from luminal.kernels.cpu import blas_libs, build
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.cpu.runtime import CpuRuntime
from luminal.runtime import NumpyRuntime

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")
MODELS = Path(__file__).parent.parent.parent / "benchmarks" / "gpu_models"
TINY = ["llama", "qwen3", "gpt2", "bert", "minilm"]


def _same(got, want, name="", tol=1e-5):
    assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, want.dtype, got.shape, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=name)
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{name}: NaN positions")
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)


def test_every_op_case_matches_the_numpy_runtime():
    g, feeds = case_graph(CASES, 0, "c")[:2]
    rt = CpuRuntime(g.output_nodes)
    got = rt({n.arg: feeds[n.arg] for n in rt.inputs})
    for (name, _), want, out in zip(g.outputs, g.run(feeds), got):
        _same(out, want, name)


def test_edge_values_through_the_fused_kernels():
    g, feeds = case_graph([c for c in CASES if c[0].startswith("edge_")], 3, "e")[:2]
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    assert isinstance(cpu.runtime, CpuRuntime)
    assert {Op.SOFTMAX, Op.KAHAN_SUM, Op.FUSED_ELEMENTWISE} <= {n.op for n in toposort(cpu.outputs)}
    used = {n.arg for n in cpu.inputs}
    feeds = {k: v for k, v in feeds.items() if k in used}
    for (name, _), out, want in zip(g.outputs, cpu(feeds), ref(feeds)):
        _same(out, want, name)


def test_the_zoo_in_one_library():
    outputs, feeds, wants = [], {}, []
    for i, path in enumerate(sorted(MODELS.glob("zoo_*.lum"))):
        _, outs, _ = read_archive(path)
        data = np.load(path.with_suffix(".npz"))
        outputs += renamed_inputs(outs, f"m{i}_")
        feeds.update({f"m{i}_{k[3:]}": data[k] for k in data.files if k.startswith("in:")})
        wants += [(path.stem, data[k]) for k in data.files if k.startswith("out:")]
    rt = CpuRuntime(outputs)
    used = {n.arg for n in rt.inputs}
    got = rt({k: v for k, v in feeds.items() if k in used})
    assert len(got) == len(wants) >= 60
    for (name, want), out in zip(wants, got):
        _same(out, want, name)


@pytest.mark.parametrize("name", TINY)
def test_tiny_models(name):
    _, outputs, _ = read_archive(MODELS / f"{name}.lum")
    data = np.load(MODELS / f"{name}.npz")
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    rt = CpuRuntime(outputs)
    feeds = {k: v for k, v in feeds.items() if k in {n.arg for n in rt.inputs}}
    assert any(s.output.op is Op.MAT_MUL for s in rt.program.steps)
    for out, want in zip(rt(feeds), NumpyRuntime(outputs)(feeds)):
        _same(out, want, name)


def test_gemm_operand_views():
    """Plain, transposed, sliced (not a plain matrix: copied), batch-broadcast operands; f64, f16,
    bf16 and integer GEMMs; symbolic sizes, one build for all of them."""
    g = lm.Graph("gemm")
    x = g.input("x", ("b", "m", 6))
    w = g.input("w", (5, 6))
    y = g.input("y", ("b", 6, "m"))
    g.output(x @ w.T, "transposed_weight")
    g.output(x @ y, "batched")
    g.output(x[:, :, ::2] @ w[:, ::2].T, "strided")
    g.output(x.permute(0, 2, 1).permute(0, 2, 1)[:, 1:] @ y[:, :, 1:], "offsets")
    g.output(x.cast(lm.f64) @ w.cast(lm.f64).T, "f64")
    g.output(x.cast(lm.f16) @ w.cast(lm.f16).T, "f16")
    g.output(x.cast(lm.bf16) @ w.cast(lm.bf16).T, "bf16")
    g.output(x.cast(lm.int64) @ w.cast(lm.int64).T, "i64")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    assert isinstance(cpu.runtime, CpuRuntime) and blas_libs.blas().sgemm is not None
    rng = np.random.default_rng(5)
    for b, m in [(2, 3), (1, 1), (3, 7), (2, 0)]:
        feeds = {"x": (rng.standard_normal((b, m, 6)) * 3).round().astype(np.float32),
                 "w": rng.standard_normal((5, 6)).astype(np.float32),
                 "y": rng.standard_normal((b, 6, m)).astype(np.float32)}
        for (name, _), out, want in zip(g.outputs, cpu(feeds), ref(feeds)):
            _same(out, want, f"{name} b={b} m={m}", tol=1e-2 if name in ("f16", "bf16") else 1e-5)


def test_an_out_of_range_index_and_a_mod_by_zero_raise():
    g = lm.Graph()
    x, i = g.input("x", (3,)), g.input("i", (2,), lm.int64)
    g.output(x.gather(0, i))
    cg = g.compile(device="cpu")
    np.testing.assert_array_equal(cg(x=np.arange(3, dtype=np.float32), i=np.array([2, 0]))[0], [2, 0])
    for bad in ([0, 3], [-1, 0]):
        with pytest.raises(lm.IndexOutOfRange):
            cg(x=np.arange(3, dtype=np.float32), i=np.array(bad))
    g = lm.Graph()
    a, b = g.input("a", (3,), lm.int64), g.input("b", (3,), lm.int64)
    g.output(a % b)
    g.output(a.fmod(b).mul(2).add(1))  # inside a fused region
    cg = g.compile(device="cpu")
    lo = np.array([5, -7, np.iinfo(np.int64).min], np.int64)
    with pytest.raises(DivisionByZero):
        cg(lo, np.array([1, 0, 1], np.int64))
    got = cg(lo, np.array([2, 3, -1], np.int64))  # the flag is the call's own
    np.testing.assert_array_equal(got[0], [1, 2, 0])
    np.testing.assert_array_equal(got[1], [3, -1, 1])


def test_without_a_c_compiler_it_warns_once_and_runs_numpy(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setattr(cpu_runtime, "_warned", set())
    g = lm.Graph()
    x = g.input("x", (4,))
    g.output(x.exp())
    with pytest.warns(RuntimeWarning, match="apt-get install gcc"):
        cg = g.compile(device="cpu")
    assert isinstance(cg.runtime, NumpyRuntime)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        g.compile(device="cpu")
    np.testing.assert_allclose(cg(x=np.ones(4, np.float32))[0], np.exp(np.ones(4, np.float32)), rtol=1e-6)


def test_two_threads_get_their_own_answers():
    g = lm.Graph()
    x = g.input("x", ("n", 64))
    w = g.constant(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), name="w")
    g.output(((x @ w).softmax(-1) * x).sum(-1))
    cg = g.compile(device="cpu")
    inputs = [np.random.default_rng(s).standard_normal((n, 64)).astype(np.float32) for s, n in ((1, 300), (2, 7))]
    wants = [g.run(x=a)[0] for a in inputs]
    errors = []

    def worker(k):
        try:
            for _ in range(40):
                np.testing.assert_allclose(cg(x=inputs[k])[0], wants[k], rtol=1e-5, atol=1e-5)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 1, 0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_second_build_is_a_verified_cache_hit(tmp_path, monkeypatch, one_library):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    other = lm.Graph()  # the libraries a process builds once, on its first runtime, built first (run
    other.output(other.input("y", (3,)).exp())  # alone, this test would count them)
    CpuRuntime(other.output_nodes)
    g = lm.Graph()
    x = g.input("x", ("n",))
    g.output(x.sin() * 2)
    builds, hits = build.stats.builds, build.stats.cache_hits
    first = CpuRuntime(g.output_nodes)
    assert build.stats.builds == builds + 1
    second = CpuRuntime(g.output_nodes)
    assert build.stats.builds == builds + 1 and build.stats.cache_hits == hits + 1  # nothing compiled
    assert second.library_path == first.library_path and first.library_path.parent == tmp_path / "cpu"
    tampered = tmp_path / "tampered.so"  # a new file renamed over it (the loaded one stays mapped)
    tampered.write_bytes(first.library_path.read_bytes()[:-1] + b"\1")
    os.replace(tampered, first.library_path)
    third = CpuRuntime(g.output_nodes)
    assert build.stats.builds == builds + 2
    a = np.linspace(-3, 3, 11, dtype=np.float32)
    np.testing.assert_allclose(third({"x": a})[0], np.sin(a) * 2, rtol=1e-6, atol=1e-6)


def test_every_loop_split_over_three_threads(monkeypatch):
    """Each thread's range of rows starts mid-tensor (indices split once, then carried): forced
    here on small tensors (no work threshold, no dynamic team sizing)."""
    from luminal.kernels.cpu import program
    from luminal.kernels.render import dialect

    monkeypatch.setattr(dialect, "PAR_MIN", 1)
    monkeypatch.setattr(program, "DRIVER", program.DRIVER.replace("omp_set_dynamic(!lum_blas_in_team)", "omp_set_dynamic(0)"))
    monkeypatch.setattr(cpu_runtime, "threads", lambda: 3)
    g = lm.Graph("split")
    x, i = g.input("x", (3, 5, 7)), g.input("i", (3, 5, 2), lm.int64)
    g.output(x.softmax(-1))
    g.output(x.permute(2, 0, 1).sum(-1))
    g.output(x.max(1))
    g.output((x[:, 1:, ::2].exp() + 1).sqrt())
    g.output(x.gather(2, i))
    cg = g.compile(device="cpu")
    assert "omp_set_dynamic(0)" in cg.runtime.source
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((3, 5, 7)).astype(np.float32), "i": rng.integers(0, 7, (3, 5, 2))}
    for (name, _), out, want in zip(g.outputs, cg(feeds), g.run(feeds)):
        _same(out, want, name)


def test_a_failing_compiler_warns_and_runs_numpy(monkeypatch, tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'cc: error: unrecognized option' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setattr(cpu_runtime, "_warned", set())
    monkeypatch.setattr(build, "_version", lambda cc: "fake 1.0")
    g = lm.Graph()
    x = g.input("x", (3,))
    g.output(x.sqrt())
    with pytest.warns(RuntimeWarning, match="unrecognized option"):
        cg = g.compile(device="cpu")
    assert isinstance(cg.runtime, NumpyRuntime)


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_division_by_a_subnormal_is_a_division(device):
    """x / y is x * recip(y) in the primitives; an optimized region divides (exact arithmetic
    allows it, and recip of a subnormal would overflow): the result is torch's."""
    torch = pytest.importorskip("torch")
    g = lm.Graph()
    x, y = g.input("x", (4,)), g.input("y", (4,))
    g.output(x / y)
    xv = np.array([1e-45, 2e-45, 1.0, -3e-39], np.float32)
    yv = np.array([1e-45, 1e-45, 3.0, 1e-39], np.float32)
    want = (torch.from_numpy(xv) / torch.from_numpy(yv)).numpy()
    (got,) = g.compile(device=device)({"x": xv, "y": yv})
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_deeply_nested_max_builds_in_linear_text():
    """24 nested NaN-aware max/min in one fused region (an ONNX Max of 24 inputs): the C macro
    names its first argument once, so the text grows linearly (it doubled per level: a 24-deep
    max did not build in 300 s)."""
    g = lm.Graph("nested_max")
    xs = [g.input(f"x{i}", (8,)) for i in range(24)]
    hi, lo = xs[0], xs[0]
    for x in xs[1:]:
        hi, lo = hi.maximum(x), lo.minimum(x)
    g.output(hi)
    g.output(lo)
    cg = g.compile(device="cpu")
    assert isinstance(cg.runtime, CpuRuntime)  # built (a build failure would warn and run NumPy)
    rng = np.random.default_rng(3)
    feeds = {f"x{i}": rng.standard_normal(8).astype(np.float32) for i in range(24)}
    feeds["x5"][1] = np.nan
    for out, want in zip(cg(feeds), g.run(feeds)):
        _same(out, want, "nested max/min")
