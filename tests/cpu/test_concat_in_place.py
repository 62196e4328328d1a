"""CONCATs without a copy (`kernels/cpu/concat_in_place.py`): the operands computed inside the
result's buffer, the CONCAT's step a no-op. The values are the copy's bit for bit, with NaN and
-0.0 among them, an operand read again after the CONCAT, three operands (nested CONCATs), a stored
and restored runtime, and donated inputs; and the cases that keep the copy do."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import devices
from luminal.builder import functional as F
from luminal.builder import nn
from luminal.kernels.arena import ArenaLayout
from luminal.kernels.cpu import concat_in_place
from luminal.kernels.cpu.runtime import CpuRuntime

pytestmark = pytest.mark.skipif(not devices.get("cpu").available, reason="no C compiler")


@pytest.fixture(autouse=True)
def _built_now(monkeypatch):
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")


def _feeds(shapes, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    x = feeds["x"].reshape(-1)
    x[:3] = [np.nan, -0.0, np.inf]
    return feeds


def _fire(batch=1, squeeze=8, expand=16, hw=12):
    """A SqueezeNet fire module: two branches of one squeeze, concatenated on the channels, then read."""
    g = lm.Graph("fire")
    x = g.input("x", (batch, 4, hw, hw))
    s = g.input("s", (squeeze, 4, 1, 1))
    e1, e3 = g.input("e1", (expand, squeeze, 1, 1)), g.input("e3", (expand, squeeze, 3, 3))
    sq = nn.conv(x, s, None, 1, 0, 1, 1).relu()
    a = nn.conv(sq, e1, None, 1, 0, 1, 1).relu()
    b = nn.conv(sq, e3, None, 1, 1, 1, 1).relu()
    y = F.concat([a, b], 1)
    g.output((y * 2.0).sum(1), "out")
    shapes = {"x": (batch, 4, hw, hw), "s": (squeeze, 4, 1, 1), "e1": (expand, squeeze, 1, 1), "e3": (expand, squeeze, 3, 3)}
    return g, shapes


def _noop_concats(runtime) -> int:
    return sum(1 for st in runtime.program.steps if st.output.op.name == "CONCAT" and not st.inputs)


def _without(monkeypatch, g):
    monkeypatch.setattr(concat_in_place, "aliases", lambda *a: {})
    return g.compile(device="cpu")


def _same_bits(got, want):
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_a_fire_modules_concat_is_done_in_place_with_the_copys_bits(monkeypatch):
    g, shapes = _fire()
    feeds = _feeds(shapes)
    fast = g.compile(device="cpu")
    assert _noop_concats(fast.runtime) == 1
    got = fast(feeds)
    copied = _without(monkeypatch, g)
    assert _noop_concats(copied.runtime) == 0
    _same_bits(got, copied(feeds))
    np.testing.assert_allclose(got[0], g.run(feeds)[0], rtol=1e-5, atol=1e-5)


def test_an_operand_read_through_a_view_that_only_renames_its_dims(monkeypatch):
    """A 1x1 conv's GEMM result, (1, 1, C, H*W), read by the CONCAT as (1, C, H, W): the GEMM
    writes into the CONCAT's buffer. A transposed operand keeps the copy."""
    g, shapes = _fire(expand=32)
    feeds = _feeds(shapes)
    x, s, e1 = (g.inputs[k] for k in ("x", "s", "e1"))
    from luminal.builder.tensor import Tensor
    sq = nn.conv(Tensor(g, x), Tensor(g, s), None, 1, 0, 1, 1)
    a = nn.conv(sq, Tensor(g, e1), None, 1, 0, 1, 1)  # no activation: the GEMM's own buffer, viewed
    g.output(F.concat([a, sq.exp()], 1).sum(1), "plain")
    t = (sq * 2.0).relu()
    g.output(F.concat([t.permute((0, 1, 3, 2)), sq.sigmoid()], 1).sum(1), "moved")  # its own second operand
    fast = g.compile(device="cpu")
    assert _noop_concats(fast.runtime) == 2  # the fire module's and the plain one's, not the moved one's
    got = fast(feeds)
    _same_bits(got, _without(monkeypatch, g)(feeds))
    for a_, b_ in zip(got, g.run(feeds)):
        np.testing.assert_allclose(a_, b_, rtol=1e-5, atol=1e-5)


