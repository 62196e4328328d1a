"""Random numbers (`Op.PHILOX`, `luminal/builder/random.py`, `luminal/runtime/rng.py`): Philox
4x32-10 against Random123's known answers and an independent scalar implementation; uniform,
normal, Bernoulli and dropout by their distributions at fixed seeds; the same bits on every
device; the seed input drawn per call (torch's generator or NumPy's) or given; symbolic shapes;
saved graphs; NVRTC."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import luminal
from luminal import devices
from luminal.errors import DTypeError, InputError, LuminalError
from luminal.hlir.constants import RNG_SEED_INPUT
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.verify import check_node
from luminal.runtime.rng import philox4x32, philox_uniform

M32 = 0xFFFFFFFF
# Random123 tests/kat_vectors, "philox4x32 10": counter (4 words), key (2 words) -> 4 words
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32,) * 4, (M32,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
EMULATOR = devices.get("cuda-emulator").available
DEVICES = ["numpy", "cpu"] + (["cuda-emulator"] if EMULATOR else [])


def scalar_philox(ctr, key):
    """Philox4x32-10 as Random123's philox4x32_R writes it, on Python ints (mulhilo by a full
    product): an implementation independent of the vectorized one under test."""
    c, k = list(ctr), list(key)
    for r in range(10):
        if r > 0:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        prod0, prod1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        hi0, lo0, hi1, lo1 = prod0 >> 32, prod0 & M32, prod1 >> 32, prod1 & M32
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
    return tuple(c)


def seed(value: int) -> np.ndarray:
    return np.array(value, np.int64)


# --- the generator ---------------------------------------------------------------------------
@pytest.mark.parametrize("ctr, key, want", KAT)
def test_known_answers(ctr, key, want):
    assert scalar_philox(ctr, key) == want
    assert tuple(int(w) for w in philox4x32(ctr, key)) == want


def test_vectorized_philox_matches_the_scalar_one():
    rng = np.random.default_rng(0)
    ctr = rng.integers(0, 2**32, (4, 64), dtype=np.uint64)
    key = rng.integers(0, 2**32, (2, 64), dtype=np.uint64)
    got = np.stack(philox4x32(tuple(ctr), tuple(key)))
    for j in range(64):
        assert tuple(int(w) for w in got[:, j]) == scalar_philox(tuple(int(c) for c in ctr[:, j]),
                                                                  tuple(int(k) for k in key[:, j]))


def test_uniform_is_the_first_word_top_24_bits():
    """Key (lo32, hi32) of the seed and counter (lo32, hi32, 0, 0), both as unsigned bits (a
    negative seed too); x >> 8 times 2**-24."""
    seeds = np.array([0, 1, -1, 2**62 + 12345, -(2**63)], np.int64)
    counters = np.array([0, 7, (5 << 40) + 3, 2**40 - 1, 2**63 - 1], np.int64)
    got = philox_uniform(seeds, counters)
    assert got.dtype == np.float32
    for s, c, u in zip(seeds, counters, got):
        s, c = int(s) & (2**64 - 1), int(c) & (2**64 - 1)
        x = scalar_philox((c & M32, c >> 32, 0, 0), (s & M32, s >> 32))[0]
        assert u == np.float32((x >> 8) / 2**24)
        assert 0.0 <= u < 1.0


# --- distributions (fixed seeds: deterministic) -------------------------------------------------
def _ks(sample: np.ndarray, cdf) -> float:
    """The Kolmogorov-Smirnov statistic of `sample` against `cdf` (by hand: no scipy)."""
    x = np.sort(sample.astype(np.float64))
    f = cdf(x)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def _normal_cdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


N = 200_000
KS_LIMIT = 1.95 / math.sqrt(N)  # alpha = 0.001


@pytest.mark.parametrize("s", [0, 1, 2**40 + 17])
def test_uniform_distribution(s):
    g = luminal.Graph()
    g.output(g.rand((N,)))
    (u,) = g.run({RNG_SEED_INPUT: seed(s)})
    assert u.dtype == np.float32 and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert _ks(u, lambda x: x) < KS_LIMIT
    counts = np.bincount((u * 20).astype(int), minlength=20)  # chi-square, 19 degrees of freedom
    chi2 = float(((counts - N / 20) ** 2 / (N / 20)).sum())
    assert chi2 < 43.8  # p = 0.001


@pytest.mark.parametrize("s", [0, 3])
def test_normal_distribution(s):
    g = luminal.Graph()
    g.output(g.randn((N,)))
    g.output(g.randn((N,), DType.F64))
    z32, z64 = g.run({RNG_SEED_INPUT: seed(s)})
    assert z32.dtype == np.float32 and z64.dtype == np.float64 and np.isfinite(z32).all()
    for z in (z32, z64):
        assert abs(z.mean()) < 0.01 and abs(z.var() - 1.0) < 0.02
        assert abs(np.mean(z**3)) < 0.03 and abs(np.mean(z**4) - 3.0) < 0.1  # skew, kurtosis
        assert _ks(z, _normal_cdf) < KS_LIMIT


def test_bernoulli_and_dropout():
    g = luminal.Graph()
    p = g.input("p", (N,))
    x = g.input("x", (N,))
    g.output(p.bernoulli())
    out, mask = luminal.builder.random.dropout(x, 0.3)
    g.output(out)
    g.output(mask)
    probs = np.linspace(0, 1, N, dtype=np.float32)
    xs = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    b, y, m = g.run({"p": probs, "x": xs, RNG_SEED_INPUT: seed(11)})
    assert b.dtype == np.bool_ and not b[probs == 0].any() and b[probs == 1].all()
    assert abs(b.mean() - 0.5) < 0.005
    assert abs(b[: N // 2].mean() - 0.25) < 0.01  # the probability is per element
    assert m.dtype == np.bool_ and abs(m.mean() - 0.7) < 0.005
    scale = np.float32(1 / 0.7)
    np.testing.assert_array_equal(y, np.where(m, xs * scale, np.float32(0) * xs))  # exactly torch's x * mask * scale


def test_dropout_edge_probabilities():
    g = luminal.Graph()
    x = g.input("x", (64,))
    assert x.dropout(0.0) is x and x.dropout(0.5, train=False) is x
    g.output(x.dropout(1.0))
    (y,) = g.run({"x": np.ones(64, np.float32)})
    assert not y.any()
    with pytest.raises(LuminalError, match="between 0 and 1"):
        x.dropout(1.5)


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16, DType.F64])
def test_other_float_dtypes_stay_below_one(dtype):
    g = luminal.Graph()
    g.output(g.rand((N,), dtype))
    (u,) = g.run({RNG_SEED_INPUT: seed(5)})
    assert u.dtype == dtype.numpy and float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert abs(float(u.astype(np.float64).mean()) - 0.5) < 0.01


# --- determinism and the seed ------------------------------------------------------------------
def _graph():
    g = luminal.Graph()
    x = g.input("x", ("batch", 16))
    g.output(x.rand_like(), "u")
    g.output(x.bernoulli().cast(DType.F32), "b")
    g.output(x.dropout(0.25), "d")
    g.output(x.randn_like(), "n")
    g.output(g.rand((3, 5), stream=1000), "fixed")
    return g


def _feeds(s: int | None, batch: int = 37):
    x = np.random.default_rng(1).uniform(0, 1, (batch, 16)).astype(np.float32)
    return {"x": x} if s is None else {"x": x, RNG_SEED_INPUT: seed(s)}


@pytest.fixture(scope="module")
def compiled():
    g = _graph()
    return g, {(d, o): g.compile(device=d, optimize=o) for d in DEVICES for o in (False, True)}


def test_same_seed_same_bits_on_every_device(compiled):
    """Integer arithmetic: uniform, Bernoulli and dropout are bitwise equal across devices and the
    optimizer; the normal's log/sin may differ in the last bits."""
    g, runs = compiled
    want = g.run(_feeds(123456789123))
    for (device, optimize), c in runs.items():
        got = c(_feeds(123456789123))
        for name, w, o in zip(c.output_names, want, got):
            if name == "n":
                np.testing.assert_allclose(o, w, rtol=2e-6, atol=2e-6, err_msg=f"{device} {optimize}")
            else:
                np.testing.assert_array_equal(o, w, err_msg=f"{name} on {device}, optimize={optimize}")


