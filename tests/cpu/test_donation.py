"""Donated inputs (`kernels/cpu/donation.py`): a call may write an output into an input whose memory
the caller gives up, only once every step reading that input is done, and never into memory another
input shares; the values are the same either way."""

from __future__ import annotations

import numpy as np
import pytest

import luminal as lm
from luminal import devices
from luminal.kernels.cpu import donation

pytestmark = pytest.mark.skipif(not devices.get("cpu").available, reason="no C compiler")


@pytest.fixture(autouse=True)
def _built_now(monkeypatch):
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")


def _graph():
    """a and b read by their sum only; w2 by the second GEMM, which writes the output."""
    g = lm.Graph("donation")
    a, b = g.input("a", (64, 1024)), g.input("b", (64, 1024))
    w, w2 = g.input("w", (1024, 256)), g.input("w2", (256, 256))
    h = (a + b) @ w
    g.output((h @ w2).sigmoid(), "out")
    g.output(h.sum(-1), "small")  # under donation.MIN_BYTES: the output pool's
    return g.compile(device="cpu")


def _feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal((64, 1024)).astype(np.float32),
            "b": rng.standard_normal((64, 1024)).astype(np.float32),
            "w": rng.standard_normal((1024, 256)).astype(np.float32) / 32,
            "w2": rng.standard_normal((256, 256)).astype(np.float32) / 16}


def test_an_output_goes_into_an_input_read_for_the_last_time_before_it():
    cg = _graph()
    want = cg(_feeds())
    feeds = _feeds()
    before = cg.runtime.stats()
    got = cg.call_donating(feeds, frozenset({"a"}))
    assert np.shares_memory(got[0], feeds["a"])
    assert not np.shares_memory(got[1], feeds["a"])
    for g_, w_ in zip(got, want):
        np.testing.assert_array_equal(g_, w_)
    after = cg.runtime.stats()
    assert after["donated_outputs"] == before["donated_outputs"] + 1
    # the first GEMM's result, an intermediate written once a + b is read, went into a as well
    assert after["donated_intermediates"] > before["donated_intermediates"]
    again = cg(_feeds())  # a later call without donations: outputs of its own
    assert not np.shares_memory(again[0], got[0])
    np.testing.assert_array_equal(again[0], want[0])


def test_an_input_the_writing_step_reads_is_not_written():
    cg = _graph()
    want = cg(_feeds())
    feeds = _feeds()
    got = cg.call_donating(feeds, frozenset({"w2"}))  # the output's own step reads w2
    assert not any(np.shares_memory(o, feeds["w2"]) for o in got)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(feeds["w2"], _feeds()["w2"])  # left as given


def test_shared_or_misaligned_memory_is_never_a_donor():
    cg = _graph()
    feeds = _feeds()
    want = cg(feeds)
    same = dict(feeds, b=feeds["a"])  # one array as two inputs: the other still reads it
    ref = cg(dict(same))
    got = cg.call_donating(dict(same), frozenset({"a"}))
    assert not np.shares_memory(got[0], same["a"])
    np.testing.assert_array_equal(got[0], ref[0])
    raw = np.zeros(64 * 1024 + 1, np.float32)
    odd = raw[1:].reshape(64, 1024)  # 4 bytes past an aligned address
    odd[:] = feeds["a"]
    got = cg.call_donating(dict(feeds, a=odd), frozenset({"a"}))
    assert not np.shares_memory(got[0], raw)
    np.testing.assert_array_equal(got[0], want[0])


def test_the_plan_packs_each_output_into_the_fullest_donor_dead_before_its_step():
    live = donation.Liveness(writes=(5, 5, 2, -1), last_read=(1, 4, 3))
    big, mid = 4 << 20, 1 << 20
    placed = donation.plan(live, {0: 5 << 20, 1: 2 << 20, 2: 8 << 20}, [big, mid, mid, mid])
    # earliest written first places all three: output 2 (step 2) has only input 0 dead by then;
    # largest first would have filled input 0 with outputs 0 and 1 and left output 2 in the pool
    assert placed[2] == (0, 0)
    assert placed[0] == (0, mid)  # the fullest that holds it among inputs 0, 1, 2 (all read before step 5)
    assert placed[1] == (1, 0)
    assert 3 not in placed  # written by no step a donation may precede
    small = donation.plan(live, {0: 5 << 20}, [donation.MIN_BYTES - 1, 0, 0, 0])
    assert small == {}


def test_the_plan_keeps_largest_first_where_it_places_more_bytes():
    mb = 1 << 20
    live = donation.Liveness(writes=(1, 2), last_read=(0,))
    # earliest first would put the megabyte in and leave no room for the 4 MB written after it
    assert donation.plan(live, {0: 4 * mb}, [mb, 4 * mb]) == {1: (0, 0)}


