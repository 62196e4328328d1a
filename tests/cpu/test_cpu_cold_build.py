"""What keeps a cold C build short without changing what runs: static sizes render only the row
loop block (and GEMM batch loop) that runs, and the kernels calling the prelude's GEMMs share one
translation unit (each unit calling them compiles the prelude's GEMM code again)."""

import re

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.cpu import build, program
from luminal.kernels.cpu.prelude import PRELUDE
from luminal.kernels.render.dialect import PAR_MIN

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _rows_graph(n):
    """Row loops of every kind (pointwise, reduce, softmax, concat along a middle axis, a batched
    and a single GEMM) at `n` rows of 301 (an int: static sizes; a name: dynamic)."""
    g = lm.Graph("rows")
    x, y = g.input("x", (n, 301)), g.input("y", (n, 301))
    g.output((x * 2.0 + y).exp().maximum(y), "fused")
    g.output(x.sum(-1), "sum")
    g.output(x.max(-1), "max")
    g.output(x.softmax(-1), "softmax")
    g.output(lm.concat([x.reshape(n, 7, 43), y.reshape(n, 7, 43)], axis=1), "concat")
    w = g.constant(np.random.default_rng(1).standard_normal((301, 5)).astype(np.float32), name="w")
    g.output(x @ w, "gemm")
    g.output(x.reshape(n, 7, 43) @ y.reshape(n, 7, 43).transpose(1, 2), "batched")
    return g


def _feeds(n, rng):
    feeds = {"x": rng.standard_normal((n, 301)).astype(np.float32), "y": rng.standard_normal((n, 301)).astype(np.float32)}
    feeds["x"][0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    feeds["y"][-1, -3:] = [-0.0, np.inf, np.nan]
    return feeds


def _after_prelude(source: str) -> str:
    return source.split(PRELUDE, 1)[1].replace(program.GEMM_LINKED, "")


def _kernels(source: str) -> str:
    return _after_prelude(source.split("lum_run")[0])


@pytest.mark.parametrize("n", [1, 3, PAR_MIN // 301 + 7])  # serial, serial, across the team
def test_static_row_loops_render_the_block_that_runs(n, monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    g = _rows_graph(n)
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    kernels = _kernels(cpu.runtime.source)
    assert "if (n_rows > 1 &&" not in kernels  # decided while rendering
    if n == 1:
        assert "lum_batch_parallel" not in kernels and "#pragma omp parallel" not in kernels
    if n > PAR_MIN // 301:
        assert "#pragma omp parallel\n" in kernels
    for (name, _), got, want in zip(g.outputs, cpu(feeds := _feeds(n, np.random.default_rng(n))), ref(feeds)):
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]), err_msg=name)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=f"{name} n={n}")


def test_dynamic_row_loops_keep_the_run_time_test(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    g = _rows_graph("n")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    kernels = _kernels(cpu.runtime.source)
    assert "if (n_rows > 1 &&" in kernels and "lum_batch_parallel" in kernels
    for n in (1, PAR_MIN // 301 + 7):
        for (name, _), got, want in zip(g.outputs, cpu(feeds := _feeds(n, np.random.default_rng(n))), ref(feeds)):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=f"{name} n={n}")


def _unit_kernels(source: str) -> set[str]:
    return set(re.findall(r"^static void (\w+)\(", _after_prelude(source), re.M))


def test_gemm_kernels_share_the_first_unit(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "units", lambda kernels: 2)
    g = _rows_graph(3)
    rt = g.compile(device="cpu").runtime
    first, second = rt.program.sources
    gemms = {k for k in rt.program.kernels if k.startswith("matmul_")}
    assert len(gemms) == 2 and gemms <= _unit_kernels(first)
    assert _unit_kernels(second) and "lum_gemm_" not in _after_prelude(second)
    assert _unit_kernels(first) | _unit_kernels(second) == set(rt.program.kernels)
    for (name, _), got, want in zip(g.outputs, rt(feeds := _feeds(3, np.random.default_rng(0))), g.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=name)


def test_no_unit_without_a_kernel():
    """Only GEMM kernels: one unit, however many the machine could compile at once."""
    bodies = {"matmul_a": ("static void matmul_a(void) { lum_gemm_f(0); }", None),
              "matmul_b": ("static void matmul_b(void) { lum_gemm_f(1); }", None)}
    steps = {n: program.CStep(n, None, [], [], False) for n in bodies}
    bodies = {n: (code, steps[n]) for n, (code, _) in bodies.items()}
    assert len(program.library_source(bodies, 4)) == 1
    bodies["add_c"] = ("static void add_c(void) { }", program.CStep("add_c", None, [], [], False))
    assert len(program.library_source(bodies, 4)) == 2


def _objects(directory):
    return sorted((directory / "cpu").glob("*.o"))


def test_the_gemm_object_is_built_once_and_linked(monkeypatch, tmp_path):
    """Every library calling a GEMM links the one cached GEMM object (the prelude's own copies in
    its units are unused); a second library reuses it, and it is not part of a library without
    GEMMs."""
    import ctypes

    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "spare_core", lambda: True)
    ga, gb = _rows_graph(3), _rows_graph(5)
    a = ga.compile(device="cpu")
    (obj,) = _objects(tmp_path)
    built = obj.stat().st_ino
    assert "lum_ext_gemm_f(" in a.runtime.source and "lum_ext_gemm_f" in _symbols(a.runtime.library_path)
    b = gb.compile(device="cpu")
    assert b.runtime.library_path != a.runtime.library_path
    assert _objects(tmp_path) == [obj] and obj.stat().st_ino == built  # not built again
    g = lm.Graph("no_gemm")
    x = g.input("x", (3, 4))
    g.output(x.exp(), "e")
    c = g.compile(device="cpu")
    assert "lum_ext_gemm_f" not in _symbols(c.runtime.library_path)
    ctypes.CDLL(str(c.runtime.library_path))
    feeds = _feeds(5, np.random.default_rng(2))
    for (name, _), got, want in zip(gb.outputs, b(feeds), gb.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=name)


