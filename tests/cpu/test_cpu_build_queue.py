"""One queue for the compilers of a process (luminal/kernels/cpu/build_queue.py): at most one
per core at a time however many models build in the background, and the build of a model that
was freed is cancelled (queued: never runs; running: its compiler is killed)."""

import gc
import os
import re
import time

import numpy as np
import pytest

import luminal as lm
from luminal.kernels.cpu import build, build_queue

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")

FEEDS = {"x": np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)}


def _graph(i: int):
    g = lm.Graph(f"queue{i}")
    x = g.input("x", ("n", 8))
    g.output((x * float(i + 2)).exp().sum(-1) - x.min(-1), "y")
    return g


@pytest.fixture
def background(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_TIERED", "1")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LUMINAL_GEMM", "blas")  # no AVX-512 SGEMM library beside the models' own


def _wrapper(tmp_path, body: str) -> str:
    """A CC that runs `body` for a library's compile (`-o <x>.so`), the real compiler otherwise."""
    cc = tmp_path / "cc"
    cc.write_text(f"#!/bin/sh\ncase \"$*\" in *\" -o \"*.so*) ;; *) exec {build.compiler()} \"$@\";; esac\n{body}\n")
    cc.chmod(0o755)
    return str(cc)


def _overlap(log: str) -> int:
    events = sorted((float(t), 1 if kind == "start" else -1) for kind, t in re.findall(r"(start|end) \d+ ([\d.]+)", log))
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def test_no_more_compilers_run_at_once_than_there_are_slots(background, tmp_path, monkeypatch):
    """Before: a background build per compiled model, all at once (20+ compilers on 2 cores)."""
    log = tmp_path / "cc.log"
    monkeypatch.setenv("CC", _wrapper(tmp_path, f"""echo "start $$ $(date +%s.%N)" >> {log}
sleep 0.2
{build.compiler()} "$@"; rc=$?
echo "end $$ $(date +%s.%N)" >> {log}
exit $rc"""))
    monkeypatch.setattr(build_queue, "slots", build_queue._Slots(2))
    models = [_graph(i).compile(device="cpu") for i in range(6)]
    firsts = [m(FEEDS)[0] for m in models]  # on the NumPy runtime; the six builds start
    for m, first in zip(models, firsts):
        assert m.runtime.reference_calls == 1
        np.testing.assert_allclose(m(FEEDS)[0], first, rtol=1e-6)  # the C, built
        assert type(m.runtime.wait()).__name__ == "CpuRuntime"
    text = log.read_text()
    assert text.count("start") == 6, text
    assert _overlap(text) <= 2 and build_queue.slots.peak == 2, text


def _wait_for(condition, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_dropped_models_queued_build_never_runs(background, monkeypatch):
    commands = []
    real = build._command
    monkeypatch.setattr(build, "_command", lambda command: commands.append(command) or real(command))
    monkeypatch.setattr(build_queue, "slots", build_queue._Slots(1))
    before = build.stats.builds
    with build_queue.slots.slot(None):  # the only slot: another compiler of this process runs
        compiled = _graph(10).compile(device="cpu")
        compiled(FEEDS)
        thread = compiled.runtime._thread
        _wait_for(lambda: build.stats.builds > before)  # the library's compiler waits for a slot
        time.sleep(0.2)
        del compiled
        gc.collect()
        thread.join(30)
        assert not thread.is_alive()
    libraries = [c for c in commands if any(a.endswith(".so") for a in c)]
    assert not libraries, libraries
    assert not list(build.cache_dir("cpu").glob("*.so"))


def test_a_dropped_models_running_compiler_is_killed(background, tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    monkeypatch.setenv("CC", _wrapper(tmp_path, f"sleep 120 &\necho $$ $! > {pids}\nwait"))
    compiled = _graph(11).compile(device="cpu")
    compiled(FEEDS)
    thread = compiled.runtime._thread
    _wait_for(lambda: pids.exists() and pids.read_text().strip())
    shell, sleeper = map(int, pids.read_text().split())
    t0 = time.monotonic()
    del compiled
    gc.collect()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - t0 < 10
    for pid in (shell, sleeper):  # the compiler and what it started: gone (or a zombie for init to reap)
        _wait_for(lambda pid=pid: not os.path.exists(f"/proc/{pid}") or _state(pid) == "Z", 10)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"