def test_three_operands_an_operand_read_again_and_a_restored_runtime(monkeypatch):
    g = lm.Graph("three")
    x = g.input("x", (1, 64, 8, 8))
    a, b, c = (x * 2.0).relu(), (x + 1.0).exp(), x.sigmoid()
    y = F.concat([a, b, c], 1)  # CONCAT(CONCAT(a, b), c): the inner one inside the outer
    g.output(y.sum((2, 3)) + b.sum((1, 2, 3)).reshape((1, 1)), "out")  # b read again after it
    feeds = _feeds({"x": (1, 64, 8, 8)})
    fast = g.compile(device="cpu")
    assert _noop_concats(fast.runtime) == 2
    got = fast(feeds)
    rt = fast.runtime  # no buffer alive beside the outer result overlaps it (the operands are inside it)
    total, offsets, _, _, sizes = rt._layout({}, 2, False)[:5]
    ArenaLayout(tuple(int(o) for o in offsets[:len(sizes)]), total).check(sizes, rt.intervals)
    for k, holder, at in rt._aliases:
        assert offsets[k] == offsets[holder] + at and sizes[k] == 0
    restored = CpuRuntime(fast.runtime._declared, artifacts=fast.runtime.artifacts())
    assert restored.restored
    _same_bits(restored({"x": feeds["x"]}), got)
    _same_bits(got, _without(monkeypatch, g)(feeds))


def test_donated_inputs_keep_the_concat_in_place():
    g = lm.Graph("donated")
    x, w = g.input("x", (1, 128, 32, 32)), g.input("w", (1, 128, 32, 32))
    a = (x * w).relu().reshape((1, 2, 64, 32, 32)).sum(1)
    b = (x + w).tanh().reshape((1, 2, 64, 32, 32)).sum(1)
    g.output(F.concat([a, b], 1) * 3.0, "out")  # as large as a donor: it fits in one
    feeds = _feeds({"x": (1, 128, 32, 32), "w": (1, 128, 32, 32)})
    cg = g.compile(device="cpu")
    assert _noop_concats(cg.runtime) == 1
    want = cg(feeds)
    before = cg.runtime.stats()["donated_outputs"]
    _same_bits(cg.call_donating({k: v.copy() for k, v in feeds.items()}, frozenset({"x", "w"})), want)
    assert cg.runtime.stats()["donated_outputs"] == before + 1  # the placement with donors ran


@pytest.mark.parametrize("case", ["batch_of_two", "concat_returned", "operand_returned", "unaligned_run"])
def test_what_keeps_the_copy(case, monkeypatch):
    g = lm.Graph(case)
    if case == "batch_of_two":  # each operand is two runs of the result, not one
        x = g.input("x", (2, 64, 4, 4))
        g.output(F.concat([x.relu(), x.exp()], 1).sum(1), "out")
        shapes = {"x": (2, 64, 4, 4)}
    elif case == "concat_returned":  # an output has an array of its own
        x = g.input("x", (1, 64, 4, 4))
        g.output(F.concat([x.relu(), x.exp()], 1), "out")
        shapes = {"x": (1, 64, 4, 4)}
    elif case == "operand_returned":
        x = g.input("x", (1, 64, 4, 4))
        r = x.relu()
        g.output(F.concat([r, x.exp()], 1).sum(1), "out")
        g.output(r, "r")
        shapes = {"x": (1, 64, 4, 4)}
    else:  # 3 x 5 x 5 floats: the second run at 300 bytes, off the arena's alignment
        x = g.input("x", (1, 3, 5, 5))
        g.output(F.concat([x.relu(), x.exp()], 1).sum(1), "out")
        shapes = {"x": (1, 3, 5, 5)}
    feeds = _feeds(shapes)
    cg = g.compile(device="cpu")
    assert any(st.output.op.name == "CONCAT" for st in cg.runtime.program.steps)
    assert _noop_concats(cg.runtime) == 0
    got = cg(feeds)
    for a, b in zip(got, g.run(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
