"""Builder ops give torch's answer on edge values, or raise a named luminal error where torch raises.

NaN in sort/topk, Python's `%` and `//`, integer division by zero, argmax over an empty axis,
softmax over an empty axis, integer min at the lowest value, and 0-d tensors.
"""

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.errors import DivisionByZero

NAN, INF = float("nan"), float("inf")
DEVICES = [pytest.param(None, id="reference"), pytest.param("cpu", id="cpu")]


def _run(g, feeds, device):
    if device is None:
        return g.run(feeds)
    return g.compile(device=device)(*feeds.values())


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_array_equal(got, want)  # NaN positions equal
    if got.dtype.kind == "f":  # the sign of zeros and infinities (a NaN's sign bit is not defined)
        number = ~np.isnan(want)
        assert np.array_equal(np.signbit(got[number]), np.signbit(want[number])), (got, want)


ROW = np.array([3.0, NAN, -1.0, INF, -INF, 0.0, NAN, 2.0, -0.0], np.float32)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_puts_nan_where_torch_does(descending):
    g = lm.Graph()
    x = g.input("x", ROW.shape)
    values, index = x.sort(-1, descending=descending)
    g.output(values)
    g.output(index)
    g.output(x.argsort(-1, descending=descending))
    tv, ti = torch.sort(torch.from_numpy(ROW), descending=descending, stable=True)
    lv, li, la = g.run({"x": ROW})
    _same(lv, tv.numpy())
    _same(li, ti.numpy())
    _same(la, ti.numpy())


@pytest.mark.parametrize("largest", [False, True])
def test_topk_with_nan(largest):
    g = lm.Graph()
    row = ROW[:-1]  # torch.topk is not stable: no tie between 0.0 and -0.0
    x = g.input("x", row.shape)
    for out in x.topk(4, largest=largest):
        g.output(out)
    tv, ti = torch.topk(torch.from_numpy(row), 4, largest=largest)
    lv, li = g.run({"x": row})
    _same(lv, tv.numpy())
    _same(li, ti.numpy())


def test_integer_order_ops_at_the_lowest_value():
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    x = np.array([[5, lo, 0, hi, -3]], np.int64)
    g = lm.Graph()
    t = g.input("x", x.shape, lm.int64)
    for out in (t.min(-1), t.argmin(-1), t.sort(-1)[0], t.topk(2, largest=False)[0], t.clamp(max=3), t.minimum(0)):
        g.output(out)
    tt = torch.from_numpy(x)
    want = [tt.min(-1).values, tt.argmin(-1), tt.sort(-1)[0], tt.topk(2, largest=False)[0], tt.clamp(max=3), tt.clamp(max=0)]
    for got, w in zip(g.run({"x": x}), want):
        _same(got, w.numpy())


