"""Scatter's updates on the C backend: two updates of one place differ only in the scatter axis,
so the lines along it run across the team, each line in order (`CDialect.elements`,
`ordered_along`). Duplicate indices resolve as NumPy's sequential loop does (the last write
wins, float sums add in index order): bit for bit the NumPy runtime's, along every axis, at
sizes on either side of PAR_MIN and on one to three threads."""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.kernels.cpu import build
from luminal.kernels.render.dialect import PAR_MIN

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def scatter_graph(shape, index_shape, axis, reduce):
    g = lm.Graph(f"scatter{axis}{reduce}")
    x = g.input("x", shape)
    i = g.input("i", index_shape, lm.int64)
    u = g.input("u", index_shape)
    g.output(x.scatter(axis, i, u, reduce=reduce), "y")
    return g


def numpy_scatter(x, idx, upd, axis, reduce):
    """NumPy's sequential meaning: the updates in the index's row-major order."""
    out = x.copy()
    for e in np.ndindex(*idx.shape):
        at = list(e)
        at[axis] = idx[e]
        at = tuple(at)
        out[at] = upd[e] if reduce is None else out[at] + upd[e]
    return out


@pytest.mark.parametrize("reduce", [None, "add"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_duplicate_indices_resolve_as_numpy_across_the_team(axis, reduce):
    rng = np.random.default_rng(axis)
    shape = [24, 40, 36]
    index_shape = list(shape)
    index_shape[axis] = 3 * shape[axis]  # three updates a place on average: many duplicates
    assert int(np.prod(index_shape)) >= PAR_MIN  # the lines across the team
    g = scatter_graph(tuple(shape), tuple(index_shape), axis, reduce)
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    x = rng.standard_normal(shape).astype(np.float32)
    idx = rng.integers(0, shape[axis], index_shape).astype(np.int64)
    upd = (rng.standard_normal(index_shape) * 10.0 ** rng.integers(-3, 4, index_shape)).astype(np.float32)
    feeds = {"x": x, "i": idx, "u": upd}
    want = ref(feeds)[0]
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            np.testing.assert_array_equal(cpu(feeds)[0], want, err_msg=f"{threads} threads")
    finally:
        torch.set_num_threads(before)
    if reduce is None:  # the last write wins, as the sequential loop
        np.testing.assert_array_equal(want, numpy_scatter(x, idx, upd, axis, reduce))
    else:
        np.testing.assert_allclose(want, numpy_scatter(x, idx, upd, axis, reduce), rtol=1e-5, atol=1e-3)


def test_small_scatter_and_an_index_narrower_than_the_output():
    """Below PAR_MIN, and an index shorter than the output in the other dims (torch allows it:
    only the places it names are written)."""
    g = scatter_graph((5, 7), (3, 4), 1, "add")
    cpu, ref = g.compile(device="cpu"), g.compile(device="numpy")
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((5, 7)).astype(np.float32), "i": rng.integers(0, 7, (3, 4)).astype(np.int64),
             "u": rng.standard_normal((3, 4)).astype(np.float32)}
    np.testing.assert_array_equal(cpu(feeds)[0], ref(feeds)[0])


def test_an_index_out_of_range_in_a_line_is_still_an_error():
    g = scatter_graph((64, 64, 32), (64, 64, 32), 2, None)
    cpu = g.compile(device="cpu")
    idx = np.zeros((64, 64, 32), np.int64)
    idx[40, 3, 17] = 32
    with pytest.raises(lm.IndexOutOfRange):
        cpu({"x": np.zeros((64, 64, 32), np.float32), "i": idx, "u": np.ones((64, 64, 32), np.float32)})
