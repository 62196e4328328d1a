"""A cold cpu build in the background (`luminal.kernels.cpu.tiered`): the first call, when it
comes before the library is built, runs on the NumPy runtime; every later call on the C
(waiting for it); the report, the compile cache's artifacts and a process's exit wait for it;
a failed build warns and keeps the NumPy runtime; deterministic mode and LUMINAL_TIERED=0
turn it off. (tests/conftest.py turns it off for every other test.)"""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import luminal as lm
from luminal import precision
from luminal.builder import nn
from luminal.kernels.cpu import build, tiered
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.cpu.runtime import CpuRuntime
from luminal.runtime import NumpyRuntime

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _graph():
    """Sums, exp and a softmax over f32 rows: the NumPy runtime (even at the C's working
    precision: its own GEMM and summation orders) and the C differ in the last bits of some outputs."""
    rng = np.random.default_rng(0)
    g = lm.Graph("tiered")
    x = g.input("x", ("n", 64))
    w = g.constant(rng.standard_normal((64, 48)).astype(np.float32), name="w")
    h = ((x @ w) * 0.1).exp() + x.sum(-1, keepdim=True)
    g.output(h.softmax(-1) + h.mean(-1, keepdim=True), "y")
    return g


def _feeds(n=9):
    x = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -0.0]
    return {"x": x}


def test_the_first_call_runs_on_the_reference_every_later_call_on_the_c(on, held):
    g = _graph()
    compiled = g.compile(device="cpu")
    rt = compiled.runtime
    assert isinstance(rt, tiered.TieredRuntime) and not rt.ready
    assert compiled._report.cache["build"] == "background"
    first = compiled(_feeds())[0]
    assert rt.reference_calls == 1
    held.set()
    second = compiled(_feeds())[0]
    third = compiled(_feeds(4))[0]
    assert rt.reference_calls == 1 and rt.ready
    reference, c = NumpyRuntime(compiled.outputs, arithmetic=precision.C), CpuRuntime(compiled.outputs)  # the optimized graph
    np.testing.assert_array_equal(first, reference(_feeds())[0])  # the reference's bits, at the C's precision
    np.testing.assert_array_equal(second, c(_feeds())[0])  # the C's bits
    np.testing.assert_array_equal(third, c(_feeds(4))[0])
    assert not np.array_equal(first, second, equal_nan=True)  # they differ: the test tells them apart
    np.testing.assert_allclose(first, second, rtol=1e-5, atol=1e-6)
    report = compiled.report()
    assert report.cache["build"] == "miss" and report.background["build"] > 0
    assert "in the background: build" in str(report) and "1 call(s) ran on the NumPy runtime" in str(report)
    assert "lum_run" in rt.source and rt.stats()["device"] == "cpu"  # the C runtime's, waited for


def test_a_ready_library_serves_the_first_call(on):
    compiled = _graph().compile(device="cpu")
    compiled.runtime.wait()
    compiled(_feeds())
    assert compiled.runtime.reference_calls == 0


def test_a_first_call_the_reference_would_take_long_waits_for_the_c(on, held, monkeypatch):
    """The reference's cost is estimated at the first call's dims: a large one waits for the C."""
    g = _graph()
    compiled = g.compile(device="cpu")
    rt = compiled.runtime
    small = tiered.reference_seconds(rt._reference.order, {"n": 9})
    big = tiered.reference_seconds(rt._reference.order, {"n": 200_000})
    assert 0 < small < big / 1000
    monkeypatch.setattr(tiered, "REFERENCE_BUDGET_S", (small + big) / 2)  # a smaller array than the real budget needs
    threading.Timer(0.3, held.set).start()
    x = np.random.default_rng(0).standard_normal((200_000, 64)).astype(np.float32)
    got = compiled({"x": x})[0]
    assert rt.reference_calls == 0 and rt.reference_estimate == big
    np.testing.assert_array_equal(got, CpuRuntime(compiled.outputs)({"x": x})[0])


