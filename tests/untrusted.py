"""Helpers of the untrusted-file tests (tests/core/test_untrusted_files.py, tests/onnx/test_untrusted_onnx.py):
a time bound, a memory bound and a byte mutator for fuzzing loaders."""

import signal
import tracemalloc
from contextlib import contextmanager

import numpy as np
import pytest

import luminal as lm


@contextmanager
def time_limit(seconds: float, what: str):
    def alarm(*_):
        raise TimeoutError(f"{what} took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


MEMORY_LIMIT = 64 << 20  # bytes a load of these small files may allocate at its peak (tracemalloc sees NumPy too)


def must_fail_cleanly(load, path, what: str, x=None):
    """`load(path)` either works (and the model runs or raises a LuminalError) or raises a
    LuminalError; within a time bound and MEMORY_LIMIT, without running code from the file."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        with time_limit(10, what):
            model = load(path)
    except lm.LuminalError:
        return False
    except MemoryError:
        pytest.fail(f"{what}: MemoryError (an allocation the file did not justify)")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        if started:
            tracemalloc.stop()
        assert peak < MEMORY_LIMIT, f"{what}: loading allocated {peak} bytes"
    with time_limit(10, what):
        if x is not None:
            try:
                model(x=x)
            except lm.LuminalError:
                pass
        return True


def byte_mutants(good: bytes, rng: np.random.Generator, cuts: int = 24, flips: int = 48):
    """(what, bytes): `good` truncated at random offsets (and the edges), then with 1-4 random bits flipped."""
    size = len(good)
    for cut in sorted({int(v) for v in rng.integers(0, size, cuts)} | {0, 1, 22, size - 1}):
        yield f"truncated at {cut}", good[:cut]
    for k in range(flips):
        data = bytearray(good)
        for at in rng.integers(0, size, 1 + k % 4):
            data[at] ^= 1 << int(rng.integers(0, 8))
        yield f"flipped bytes #{k}", bytes(data)