def _symbols(library) -> str:
    import subprocess

    return subprocess.run(["nm", str(library)], capture_output=True, text=True).stdout


def test_a_corrupt_gemm_object_is_rebuilt(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    first = build.compiled_object(program.GEMM_OBJECT)
    good = first.read_bytes()
    first.write_bytes(good[:-64] + b"\0" * 64)  # not the bytes its sha256 names: never linked
    again = build.compiled_object(program.GEMM_OBJECT)
    assert again == first and again.read_bytes() == good
    first.unlink()
    assert build.compiled_object(program.GEMM_OBJECT).read_bytes() == good


def test_prepare_builds_in_the_background_and_the_build_waits(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_objects", {})
    monkeypatch.setattr(build, "spare_core", lambda: True)
    program.prepare()
    program.prepare()  # once per process
    (thread,) = build._objects.values()
    obj = build.compiled_object(program.GEMM_OBJECT)  # waits for the thread's build
    assert not thread.is_alive() and _objects(tmp_path) == [obj]


def test_a_busy_machine_compiles_the_prelude_gemms_until_the_object_is_there(monkeypatch, tmp_path):
    """No core to spare and no object yet: prepare() starts nothing (it would slow the Python
    phases as much as it saves), and the library compiles the prelude's GEMMs (cheaper than the
    object: specialized to its calls). Once the object is in the cache, libraries link it."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_objects", {})
    monkeypatch.setattr(build, "spare_core", lambda: False)
    program.prepare()
    assert not build._objects and not _objects(tmp_path)
    g = _rows_graph(3)
    cpu = g.compile(device="cpu")
    assert not _objects(tmp_path) and "lum_ext_gemm_f" not in _symbols(cpu.runtime.library_path)
    build.compiled_object(program.GEMM_OBJECT)
    g5 = _rows_graph(5)
    cpu5 = g5.compile(device="cpu")
    assert "lum_ext_gemm_f" in _symbols(cpu5.runtime.library_path)
    for graph, compiled in ((g, cpu), (g5, cpu5)):
        feeds = _feeds(3 if graph is g else 5, np.random.default_rng(3))
        for (name, _), got, want in zip(graph.outputs, compiled(feeds), graph.run(feeds)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=name)


def test_the_object_builds_beside_one_unit(monkeypatch, tmp_path):
    """A core to spare at render time but the object not started: the library's build compiles it
    beside its one unit (compiled to an object, then linked with it)."""
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_objects", {})
    monkeypatch.setattr(program, "prepare", lambda: None)
    monkeypatch.setattr(build, "units", lambda kernels: 1)
    monkeypatch.setattr(build, "spare_core", lambda: True)
    g = _rows_graph(3)
    cpu = g.compile(device="cpu")
    assert len(_objects(tmp_path)) == 1 and "lum_ext_gemm_f" in _symbols(cpu.runtime.library_path)
    for (name, _), got, want in zip(g.outputs, cpu(feeds := _feeds(3, np.random.default_rng(4))), g.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=name)
