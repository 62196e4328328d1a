"""Large outputs of the cpu runtime come from reused blocks (`kernels/cpu/output_pool.py`): a
block is reused only once nothing can reach its array, and never holds more than its limit."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.kernels.cpu import output_pool
from luminal.kernels.cpu.output_pool import MIN_BYTES, OutputPool

SHAPE = (512, 1024)  # 2 MiB of f32: pooled


def test_a_block_comes_back_only_when_every_view_and_tensor_of_its_array_is_gone():
    pool = OutputPool(64 << 20)
    a = pool.empty(SHAPE, np.float32)
    a[:] = 1.0
    view, transposed, tensor = a[1:, ::2], a.T, torch.from_numpy(a)
    del a
    gc.collect()
    b = pool.empty(SHAPE, np.float32)  # the first block is still reachable: a new one
    assert not np.shares_memory(b, view) and pool.made == 2 and pool.reused == 0
    del view, transposed
    gc.collect()
    c = pool.empty(SHAPE, np.float32)
    assert c.ctypes.data != tensor.data_ptr() and pool.reused == 0
    del tensor
    gc.collect()
    d = pool.empty(SHAPE, np.float32)
    assert pool.reused == 1 and d.flags.writeable and d.flags.c_contiguous and d.shape == SHAPE
    assert pool.empty((4, 4), np.float32).flags.owndata  # small: plain arrays
    assert pool.empty((0, 1 << 20), np.float32).shape == (0, 1 << 20)


def test_the_pool_keeps_at_most_its_limit_and_zero_turns_it_off(monkeypatch):
    pool = OutputPool(3 * MIN_BYTES)
    arrays = [pool.empty((MIN_BYTES,), np.uint8) for _ in range(4)]
    del arrays
    gc.collect()
    assert pool.free_bytes == 3 * MIN_BYTES
    big = pool.empty((4 * MIN_BYTES,), np.uint8)  # larger than the limit: never kept
    del big
    gc.collect()
    assert pool.free_bytes == 3 * MIN_BYTES
    off = OutputPool(0)
    assert off.empty(SHAPE, np.float32).flags.owndata and off.made == 0
    monkeypatch.setenv("LUMINAL_OUTPUT_POOL_MB", "lots")
    with pytest.raises(ValueError, match="LUMINAL_OUTPUT_POOL_MB"):
        output_pool._limit()


def _graph():
    g = lm.Graph("pooled")
    x = g.input("x", SHAPE)
    g.output((x * 2.0).sin(), "y")
    g.output(x.sum(1), "s")
    return g.compile(device="cpu")


def test_a_later_call_never_writes_into_an_output_still_held():
    compiled = _graph()
    rng = np.random.default_rng(0)
    first_in, second_in = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    kept = compiled({"x": first_in})[0]
    want = np.sin(first_in * np.float32(2.0))
    for _ in range(3):
        compiled({"x": second_in})  # their outputs dropped at once: their blocks are reused
    np.testing.assert_allclose(kept, want, rtol=1e-6, atol=1e-6)
    before = output_pool.POOL.reused
    np.testing.assert_allclose(compiled({"x": second_in})[0], np.sin(second_in * np.float32(2.0)), rtol=1e-6, atol=1e-6)
    assert output_pool.POOL.reused > before


def test_two_threads_on_one_compiled_graph_get_their_own_outputs():
    compiled = _graph()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2)]
    want = [np.sin(x * np.float32(2.0)) for x in inputs]
    errors = []

    def work(k):
        try:
            for _ in range(20):
                np.testing.assert_allclose(compiled({"x": inputs[k]})[0], want[k], rtol=1e-6, atol=1e-6)
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
