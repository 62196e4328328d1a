"""The fused im2col GEMM's scratch (`luminal/kernels/cpu/conv_gemm.py`, `steps.im2col_scratch`).

The arena gives an absorbed im2col copy only what the kernel's tiles use, and the padded copy
it reads through nothing, so a convolution's memory is its output, not its im2col matrix. A
weight's gradient (deep and narrow: K = batch x positions) tiles its depth: partial products
summed in tile order. Both forms are checked against the NumPy runtime and torch, at both
precisions, on teams of 1 to 4 threads (the bits must not depend on the team), with NaN and
inf in the input, and from stored artifacts.
"""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal.builder import nn
from luminal.frontends.torch.aten_backward import _weight_grad
from luminal.hlir.ops import Op
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.cpu import steps as cpu_steps

torch = pytest.importorskip("torch")

X, GO, W = (4, 3, 96, 96), (4, 8, 48, 48), (8, 3, 7, 7)  # a stem conv: 7x7, stride 2, pad 3


def _graph():
    g = lm.Graph("scratch")
    x, go, w = g.input("x", X), g.input("go", GO), g.input("w", W)
    g.output(nn.conv(x, w, None, 2, 3), "y")  # K = 147, N = 2304: column tiles
    g.output(_weight_grad(x, go, (7, 7), [2, 2], [3, 3], [1, 1], 1), "gw")  # K = 9216, N = 147: depth tiles
    return g


def _feeds(rng, special: bool):
    x = rng.standard_normal(X).astype(np.float32)
    if special:
        x[0, 1, 10, 20], x[1, 2, 50, 3], x[1, 0, 95, 95] = np.nan, np.inf, -np.inf
    return {"x": x, "go": rng.standard_normal(GO).astype(np.float32),
            "w": (rng.standard_normal(W) * 0.1).astype(np.float32)}


def _torch(feeds):
    x, go, w = (torch.from_numpy(feeds[k]) for k in ("x", "go", "w"))
    y = torch.nn.functional.conv2d(x, w, None, 2, 3)
    gw = torch.nn.grad.conv2d_weight(x, W, go, 2, 3)
    return [y.numpy(), gw.numpy()]


def test_depth_tiles_are_chosen_for_a_weight_gradient_only():
    assert cpu_steps.k_tiled(4608, 147, 8) and not cpu_steps.k_tiled(147, 2304, 8)
    assert not cpu_steps.k_tiled(4608, 147, 4608)  # partials larger than the copy: column tiles
    assert not cpu_steps.k_tiled(2000, 147, 8)  # a small copy: one tile of columns holds it
    # the scratch never depends on more threads than the call's team, and shrinks to one tile
    one, four = (cpu_steps.im2col_scratch(100352, 147, 32, t, False) for t in (1, 4))  # resnet's stem, batch 8
    assert one < four < 100352 * 147 / 10
    assert cpu_steps.im2col_scratch(4608, 147, 8, 64, False) == cpu_steps.im2col_scratch(4608, 147, 8, 3, False)
    assert cpu_steps.im2col_scratch(147, 2304, 8, 2, False) <= 2 * 147 * cpu_steps.TILE_PAR + 147 * 1783
    assert cpu_steps.im2col_scratch(4608, 147, 8, 2, True) <= 4608 * 147  # float64: column tiles


@pytest.mark.parametrize("special", [False, True])
def test_fused_gemms_match_numpy_and_torch_on_any_team(monkeypatch, special):
    rng = np.random.default_rng(7)
    feeds = _feeds(rng, special)
    g = _graph()
    want = g.compile(device="numpy")(feeds)
    for a, b in zip(want, _torch(feeds)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4, equal_nan=True)
    compiled = g.compile(device="cpu")
    steps = compiled.runtime.program.steps
    copies = {id(s.output) for s in steps if s.absorbed}  # the two im2col copies (the padded input is shared)
    fused = [s for s in steps if s.output.op is Op.MAT_MUL and any(id(i) in copies for i in s.inputs)]
    assert len(fused) == 2 and len(copies) == 2, [(s.name, s.absorbed) for s in steps]
    results = {}
    for team in (1, 2, 3, 4):
        monkeypatch.setattr(cpu_runtime, "threads", lambda team=team: team)
        for precision in ("float32", "float64"):
            previous = lm.set_precision(precision)
            try:
                got = compiled(feeds)
            finally:
                lm.set_precision(previous)
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4, equal_nan=True)
            results.setdefault(precision, []).append(got)
    for runs in results.values():  # the same bits on every team
        for got in runs[1:]:
            for a, b in zip(got, runs[0]):
                np.testing.assert_array_equal(a, b)
    restored = cpu_runtime.CpuRuntime(compiled.outputs, artifacts=compiled.runtime.artifacts())
    assert restored.restored and [s.absorbed for s in restored.program.steps] == [s.absorbed for s in steps]
    for a, b in zip(restored(feeds), want):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4, equal_nan=True)


def test_arena_holds_tiles_not_the_im2col_matrices(monkeypatch):
    monkeypatch.setattr(cpu_runtime, "threads", lambda: 2)
    compiled = _graph().compile(device="cpu")
    compiled(_feeds(np.random.default_rng(1), False))
    im2col_bytes = 4 * (4 * 147 * 2304)  # either copy, in full (the same size)
    # the padded input, the output, the gradient's copy and the larger kernel's tiles
    assert compiled.runtime.arena_bytes < 0.6 * im2col_bytes, compiled.runtime.arena_bytes
