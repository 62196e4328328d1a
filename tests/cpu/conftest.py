"""Fixtures of the tiered cpu runtime's tests (test_cpu_tiered.py, test_cpu_tiered_precision.py)."""

import threading

import pytest

from luminal.kernels.cpu import runtime as cpu_runtime


@pytest.fixture
def on(monkeypatch, tmp_path):
    monkeypatch.setenv("LUMINAL_TIERED", "1")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))


@pytest.fixture
def held(monkeypatch):
    """The background build waits for `held.set()` (so a test decides when the C is ready)."""
    gate = threading.Event()
    real = cpu_runtime.CpuRuntime

    def slow(*args, **kwargs):
        assert gate.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu_runtime, "CpuRuntime", slow)
    yield gate
    gate.set()