def test_the_estimate_follows_the_reference_runtimes_work():
    """More layers, more rows, a conv's window product: each raises the estimate."""
    from luminal.runtime import NumpyRuntime

    def cost(g, **dims):
        return tiered.reference_seconds(NumpyRuntime(g.compile(device="numpy").outputs).order, dims)

    g = _graph()
    assert cost(g, n=10) < cost(g, n=10_000) < cost(g, n=100_000)
    conv = lm.Graph("conv")  # depthwise: the reference materializes the window product
    x = conv.input("x", (32, 32, 128, 128))
    w = conv.constant(np.ones((32, 1, 3, 3), np.float32), name="w")
    conv.output(nn.conv(x, w, padding=1, groups=32))
    assert cost(conv) > tiered.REFERENCE_BUDGET_S  # 32x32x128x128 outputs x 9 taps, in float64


def test_threads_calling_before_the_build_get_one_reference_call(on, held):
    g = _graph()
    compiled = g.compile(device="cpu")
    want = NumpyRuntime(compiled.outputs)(_feeds())[0]
    results, errors = [], []

    def call():
        try:
            results.append(compiled(_feeds())[0])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    threads[0].join(0.5)
    held.set()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 4 and compiled.runtime.reference_calls == 1
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)


def test_off_in_deterministic_mode_and_by_the_environment(on, monkeypatch):
    torch = pytest.importorskip("torch")
    g = _graph()
    assert isinstance(g.compile(device="cpu").runtime, tiered.TieredRuntime)
    torch.use_deterministic_algorithms(True)
    try:
        assert isinstance(g.compile(device="cpu").runtime, CpuRuntime)
    finally:
        torch.use_deterministic_algorithms(False)
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    assert isinstance(g.compile(device="cpu").runtime, CpuRuntime)


def test_a_failed_build_warns_and_keeps_the_reference(on, monkeypatch):
    def broken(*_args, **_kwargs):
        raise build.CpuBuildError("cc could not build x.c:\nerror: no")

    monkeypatch.setattr(cpu_runtime, "CpuRuntime", broken)
    monkeypatch.setattr(cpu_runtime, "_warned", set())
    g = _graph()
    compiled = g.compile(device="cpu")
    want = NumpyRuntime(compiled.outputs, arithmetic=precision.C)(_feeds())[0]  # every call: the C's working precision
    with pytest.warns(RuntimeWarning, match="the C compiler failed"):
        for _ in range(3):  # the first call before the build failed, the fallback after it
            np.testing.assert_array_equal(compiled(_feeds())[0], want)
    assert compiled.runtime.wait() is compiled.runtime._reference