def test_seeds_and_streams_differ(compiled):
    _, runs = compiled
    c = runs["cpu", True]
    a, b = c(_feeds(1)), c(_feeds(2))
    assert all((x != y).any() for x, y in zip(a, b))
    assert (a[0][:3, :5] != a[4]).any()  # another stream: other numbers on the same counters
    assert c.input_names == ["x"] and c.rng_seed is not None


def test_symbolic_dims_keep_row_major_counters(compiled):
    """Counters are the row-major index: a smaller batch draws the first rows of a larger one."""
    _, runs = compiled
    for (device, _), c in runs.items():
        small, large = c(_feeds(9, batch=3)), c(_feeds(9, batch=5))
        np.testing.assert_array_equal(small[0], large[0][:3], err_msg=device)


def test_seed_drawn_per_call_from_torch_or_numpy(compiled, monkeypatch):
    _, runs = compiled
    c = runs["numpy", False]
    first, second = c(_feeds(None)), c(_feeds(None))
    assert (first[0] != second[0]).any()  # a fresh seed per call
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    a = c(_feeds(None))
    torch.manual_seed(0)
    b = c(_feeds(None))
    np.testing.assert_array_equal(a[0], b[0])
    monkeypatch.delitem(sys.modules, "torch")  # without torch: NumPy's global generator
    np.random.seed(7)
    a = c(_feeds(None))
    np.random.seed(7)
    b = c(_feeds(None))
    np.testing.assert_array_equal(a[0], b[0])