def test_an_output_holds_intermediates_only_before_its_step_writes_it():
    mb = 1 << 20
    live = donation.Liveness(writes=(6, 0), last_read=())
    sizes = [mb, mb, mb, mb]
    intervals = [(1, 2), (3, 5), (5, 7), (0, 1)]
    got = donation.place(live, {}, [2 * mb, 8 * mb], sizes, intervals, movable=[0, 1, 2])
    # output 0 (host -1) is free up to step 6; output 1 is written at step 0: never a host
    assert got.intermediates == {0: (-1, 0), 1: (-1, 0)}  # their lifetimes do not meet: one place
    assert 2 not in got.intermediates  # read at step 7, after the output's step
    assert 3 not in got.intermediates  # not movable
    assert got.total == mb  # intermediates 2 and 3 overlap at no step: one megabyte of arena
    whole = sum(sizes)
    hosted = donation.hosted(live, [2 * mb, 8 * mb], sizes, intervals, [0, 1, 2], whole)
    assert hosted is not None and hosted.intermediates == got.intermediates
    assert donation.hosted(live, [2 * mb, 8 * mb], sizes, intervals, [0, 1, 2], got.total) is None  # saves nothing


def test_intermediates_share_a_donor_only_when_their_lifetimes_do_not_meet():
    live = donation.Liveness(writes=(9,), last_read=(0, 0))
    mb = 1 << 20
    sizes = [2 * mb, 2 * mb, 2 * mb, 3 * mb]
    intervals = [(1, 3), (2, 5), (4, 6), (7, 8)]
    got = donation.place(live, {0: 4 * mb, 1: 3 * mb}, [mb], sizes, intervals, movable=[0, 1, 2])
    assert got.outputs == {0: (1, 0)}  # the fuller donor that holds it
    assert 3 not in got.intermediates  # not movable: the arena's
    spans = {k: (j, off, off + sizes[k]) for k, (j, off) in got.intermediates.items()}
    for a in spans:
        for b in spans:
            ja, lo_a, hi_a = spans[a]
            jb, lo_b, hi_b = spans[b]
            meet = intervals[a][0] <= intervals[b][1] and intervals[b][0] <= intervals[a][1]
            if a < b and ja == jb and meet:
                assert hi_a <= lo_b or hi_b <= lo_a, (a, b, spans)
    for k, (j, off, end) in spans.items():
        assert end <= {0: 4 * mb, 1: 3 * mb}[j]
        if j == 1:  # the output's megabyte is taken from step 9 on: none of these lives that long
            assert intervals[k][1] < 9 or off >= mb
    assert got.total >= sizes[3] and all(got.offsets[k] == 0 for k in spans)


def _forward_like():
    """A training forward's shape: activations returned as it goes, the last written at its end,
    megabyte intermediates between them (a GEMM chain)."""
    g = lm.Graph("hosted")
    x, w = g.input("x", (256, 1024)), g.input("w", (1024, 1024))
    h1 = (x @ w).relu()
    g.output(h1 * 2.0, "early")  # written after the first GEMM
    h2 = (h1 @ w).tanh()
    h3 = (h2 @ w).sigmoid()
    g.output((h3 @ w) + h2, "late")  # its step comes last: h2 and h3 may live in its memory
    return g


def _forward_feeds(seed):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((256, 1024)).astype(np.float32),
            "w": rng.standard_normal((1024, 1024)).astype(np.float32) / 32}


def test_a_forwards_intermediates_live_in_its_late_outputs_with_the_same_bits(monkeypatch):
    hosted = _forward_like().compile(device="cpu")
    monkeypatch.setattr(donation, "HOSTED_MIN", 1 << 62)
    plain = _forward_like().compile(device="cpu")
    plain(_forward_feeds(9))  # the layout (and whether outputs hold intermediates) is settled on the first call
    monkeypatch.undo()
    reference = _forward_like().compile(device="numpy")
    feeds = [_forward_feeds(seed) for seed in range(4)]
    for f in feeds:
        got, want = hosted(f), plain(f)
        for g_, w_, r_ in zip(got, want, reference(f)):
            np.testing.assert_array_equal(g_, w_)
            np.testing.assert_allclose(g_, r_, rtol=1e-4, atol=1e-4)
        assert not np.shares_memory(got[0], got[1])
    assert any("held in outputs before their step writes them" in line for line in hosted.runtime.report_lines())
    assert not any("held in outputs" in line for line in plain.runtime.report_lines())
    assert hosted.runtime.stats()["arena_bytes"] < plain.runtime.stats()["arena_bytes"]
    # two threads on one compiled graph: each call's outputs are its own, so are the intermediates in them
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda f: hosted(f), feeds * 4))
    for f, got in zip(feeds * 4, results):
        for g_, w_ in zip(got, plain(f)):
            np.testing.assert_array_equal(g_, w_)