def test_an_unexpected_build_error_is_raised_in_the_caller(on, monkeypatch):
    def broken(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(cpu_runtime, "CpuRuntime", broken)
    compiled = _graph().compile(device="cpu")
    compiled.runtime._ready.wait(60)
    for _ in range(2):  # the build is over: no call runs on the reference, each raises its error
        with pytest.raises(OSError, match="disk full"):
            compiled(_feeds())
    assert compiled.runtime.reference_calls == 0


def test_errors_of_the_first_call_are_the_reference_runtimes(on, held):
    g = lm.Graph("gather")
    table, idx = g.input("t", (5, 3)), g.input("i", (2,), lm.int64)
    g.output(table[idx])
    compiled = g.compile(device="cpu")
    with pytest.raises(lm.IndexOutOfRange):
        compiled({"t": np.zeros((5, 3), np.float32), "i": np.array([1, 7])})
    held.set()
    with pytest.raises(lm.IndexOutOfRange):
        compiled({"t": np.zeros((5, 3), np.float32), "i": np.array([1, 7])})


def test_the_next_process_finds_what_the_background_built(tmp_path):
    """A process that exits right after its first call waits for the build (the thread is not a
    daemon) and stores the artifacts: the next process compiles with no build and no rendering."""
    # imported here: child processes import this module without tests/ on their path
    from processes import run_in_processes

    script = textwrap.dedent(f"""
        import sys, warnings
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
        import numpy as np
        from test_cpu_tiered import _graph, _feeds
        compiled = _graph().compile(device="cpu")
        compiled(_feeds())
        print("CACHE", sorted(compiled._report.cache.items()), type(compiled.runtime).__name__)
    """)
    runs = run_in_processes(script, tmp_path)
    assert "TieredRuntime" in runs[0].stdout and "('build', 'background')" in runs[0].stdout
    assert "CpuRuntime" in runs[1].stdout and "('build', 'hit')" in runs[1].stdout
    assert "('optimize', 'hit')" in runs[1].stdout
    assert not list((tmp_path / "cpu").glob("*.*.so"))  # no half-built library left behind


@pytest.mark.skipif(build._NICE is None, reason="no `nice` on PATH")
def test_the_background_build_runs_its_compilers_at_a_lower_priority(on, monkeypatch):
    """The first call's NumPy runtime gets the cores first (0.64 s beside the library's compilers
    at the same priority, 0.15 s alone, on MiniLM); a build the caller waits for does not."""
    commands = []
    real = build._command

    def record(command):
        commands.append(real(command))
        return commands[-1]

    monkeypatch.setattr(build, "_command", record)
    monkeypatch.setattr(tiered, "FIRST_CALL_WAIT_S", 60.0)
    compiled = _graph().compile(device="cpu")
    time.sleep(0.3)
    assert not commands  # nothing compiles beside the compile's Python or before the first call
    compiled(_feeds())
    assert compiled.runtime.reference_calls == 1
    compiled.runtime.wait()
    assert commands and all(c[:3] == [build._NICE, "-n", str(build.BACKGROUND_NICE)] for c in commands)
    commands.clear()
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(build.cache_dir("cpu").parent / "again"))
    _graph().compile(device="cpu")
    assert any(c[0] != build._NICE for c in commands)  # the library's own units, waited for


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork")
def test_a_child_forked_while_the_library_builds_builds_it_too(tmp_path):
    """A server that compiles, serves a first call and forks its workers: the parent's build
    thread is not in the child, which builds the library itself instead of waiting forever."""
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
        import numpy as np
        from luminal.kernels.cpu import tiered
        from test_cpu_tiered import _graph, _feeds
        tiered.FIRST_CALL_WAIT_S = 60.0
        compiled = _graph().compile(device="cpu")
        first = compiled(_feeds())[0]
        pid = os.fork()
        if pid == 0:
            got = compiled(_feeds())[0]  # the C, built in this child
            ok = compiled.runtime.ready and np.allclose(got, first, rtol=1e-5, atol=1e-6, equal_nan=True)
            os._exit(0 if ok else 3)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("CHILD", os.waitstatus_to_exitcode(status))
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            print("CHILD hung")
        compiled(_feeds())
        print("PARENT", compiled.runtime.ready)
    """)
    env = {**__import__("os").environ, "LUMINAL_TIERED": "1", "LUMINAL_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "CHILD 0" in run.stdout and "PARENT True" in run.stdout, run.stdout + run.stderr[-2000:]


def test_the_compile_cache_is_written_after_the_first_call(tmp_path):
    """With the library building in the background, the compile cache's entries (the optimized
    graph, and torch.compile's link from Dynamo's graph to it) are written on the build thread
    once the first call is over, off its path; a process that exits right after that call still
    leaves them, and the next process's compile hits at Dynamo's level."""
    # imported here: child processes import this module without tests/ on their path
    from processes import run_in_processes, write_behind_script

    script = write_behind_script("cpu")
    runs = run_in_processes(script, tmp_path)
    first = runs[0].stdout
    # on the first call's path: the key and the lookup only; the writes came after it, in the background
    assert "PATH [('build', 'background'), ('optimize', 'miss')] [] True" in first, first
    assert "AFTER ['build', 'cache'] True" in first, first
    assert "('dynamo graph', 'hit')" in runs[1].stdout and "('optimize', 'hit')" in runs[1].stdout, runs[1].stdout