def test_graph_run_draws_the_seed_too():
    g = luminal.Graph()
    g.output(g.rand((64,)))
    a, b = g.run()[0], g.run()[0]
    assert (a != b).any()
    np.testing.assert_array_equal(g.run({RNG_SEED_INPUT: seed(4)})[0], g.run({RNG_SEED_INPUT: seed(4)})[0])


def test_a_seed_given_to_a_graph_without_random_ops_is_ignored():
    g = luminal.Graph()
    x = g.input("x", (3,))
    g.output(x.add(1.0))
    c = g.compile(device="numpy")
    assert c.rng_seed is None
    np.testing.assert_array_equal(c({"x": np.zeros(3, np.float32), RNG_SEED_INPUT: seed(1)})[0], np.ones(3, np.float32))
    np.testing.assert_array_equal(g.run({"x": np.zeros(3, np.float32), RNG_SEED_INPUT: seed(1)})[0], np.ones(3, np.float32))


def test_seed_arguments():
    g = luminal.Graph()
    with pytest.raises(LuminalError, match="reserved"):
        g.input(RNG_SEED_INPUT, ())
    g.output(g.rand((8,), seed=42, stream=3))  # a fixed seed: no seed input
    g.output(g.rand((8,), seed=g.scalar(42, DType.I64), stream=3))
    g.output(g.rand((8,), seed=2**64 - 1, stream=3))
    a, b, c = g.run()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, philox_uniform(-1, (3 << 40) + np.arange(8)))
    assert g.compile(device="numpy").rng_seed is None
    with pytest.raises(DTypeError):
        g.rand((8,), seed=1.5)
    with pytest.raises(LuminalError, match="stream"):
        g.rand((8,), stream=-1)
    with pytest.raises(DTypeError):
        g.rand((8,), DType.I32)
    wrong = _graph().compile(device="numpy")
    with pytest.raises(InputError):
        wrong({**_feeds(None), RNG_SEED_INPUT: np.array(1.0, np.float32)})


def test_philox_nodes_are_checked():
    s = Node(Op.INPUT, DType.I64, (4,), (), "s")
    f = Node(Op.INPUT, DType.F32, (4,), (), "f")
    check_node(Node(Op.PHILOX, DType.F32, (4,), (s, s)))
    with pytest.raises(DTypeError, match="Philox"):
        check_node(Node(Op.PHILOX, DType.F32, (4,), (s, f)))
    with pytest.raises(DTypeError, match="Philox"):
        check_node(Node(Op.PHILOX, DType.F64, (4,), (s, s)))


def test_saved_graph_with_random_ops(compiled, tmp_path):
    g, runs = compiled
    path = tmp_path / "random.lum"
    runs["numpy", True].save(path)
    want = runs["numpy", True](_feeds(77))
    for device in ("numpy", "cpu"):
        loaded = luminal.load(path, device=device)
        assert loaded.input_names == ["x"] and loaded.rng_seed is not None
        for name, w, o in zip(loaded.output_names, want, loaded(_feeds(77))):
            if name != "n":
                np.testing.assert_array_equal(o, w, err_msg=f"{name} on {device}")
        assert loaded(_feeds(None))[0].shape == (37, 16)  # the seed drawn here too


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_philox_compiles_with_nvrtc_without_spills(compiled, arch):
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    from luminal.kernels.plan import KernelPlan

    g, runs = compiled
    for outputs in (g.output_nodes, runs["numpy", True].outputs):  # the primitives, and fused regions
        plan = KernelPlan.build(outputs)
        assert "lum_philox(" in plan.source
        binary = nvrtc.compile_cuda(plan.source, arch)
        assert not {k for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads}


@pytest.mark.parametrize("shape", [(), (1,), (2, 3, 4), (2, 1, 3), (0, 5), (3, 1)])
def test_counters_are_the_row_major_index(shape):
    g = luminal.Graph()
    g.output(g.rand(shape, stream=5))
    g.output(g.randn(shape, stream=6))
    u, z = g.run({RNG_SEED_INPUT: seed(-3)})
    index = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    np.testing.assert_array_equal(u, philox_uniform(-3, (5 << 40) + index))
    u1, u2 = philox_uniform(-3, (6 << 40) + index), philox_uniform(-3, (6 << 40) + (1 << 39) + index)
    want = np.sqrt(-2.0 * np.log(1.0 - u1.astype(np.float64))) * np.cos(2.0 * np.pi * u2.astype(np.float64))
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-5)
