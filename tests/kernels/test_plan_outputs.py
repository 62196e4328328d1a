"""Every output of a compiled graph is its own buffer, however often the graph lists one node:
nodes are interned, so the copy the plan gives a repeated output must not be a node it already
holds (a constant listed twice once came back as uninitialized memory on the kernel devices)."""

import numpy as np
import pytest

import luminal as lm

DEVICES = ["numpy", "cpu", "cuda-emulator"]


def _graph():
    g = lm.Graph()
    x = g.input("x", ("n",))
    y = x.exp()
    empty_prod = x[:0].prod(0)  # folds to the constant 1.0, as does its square
    for t in [x, x, y, y, y, x[1:], x[1:], empty_prod, y.abs(), empty_prod * empty_prod]:
        g.output(t)
    return g


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_repeated_outputs_are_each_computed_and_owned(device, optimize):
    x = np.array([0.5, -1.0, 2.0], np.float32)
    expected = _graph().compile(device="numpy", optimize=False)({"x": x})
    outs = _graph().compile(device=device, optimize=optimize)({"x": x})
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    if device != "numpy":  # the kernel devices hand out a fresh buffer per output
        assert len({id(o) for o in outs}) == len(outs)
        assert not any(np.shares_memory(a, b) for i, a in enumerate(outs) for b in outs[i + 1:])