FLOATS = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -7.0, 7.0, 0.3, 0.1, INF, -INF, NAN, 5.5], np.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_float_mod_and_floordiv_as_torch(device):
    a, b = np.repeat(FLOATS, FLOATS.size), np.tile(FLOATS, FLOATS.size)
    g = lm.Graph()
    x, y = g.input("a", a.shape), g.input("b", b.shape)
    for out in (x % y, x // y, x.fmod(y), x.remainder(y), x.div(y, rounding_mode="floor"), 1.0 % y):
        g.output(out)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    want = [ta % tb, ta // tb, torch.fmod(ta, tb), torch.remainder(ta, tb), torch.div(ta, tb, rounding_mode="floor"), 1.0 % tb]
    for got, w in zip(_run(g, {"a": a, "b": b}, device), want):
        _same(got, w.numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_integer_mod_and_floordiv_as_torch(device):
    a = np.array([-7, 7, -7, 7, 0, 5, -1, np.iinfo(np.int64).min], np.int64)
    b = np.array([2, 2, -2, -2, 3, -3, 5, 7], np.int64)
    g = lm.Graph()
    x, y = g.input("a", a.shape, lm.int64), g.input("b", b.shape, lm.int64)
    for out in (x % y, x // y, x.fmod(y), x % 3, 7 % y, x.div(y, rounding_mode="trunc")):
        g.output(out)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    want = [ta % tb, ta // tb, torch.fmod(ta, tb), ta % 3, 7 % tb, torch.div(ta, tb, rounding_mode="trunc")]
    for got, w in zip(_run(g, {"a": a, "b": b}, device), want):
        _same(got, w.numpy())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["%", "//", "fmod", "fmod-fused", "trunc"])
def test_integer_division_by_zero_raises(device, op):
    g = lm.Graph()
    x, y = g.input("a", (3,), lm.int64), g.input("b", (3,), lm.int64)
    out = {"%": lambda: x % y, "//": lambda: x // y, "fmod": lambda: x.fmod(y),
           "fmod-fused": lambda: x.fmod(y).mul(2).add(1), "trunc": lambda: x.div(y, rounding_mode="trunc")}[op]()
    g.output(out)
    a = np.array([5, -7, 1], np.int64)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.remainder(torch.from_numpy(a), torch.tensor([1, 0, 1]))
    with pytest.raises(DivisionByZero, match="by zero"):
        _run(g, {"a": a, "b": np.array([1, 0, 1], np.int64)}, device)
    _run(g, {"a": a, "b": np.array([1, 2, 3], np.int64)}, device)  # and the next call works


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda-emulator"])
@pytest.mark.parametrize("dtype", [lm.int32, lm.int64])
def test_integer_arithmetic_wraps_as_torch(device, dtype):
    """Signed overflow wraps (two's complement), as torch's: the generated C must not be free to
    fold `x < x + 1` to true (undefined behaviour in C and CUDA C), in fused regions, elementwise
    kernels, reductions and matmuls."""
    info = np.iinfo(dtype.numpy)
    big = 65537 if dtype is lm.int32 else 2**33 + 1
    a = np.array([[info.max, 0, 1, info.min], [info.max, info.max, -5, 7]], dtype.numpy)
    exprs = [lambda t: t < t + 1, lambda t: (t + 3).maximum(t), lambda t: t * big, lambda t: -t,
             lambda t: (t - 2) > t, lambda t: t.sum(-1), lambda t: t.cumsum(-1), lambda t: t.unsqueeze(-1) * 3 > t.unsqueeze(-1),
             lambda t: t @ t.transpose(0, 1)]
    index = np.ones((2, 2), np.int64)  # scatter-adds two elements into column 1: atomics on CUDA
    g = lm.Graph()
    x = g.input("x", a.shape, dtype)
    for f in exprs:
        g.output(f(x))
    g.output(x.scatter(1, g.input("i", index.shape, lm.int64), x[:, 1:3], "add"))
    cg = g.compile(device=device)
    t = torch.from_numpy(a)
    got = cg(a, index)
    for out, f in zip(got, exprs):
        _same(out, f(t).numpy())
    _same(got[-1], t.scatter_add(1, torch.from_numpy(index), t[:, 1:3]).numpy())
    for f in exprs[:2]:  # each alone: one fused region, the addition and the comparison in one C expression
        h = lm.Graph()
        h.output(f(h.input("x", a.shape, dtype)))
        _same(h.compile(device=device)(a)[0], f(torch.from_numpy(a)).numpy())


def _chain_max(values):
    acc = -INF
    for v in values:
        if v > acc or v != v:
            acc = v
    return acc


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_a_zero_maximum_has_the_first_zeros_sign(device):
    """-0.0 and 0.0 compare equal, so a max of both may be either (IEEE 754, and torch's own
    follows its vector lanes); the reference and the C give the sequential chain's, the first zero
    along the axis (NumPy's own max gave the last one its lanes met, so the reference and the C
    disagreed, and the first calls of a tiered model, answered by the reference, differed from
    later ones in 1/max). CUDA's parallel reductions may give either zero."""
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        for n in (2, 17, 131):
            x = np.where(rng.random((n, 6)) < 0.5, -0.0, 0.0).astype(dtype)
            x[rng.random((n, 6)) < 0.1] = -1.0
            x[0, 5], x[-1, 4] = NAN, NAN
            g = lm.Graph()
            t = g.input("x", x.shape, lm.f32 if dtype == np.float32 else lm.f64)
            g.output(t.max(0))
            g.output(t.max(1))
            for axis, got in enumerate(g.compile(device=device)(x)):
                _same(got, np.array([_chain_max(r) for r in np.moveaxis(x, axis, -1)], dtype))


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda-emulator"])
@pytest.mark.parametrize("optimize", [False, True])
def test_abs_of_either_zero_is_plus_zero(device, optimize):
    """abs is max(x, -x), and the max of -0.0 and 0.0 may be either (they compare equal): abs(-0.0)
    was -0.0 on cpu, abs(0.0) -0.0 in the optimized reference. Torch gives +0.0 for both."""
    for dtype in (lm.f32, lm.f16, lm.bf16, lm.f64):
        a = np.array([0.0, -0.0, -1.5, 2.0, INF, -INF, NAN], np.float32).astype(dtype.numpy)
        g = lm.Graph()
        x = g.input("x", a.shape, dtype)
        for out in (x.abs(), x.abs() * 2, (x * 3).abs(), x.abs().sum(-1, keepdim=True)):
            g.output(out)
        t = torch.from_numpy(a.astype(np.float32)).to(getattr(torch, {"f32": "float32", "f16": "float16", "bf16": "bfloat16",
                                                                       "f64": "float64"}[dtype.short]))
        want = [t.abs(), t.abs() * 2, (t * 3).abs(), t.abs().sum(-1, keepdim=True)]
        for got, w in zip(g.compile(device=device, optimize=optimize)(a), want):
            _same(got.astype(np.float32), w.float().numpy())


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda-emulator"])
@pytest.mark.parametrize("optimize", [False, True])
def test_bool_inputs_with_bytes_other_than_0_and_1(device, optimize):
    """A 0/255 mask viewed as bool: torch and NumPy read every non-zero byte as True; C read the
    byte as a number (cast to f32 gave 255, a sum 258, `not 2` True). Passed straight through,
    the output is a proper bool (bytes 0/1)."""
    raw = np.array([[0, 255, 2, 1], [1, 0, 128, 0]], np.uint8)
    m = raw.view(np.bool_)
    t = torch.from_numpy(raw.copy()).view(torch.bool)
    g = lm.Graph()
    x = g.input("x", m.shape, lm.bool_)
    outs = [x, x.cast(lm.f32), x.cast(lm.int64).sum(-1), x.logical_not(), x.logical_and(x), x.max(-1),
            lm.where(x, x.cast(lm.f32) * 3, 2.0), x.cast(lm.int32) + 1]
    for out in outs:
        g.output(out)
    want = [t != 0, t.float(), t.long().sum(-1), ~t, t & t, t.amax(-1), torch.where(t, t.float() * 3, 2.0),
            t.int() + 1]
    cg = g.compile(device=device, optimize=optimize)
    for feed in (m, np.asfortranarray(m), t):  # non-contiguous and torch tensors too
        got = cg(feed)
        for a, w in zip(got, want):
            _same(a, w.numpy())
        assert all(np.asarray(got[k]).view(np.uint8).max() == 1 for k in (0, 3, 4, 5))
    assert raw.max() == 255  # the caller's array is left alone


def test_argmax_over_an_empty_axis():
    g = lm.Graph()
    with pytest.raises(lm.ShapeError, match="empty"):
        g.input("x", (2, 0)).argmax(1)
    with pytest.raises(lm.ShapeError, match="empty"):
        g.input("y", (0,)).argmin()
    g = lm.Graph()
    s = g.input("s", (2, "n"))
    g.output(s.argmax(-1))
    g.output(s.argmin(1, keepdim=True))
    x = np.array([[1, 3, 3], [NAN, 0, 5]], np.float32)
    got = g.run({"s": x})
    _same(got[0], torch.from_numpy(x).argmax(-1).numpy())
    _same(got[1], torch.from_numpy(x).argmin(1, keepdim=True).numpy())
    runs = [lambda f: g.run(f)] + [lambda f, d=d, o=o: g.compile(device=d, optimize=o)(f["s"])
                                   for d in ("cpu", "cuda-emulator") for o in (False, True)]
    for run in runs:  # the symbolic axis empty at run time: torch raises, naming the empty dim
        with pytest.raises(lm.IndexOutOfRange, match=r"axis 0 \(n\) is empty"):
            run({"s": np.zeros((2, 0), np.float32)})
    with pytest.raises(lm.IndexOutOfRange, match="out of range for axis 0 of size 2"):  # other bad indices as before
        g2 = lm.Graph()
        g2.output(g2.input("d", (2,)).index_select(0, g2.input("i", (1,), lm.int64)))
        g2.run({"d": np.zeros(2, np.float32), "i": np.array([5])})


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_over_an_empty_symbolic_axis(device):
    g = lm.Graph()
    x = g.input("x", (2, "n"))
    g.output(x.softmax(-1))
    g.output(x.log_softmax(-1))
    for got in _run(g, {"x": np.zeros((2, 0), np.float32)}, device):
        assert got.shape == (2, 0) and got.dtype == np.float32


# every builder op on a 0-d tensor, against torch
ZERO_D = {
    "neg": lambda t: -t, "exp": lambda t: t.exp(), "log": lambda t: t.abs().log(), "sin": lambda t: t.sin(),
    "cos": lambda t: t.cos(), "tanh": lambda t: t.tanh(), "sigmoid": lambda t: t.sigmoid(), "relu": lambda t: t.relu(),
    "abs": lambda t: t.abs(), "sign": lambda t: t.sign(), "floor": lambda t: t.floor(), "ceil": lambda t: t.ceil(),
    "round": lambda t: t.round(), "trunc": lambda t: t.trunc(), "sqrt": lambda t: t.abs().sqrt(),
    "rsqrt": lambda t: t.abs().rsqrt(), "square": lambda t: t.square(), "pow": lambda t: t.pow(3),
    "clamp": lambda t: t.clamp(-1, 1), "mod": lambda t: t % 0.75, "floordiv": lambda t: t // 0.75,
    "fmod": lambda t: t.fmod(0.75), "sum": lambda t: t.sum(), "mean": lambda t: t.mean(), "max": lambda t: t.max(),
    "min": lambda t: t.min(), "prod": lambda t: t.prod(), "argmax": lambda t: t.argmax(), "argmin": lambda t: t.argmin(),
    "softmax": lambda t: t.softmax(0), "log_softmax": lambda t: t.log_softmax(0), "logsumexp": lambda t: t.logsumexp(0),
    "cumsum": lambda t: t.cumsum(0), "sort": lambda t: t.sort(0)[0], "topk": lambda t: t.topk(1, 0)[1],
    "eq": lambda t: t.eq(1.5), "lt": lambda t: t < 0, "isnan": lambda t: t.isnan(), "reshape": lambda t: t.reshape(1, 1),
    "unsqueeze": lambda t: t.unsqueeze(0), "expand": lambda t: t.expand(3), "flatten": lambda t: t.flatten(),
    "erf": lambda t: t.erf(), "gelu": lambda t: t.gelu(), "silu": lambda t: t.silu(),
    "mean_last": lambda t: t.mean(-1), "softmax_last": lambda t: t.softmax(-1), "cumsum_last": lambda t: t.cumsum(-1),
    "sort_last": lambda t: t.sort(-1)[1], "argsort": lambda t: t.argsort(), "topk_last": lambda t: t.topk(1)[0],
    "gather": lambda t: t.gather(0, t.graph.scalar(0, lm.int64)),
    "index_select": lambda t: t.index_select(0, t.graph.iota(1, lm.int64)),
    "scatter": lambda t: t.scatter(0, t.graph.scalar(0, lm.int64), t * 2),
    "scatter_add": lambda t: t.scatter(0, t.graph.scalar(0, lm.int64), t * 2, reduce="add"),
    "stack": lambda t: lm.stack([t, -t]), "where": lambda t: lm.where(t > 1, t, 0.5), "squeeze": lambda t: t.squeeze(0),
    "var": lambda t: t.var(correction=0), "prod_axis": lambda t: t.prod(0, keepdim=True), "max_keep": lambda t: t.max(0, True),
}
TORCH_ZERO_D = {
    "log": lambda t: t.abs().log(), "sqrt": lambda t: t.abs().sqrt(), "rsqrt": lambda t: t.abs().rsqrt(),
    "relu": torch.relu, "max": lambda t: t.max(), "min": lambda t: t.min(), "softmax": lambda t: t.softmax(0),
    "log_softmax": lambda t: t.log_softmax(0), "cumsum": lambda t: t.cumsum(0), "sort": lambda t: t.sort(0)[0],
    "topk": lambda t: t.topk(1, 0)[1], "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
    "floordiv": lambda t: t // 0.75, "fmod": lambda t: torch.fmod(t, 0.75), "erf": torch.erf,
    "sort_last": lambda t: t.sort(-1)[1], "topk_last": lambda t: t.topk(1)[0], "cumsum_last": lambda t: t.cumsum(-1),
    "gather": lambda t: t.gather(0, torch.tensor(0)), "index_select": lambda t: t.index_select(0, torch.tensor([0])),
    "scatter": lambda t: t.scatter(0, torch.tensor(0), t * 2),
    "scatter_add": lambda t: t.scatter_add(0, torch.tensor(0), t * 2), "stack": lambda t: torch.stack([t, -t]),
    "where": lambda t: torch.where(t > 1, t, 0.5), "max_keep": lambda t: t.amax(0, True),
}


# the sign of a zero result is left open: max/min of 0.0 and -0.0 (torch's depends on the
# order), and functions decomposed as DESIGN.md says (tanh = 2 sigmoid(2x) - 1)
# and the 0-d cumsum (torch: a no-op, -0.0 stays; ours is a masked sum, 0.0)
UNSIGNED_ZERO = {"relu", "clamp", "max", "min", "tanh", "gelu", "silu", "cumsum", "cumsum_last", "max_keep", "var"}


@pytest.mark.parametrize("value", [1.5, -0.0, NAN, -INF])
@pytest.mark.parametrize("name", sorted(ZERO_D))
def test_zero_d_tensors(name, value):
    x = np.array(value, np.float32)
    g = lm.Graph()
    g.output(ZERO_D[name](g.input("x", ())))
    (got,) = g.run({"x": x})
    want = TORCH_ZERO_D.get(name, ZERO_D[name])(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    if name in ("erf", "gelu"):  # erf is a polynomial approximation (|error| <= 1.5e-7)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if got.dtype.kind == "f" and name not in UNSIGNED_ZERO:
        number = ~np.isnan(want)
        assert np.array_equal(np.signbit(got)[number], np.signbit(want)[number]), (got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_erf_is_precise_relative_to_small_values(device):
    """erf is A&S 7.1.26 from 0.5 on and its Maclaurin series below, where A&S's 1 - (...)
    exp(-x^2) cancels (its error of ~1e-7 was 5% of erf(1e-6)): below 0.5 within 2e-7 of erf(x)
    relative (2 ulps), from there within A&S's 1.5e-7 and the rounding; -0.0 stays -0.0, NaN NaN,
    +-inf +-1, as torch's."""
    import math

    x = np.array([1e-30, -1e-6, 1e-5, -1e-3, 0.01, 0.1, -0.3, 0.4999, 0.5, -0.7, 1.5, -3.0, 6.0, 9.0], np.float32)
    g = lm.Graph()
    g.output(g.input("x", x.shape).erf())
    (got,) = _run(g, {"x": x}, device)
    want = np.array([math.erf(float(v)) for v in x])
    small = np.abs(x) < 0.5
    assert (np.abs(got - want)[small] <= 2e-7 * np.abs(want)[small]).all(), np.abs(got - want) / np.abs(want)
    assert (np.abs(got - want)[~small] <= 2.5e-7).all(), np.abs(got - want)
    special = np.array([-0.0, 0.0, NAN, INF, -INF], np.float32)
    g = lm.Graph()
    g.output(g.input("x", special.shape).erf())
    (got,) = _run(g, {"x": special}, device)
    _same(got, torch.erf(torch.from_numpy(special)).numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_pow_special_values_as_torch(device):
    """C99 pow, as torch: (-inf) ** 2.5 = inf, (-0.0) ** -3 = -inf, 1 ** NaN = 1, (-1) ** inf = 1, ..."""
    x = np.array([-0.0, -INF, -2.0, 1.0, -1.0, NAN, 0.5, 2.0, 0.0, INF, -0.5, 3.0], np.float32)
    y = np.array([INF, -INF, NAN, 0.0, 3.0, -3.0, 2.5, -2.5, 1.0, -1.0, 0.5, 4.0], np.float32)
    a, b = np.repeat(x, y.size), np.tile(y, x.size)
    g = lm.Graph()
    ta, tb = g.input("a", a.shape), g.input("b", b.shape)
    for out in (ta.pow(tb), ta**2.5, ta**-2.5, ta**3, ta**-3.0, ta**0.5, ta**-0.5):
        g.output(out)
    xa, xb = torch.from_numpy(a), torch.from_numpy(b)
    want = [xa.pow(xb), xa**2.5, xa**-2.5, xa**3, xa**-3.0, xa**0.5, xa**-0.5]
    for got, w in zip(_run(g, {"a": a, "b": b}, device), want):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-5, atol=1e-6)
        number = ~np.isnan(w.numpy())
        assert np.array_equal(np.signbit(got[number]), np.signbit(w.numpy()[number]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n,symbolic", [(65, False), (4097, False), (9000, False), (130, True), (20000, True)])
def test_long_cumsum_is_linear_work_and_torch_exact(n, symbolic, device):
    """cumsum over long rows: blocks of 64 plus the sums of the blocks before (it was a masked sum
    over an n x n triangle: 3.6 s at n = 20,000 on the C backend). Bit for bit torch's answer
    (floats accumulate in float64, as torch's CPU cumsum), inf/-inf/NaN included; no node holds
    more than a block's multiple of the input."""
    from luminal.hlir.ops import toposort

    rng = np.random.default_rng(n)
    for dtype, values in [(lm.f32, rng.standard_normal((2, n)).astype(np.float32)),
                          (lm.int32, rng.integers(-1000, 1000, (2, n)).astype(np.int32)),
                          (lm.bool_, rng.integers(0, 2, (2, n)).astype(bool))]:
        if dtype is lm.f32:
            values[0, [3, 50, n - 1]] = [INF, -INF, NAN]  # row 0: inf, then NaN from inf + -inf
            values[1, n // 2] = INF
        g = lm.Graph("cumsum")
        y = g.input("x", (2, "n") if symbolic else (2, n), dtype).cumsum(-1)
        g.output(y, "y")
        biggest = max(sym_numel(node.shape, n) for node in toposort([y.node]))
        assert biggest <= 2 * 2 * 64 * (n + 64), biggest  # rows x 2 (where_ stacks its operands) x block x padded n
        _same(_run(g, {"x": values}, device)[0], torch.cumsum(torch.from_numpy(values), -1).numpy())


def sym_numel(shape, n) -> int:
    from luminal.hlir import symbolic as sym

    return int(np.prod([sym.evaluate(d, {"n": n}) for d in shape])) if shape else 1


@pytest.mark.parametrize("device", DEVICES)
def test_long_rows_sort_by_a_bitonic_network_with_the_rank_orders_answer(device, monkeypatch):
    """Rows past BITONIC_MIN sort by a bitonic network (n log^2 n; ranking every pair was n^2: a
    topk over 8,400 took 0.4 s a call): the same answer as the rank order, bit for bit, and as
    torch's stable sort: NaN as the largest value, -0.0 and 0.0 tied, ties by index, ints and
    bools, padding to a power of two never selected."""
    from luminal.builder import indexing

    monkeypatch.setattr(indexing, "BITONIC_MIN", 8)  # small rows through the network, so the case runs fast
    rng = np.random.default_rng(3)
    n = 37  # padded to 64
    f = rng.standard_normal((3, n)).astype(np.float32)
    f[0, [2, 9, 30]] = NAN
    f[1, :12] = 1.5  # ties
    f[1, [20, 21, 22]] = [-0.0, 0.0, -0.0]
    f[2, [0, 5]] = [INF, -INF]
    cases = [(f, lm.f32), (rng.integers(-3, 3, (3, n)).astype(np.int32), lm.int32),
             (rng.integers(0, 2, (3, n)).astype(bool), lm.bool_)]
    for values, dtype in cases:
        for descending in (False, True):
            g = lm.Graph("sort")
            x = g.input("x", (3, n), dtype)
            v, i = x.sort(-1, descending=descending)
            tv, ti = x.topk(5, -1, largest=descending)
            for t, name in ((v, "v"), (i, "i"), (tv, "tv"), (ti, "ti")):
                g.output(t, name)
            got = _run(g, {"x": values}, device)
            want = torch.sort(torch.from_numpy(values), dim=-1, descending=descending, stable=True)
            _same(got[1], want.indices.numpy())
            _same(got[0], want.values.numpy())
            _same(got[3], want.indices.numpy()[:, :5])
            _same(got[2], want.values.numpy()[:, :5])
    g = lm.Graph("axis0")  # another axis, through the transposes
    x = g.input("x", (n, 2))
    g.output(x.topk(4, 0)[1], "i")
    want = torch.sort(torch.from_numpy(f[:2].T.copy()), dim=0, descending=True, stable=True).indices.numpy()[:4]
    _same(_run(g, {"x": f[:2].T.copy()}, device)[0], want)


@pytest.mark.parametrize("device", DEVICES)
def test_compare_with_a_number(device):
    """x <= c, x >= c, x == c against a Python number: torch's answer on NaN, ±inf and -0.0, and
    no mask for the number's own NaN test (a 0-d bool the C kernels would read, and then not
    vectorize) where the number is not NaN."""
    g = lm.Graph()
    x = g.input("x", ROW.shape)
    cases = [(x.le(0.0), torch.le, 0.0), (x.ge(-1.0), torch.ge, -1.0), (x.eq(-0.0), torch.eq, -0.0),
             (x.le(INF), torch.le, INF), (x.ge(-INF), torch.ge, -INF), (x.le(NAN), torch.le, NAN), (x.eq(NAN), torch.eq, NAN)]
    for out, _, _ in cases:
        g.output(out)
    got = _run(g, {"x": ROW}, device)
    for value, (_, op, c) in zip(got, cases):
        _same(value, op(torch.from_numpy(ROW), c).numpy())
    from luminal.hlir.dtypes import DType
    from luminal.hlir.ops import Op, toposort

    numbers = [out for out, _, c in cases if c == c]
    masks = [n for n in toposort([t.node for t in numbers]) if n.shape == () and n.dtype is DType.BOOL and n.op is not Op.CONSTANT]
    assert not masks


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda-emulator"])
def test_rounding_inside_a_fused_region_is_exact(device):
    """trunc, floor, ceil and round of a computed value inside one FusedElementwise region equal the
    unfused graph's, bit for bit: the region may keep floats wider than their dtype, but a value an
    fmod, comparison or cast reads is rounded for every reader (trunc is x - fmod(x, 1))."""
    a = np.concatenate([np.arange(-40, 41, dtype=np.float32) / 4, [1e7 + 0.5, -3e7, NAN, INF, -INF, -0.0]]).astype(np.float32)

    ops = {"trunc": lambda v: v.trunc(), "floor": lambda v: v.floor(), "ceil": lambda v: v.ceil(),
           "round": lambda v: v.round(), "frac": lambda v: v.sub(v.floor())}
    for name, op in ops.items():  # one output each: the whole chain is one region
        def build(op=op):
            g = lm.Graph()
            x = g.input("x", a.shape)
            g.output(op(x.sub(5.5).mul(1.0 / 6.0)))
            return g

        (want,) = build().compile(device="numpy", optimize=False)(a)
        (got,) = build().compile(device=device, optimize=True)(a)
        _same(got, want)
        if name != "frac":
            assert np.array_equal(got[:81], np.round(got[:81])), name  # whole numbers
