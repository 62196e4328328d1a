"""Convolutions and pooling (`luminal/builder/nn.py`) against torch eager, on every device.

One graph holds a grid of convs (stride, padding, dilation, groups; 1-D, 2-D, 3-D; regular,
grouped, depthwise, 1x1) and pools (max/avg, ceil_mode, count_include_pad), so each device
compiles once. NaN and ±inf sit in the inputs; the NumPy runtime (the spec) is compared with
torch, every other device with both. The op counts prove the lowering: a GEMM (no copy for a
1x1 conv), one WindowReduce for a depthwise conv or a pool, never a reduction over a
materialized product much larger than the output.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

import luminal as lm
from luminal import devices
from luminal.builder import nn
from luminal.egraph import reference
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import REDUCE, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker
from luminal.runtime import NumpyRuntime

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (name, input shape, weight shape, stride, padding, dilation, groups)
CONVS = [
    ("3x3_pad1", (2, 4, 9, 8), (6, 4, 3, 3), 1, 1, 1, 1),
    ("1x1", (2, 4, 9, 8), (6, 4, 1, 1), 1, 0, 1, 1),
    ("1x1_stride2", (1, 4, 9, 8), (6, 4, 1, 1), 2, 0, 1, 1),
    ("stride2_pad2_dil2", (2, 4, 9, 8), (6, 4, 3, 3), 2, 2, 2, 1),
    ("asym_kernel_groups2", (1, 4, 7, 6), (6, 2, 3, 1), 1, (1, 0), 1, 2),
    ("depthwise", (2, 4, 9, 8), (4, 1, 3, 3), 1, 1, 1, 4),
    ("depthwise_stride2_mult2", (2, 4, 9, 8), (8, 1, 3, 3), 2, 1, 1, 4),
    ("depthwise_dil2_5x5", (1, 4, 11, 10), (4, 1, 5, 5), 1, 4, 2, 4),
    ("depthwise_10x10_loops", (1, 2, 12, 12), (2, 1, 10, 10), 1, 1, 1, 2),  # 100 terms: loops, not unrolled
    ("grouped_direct", (2, 8, 7, 6), (8, 2, 3, 3), 2, 1, 1, 4),  # 18 terms per output: a WindowReduce
    ("grouped_gemm", (1, 16, 7, 6), (4, 8, 3, 3), 1, 1, 1, 2),  # 72 terms: GEMMs
    ("conv1d_stride2", (2, 3, 11), (5, 3, 3), 2, 1, 1, 1),
    ("conv1d_depthwise", (2, 3, 11), (3, 1, 3), 1, 1, 1, 3),
    ("conv3d", (1, 2, 4, 5, 6), (3, 2, 3, 3, 3), 1, 1, 1, 1),
    ("stem_7x7_stride2", (1, 3, 16, 16), (8, 3, 7, 7), 2, 3, 1, 1),
]
# (name, input shape, torch function, luminal function)
POOLS = [
    ("max3_s2_p1", (2, 3, 9, 8), lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: nn.max_pool(x, (3, 3), 2, 1)),
    ("max2", (2, 3, 8, 8), lambda x: F.max_pool2d(x, 2), lambda x: nn.max_pool(x, (2, 2))),
    ("max_ceil", (1, 3, 10, 8), lambda x: F.max_pool2d(x, 3, 2, 0, ceil_mode=True),
     lambda x: nn.max_pool(x, (3, 3), 2, 0, ceil_mode=True)),
    ("max_dil2", (1, 3, 9, 8), lambda x: F.max_pool2d(x, 2, 1, 0, dilation=2), lambda x: nn.max_pool(x, (2, 2), 1, 0, 2)),
    ("max1d", (2, 3, 9), lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: nn.max_pool(x, (3,), 2, 1)),
    ("avg3_s2_p1", (2, 3, 9, 8), lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: nn.avg_pool(x, (3, 3), 2, 1)),
    ("avg_no_pad_count", (2, 3, 9, 8), lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
     lambda x: nn.avg_pool(x, (3, 3), 2, 1, count_include_pad=False)),
    ("avg_ceil", (1, 3, 10, 8), lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
     lambda x: nn.avg_pool(x, (3, 3), 2, 1, ceil_mode=True)),
    ("avg_ceil_no_pad_count", (1, 3, 10, 8), lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     lambda x: nn.avg_pool(x, (3, 3), 2, 1, ceil_mode=True, count_include_pad=False)),
    ("avg_divisor", (1, 3, 8, 8), lambda x: F.avg_pool2d(x, 2, divisor_override=3), lambda x: nn.avg_pool(x, (2, 2), divisor_override=3)),
    # the activations of conv nets: maximum (a fused pointwise op) inside elementwise regions, and alone
    ("relu6_hardswish", (2, 3, 5, 4), lambda x: F.hardswish(F.relu6(x * 3.0)), lambda x: _hardswish(x.mul(3.0).clamp(0.0, 6.0))),
    ("maximum_alone", (2, 3, 5, 4), lambda x: torch.maximum(x, x.transpose(0, 1).reshape(2, 3, 5, 4)),
     lambda x: x.maximum(x.transpose(0, 1).reshape((2, 3, 5, 4)))),
]


def _hardswish(x):
    return x.mul(x.add(3.0).clamp(0.0, 6.0)).mul(1.0 / 6.0)


def _values(rng, shape, specials: bool) -> np.ndarray:
    v = rng.standard_normal(shape).astype(np.float32)
    if specials and v.size > 12:
        v.flat[[3, 10]] = [np.nan, np.inf]
        v.flat[-2] = -np.inf
    return v


def _build():
    rng = np.random.default_rng(0)
    g, feeds, want = lm.Graph("convs"), {}, {}
    for name, xs, ws, stride, padding, dilation, groups in CONVS:
        x, w, b = (_values(rng, xs, True), _values(rng, ws, False), _values(rng, ws[:1], False))
        feeds.update({f"{name}_x": x, f"{name}_w": w})
        out = nn.conv(g.input(f"{name}_x", xs), g.input(f"{name}_w", ws), g.constant(b), stride, padding, dilation, groups)
        g.output(out, name)
        want[name] = getattr(F, f"conv{len(xs) - 2}d")(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                                                    stride, padding, dilation, groups).numpy()
    for name, xs, fn, lfn in POOLS:
        x = _values(rng, xs, True)
        feeds[f"{name}_x"] = x
        g.output(lfn(g.input(f"{name}_x", xs)), name)
        want[name] = fn(torch.from_numpy(x)).numpy()
    return g, feeds, want


@pytest.fixture(scope="module")
def grid():
    g, feeds, want = _build()
    names = [n for n, *_ in CONVS] + [n for n, *_ in POOLS]
    spec = dict(zip(names, g.run(feeds)))
    return g, feeds, want, spec


def _close(got, want, what):
    assert got.shape == want.shape, what
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=what)


def test_numpy_runtime_matches_torch(grid):
    _, _, want, spec = grid
    for name, value in spec.items():
        _close(value, want[name], name)


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
def test_device_matches_numpy_runtime_and_torch(grid, device):
    if not devices.get(device).available:
        pytest.skip(devices.get(device).missing())
    g, feeds, want, spec = grid
    got = dict(zip(spec, g.compile(device=device)(feeds)))
    for name in spec:
        _close(got[name], spec[name], f"{name} on {device} vs the NumPy runtime")
        _close(got[name], want[name], f"{name} on {device} vs torch")


def test_cuda_kernels_compile_with_nvrtc(grid):
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    from luminal.kernels.plan import KernelPlan

    source = KernelPlan.build(grid[0].compile(device="numpy").outputs).source
    assert "windowreduce" in source.lower() and "lum_max_nan((float)" in source
    for arch in ("sm_80", "sm_90"):
        assert nvrtc.compile_cuda(source, arch).kernels


def _optimized(build) -> list[Node]:
    g = lm.Graph("one")
    g.output(build(g))
    return g.compile(device="numpy").outputs


def _materialized_reduce_inputs(outputs) -> list[int]:
    """Element counts of the materialized operands (no view, no input) of every reduction."""
    sizes = []
    for n in toposort(outputs):
        if n.op in REDUCE or n.op in (Op.KAHAN_SUM, Op.WINDOW_REDUCE):
            for s in n.src:
                base = s.src[0] if s.op is Op.VIEW else s
                if base.op not in (Op.INPUT, Op.CONSTANT):
                    sizes.append(int(np.prod(base.shape)))
    return sizes


@pytest.mark.parametrize("kind, cin, ws, groups, want_op", [("regular", 8, (16, 8, 3, 3), 1, Op.MAT_MUL),
                                                            ("grouped_wide", 16, (16, 8, 3, 3), 2, Op.MAT_MUL),
                                                            ("grouped_narrow", 8, (16, 2, 3, 3), 4, Op.WINDOW_REDUCE),
                                                            ("depthwise", 8, (8, 1, 3, 3), 8, Op.WINDOW_REDUCE)])
def test_conv_never_reduces_a_materialized_product(kind, cin, ws, groups, want_op):
    outputs = _optimized(lambda g: nn.conv(g.input("x", (1, cin, 14, 14)), g.input("w", ws), None, 1, 1, 1, groups))
    ops = collections.Counter(n.op for n in toposort(outputs))
    assert ops[want_op] == 1, ops
    assert not ops[Op.MUL] and not ops[Op.SUM_REDUCE] and not ops[Op.KAHAN_SUM], ops  # no product, no reduce of it
    out = ws[0] * 14 * 14
    assert all(size <= 2 * out for size in _materialized_reduce_inputs(outputs)), kind
    copies = [n for n in toposort(outputs) if n.op is Op.CONTIGUOUS]
    assert all(int(np.prod(c.shape)) <= 9 * cin * 14 * 14 for c in copies)  # the padded input, the im2col
    assert len(copies) <= (2 if want_op is Op.MAT_MUL else 1)


def test_1x1_conv_is_one_gemm_on_the_input_and_pools_one_window_reduce():
    outputs = _optimized(lambda g: nn.conv(g.input("x", (2, 8, 7, 7)), g.input("w", (16, 8, 1, 1))))
    assert collections.Counter(n.op for n in toposort(outputs) if n.op not in (Op.INPUT, Op.VIEW)) == {Op.MAT_MUL: 1}
    for pool in (lambda x: nn.max_pool(x, (3, 3), 2), lambda x: nn.avg_pool(x, (3, 3), 1)):
        outputs = _optimized(lambda g, pool=pool: pool(g.input("x", (2, 8, 9, 9))))
        ops = collections.Counter(n.op for n in toposort(outputs))
        assert ops[Op.WINDOW_REDUCE] == 1 and not (ops[Op.MAX_REDUCE] or ops[Op.SUM_REDUCE] or ops[Op.CONTIGUOUS]), ops


def test_a_padded_max_pool_reads_its_padding_without_a_copy():
    """A max pool with padding (or ceil_mode) over an activation: the -inf padding is one Select,
    and the pool's windows read it through the unit dim the builder adds (a plain reshape of
    the buffer): no CONTIGUOUS copy between them (GoogLeNet copied three 512 x 16 x 16 planes a
    call). The values are torch's, NaN, infinities and signed zeros in the input, on every
    device."""
    pools = {"pad1": lambda t: nn.max_pool(t, (3, 3), 1, 1), "ceil": lambda t: nn.max_pool(t, (3, 3), 2, 0, ceil_mode=True)}
    for name, pool in pools.items():
        outputs = _optimized(lambda g, pool=pool: pool(g.input("x", (1, 8, 14, 14)).relu()))
        ops = collections.Counter(n.op for n in toposort(outputs))
        assert ops[Op.WINDOW_REDUCE] == 1 and ops[Op.SELECT] == 1 and not ops[Op.CONTIGUOUS], (name, ops)
    x = np.random.default_rng(9).standard_normal((1, 8, 14, 14)).astype(np.float32)
    x[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    x[0, 1, 5, 5:8] = [-0.0, 0.0, -0.0]
    g = lm.Graph("pools")
    xi = g.input("x", (1, 8, 14, 14))
    for name, pool in pools.items():
        g.output(pool(xi * 2.0), name)
    t = torch.from_numpy(x) * 2.0
    want = [F.max_pool2d(t, 3, 1, 1).numpy(), F.max_pool2d(t, 3, 2, 0, ceil_mode=True).numpy()]
    for device in ("numpy", "cpu"):
        for got, ref in zip(g.compile(device=device)({"x": x}), want):
            np.testing.assert_array_equal(got, ref, err_msg=device)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(ref), err_msg=device)


def _chain_max(window: np.ndarray) -> np.float32:
    """The max a sequential NaN-propagating chain gives (`lum_max_nan`: b where larger or NaN):
    the last NaN (its payload) if there is one, else the first of the largest values."""
    acc = window[0]
    for v in window[1:]:
        if v > acc or v != v:
            acc = v
    return acc


@pytest.mark.parametrize("device", ["numpy", "cpu", "cuda-emulator"])
def test_max_pool_windows_keep_the_chains_bits(device):
    """A pool's window is reduced as a tree of maxima (`render/conv.max_tree`), not a chain: the
    same bits as the chain, for windows that hold NaNs of several payloads (the last one wins),
    -0.0 and 0.0 ties in either order (the first wins) and infinities, at every window size
    and stride that unrolls, row lengths with vector tails included. The values are torch's;
    the NumPy runtime gives a zero the first zero's sign too (it gave whichever NumPy's lanes
    met last), though not the chain's NaN payload."""
    rng = np.random.default_rng(17)
    x = rng.choice(np.array([-0.0, 0.0, 1.0, -1.0, np.inf, -np.inf], np.float32), size=(1, 3, 13, 11))
    bits = x.view(np.uint32)
    nans = rng.random(x.shape) < 0.08
    bits[nans] = 0x7FC00000 | rng.integers(1, 1 << 22, nans.sum()).astype(np.uint32)  # quiet NaNs, distinct payloads
    bits[nans & (rng.random(x.shape) < 0.5)] |= 0x80000000
    pools = {(k, s): (k, s) for k in (2, 3, 5) for s in (1, 2)}
    g = lm.Graph("chains")
    xi = g.input("x", x.shape)
    for (k, s) in pools:
        g.output(nn.max_pool(xi, (k, k), s), f"k{k}s{s}")
    got = g.compile(device=device)({"x": x})
    for ((k, s), out) in zip(pools, got):
        want = np.empty_like(out)
        for c in range(x.shape[1]):
            for i in range(want.shape[2]):
                for j in range(want.shape[3]):
                    want[0, c, i, j] = _chain_max(x[0, c, i * s:i * s + k, j * s:j * s + k].reshape(-1))
        t = F.max_pool2d(torch.from_numpy(x), k, s).numpy()
        for ref in (want, t):  # the chain's and torch's values, the sign of a zero included
            np.testing.assert_array_equal(out, ref, err_msg=f"{device} k{k} s{s}")
            np.testing.assert_array_equal(np.signbit(out[out == 0]), np.signbit(ref[out == 0]), err_msg=f"{device} k{k} s{s}")
        if device != "numpy":  # the C and CUDA kernels: the chain's NaN too, its payload (the last NaN)
            np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32), err_msg=f"{device} k{k} s{s}")


# (kernel, stride, padding, dilation, ceil_mode): windows the C backend reduces in two passes
SEPARABLE_POOLS = [
    ((13, 13), 1, 6, 1, False),  # an SPP block's (YOLO): 169 terms, past the unrolled windows
    ((9, 9), 2, 4, 1, False),
    ((5, 5), 1, 2, 1, False),
    ((5, 9), 1, (2, 4), 1, False),
    ((5, 5), 1, 2, 2, False),  # dilated: rows of stride 2
    ((9, 9), 3, 0, 1, True),  # ceil_mode: the last windows run past the input
    ((3, 3), 2, 0, 1, True),  # SqueezeNet's: as many terms, but contiguous vector loops
    ((3, 3), 1, 1, 1, False),  # Inception's
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_max_pools_run_as_two_passes_with_the_chains_bits(dtype):
    """Max pools (an SPP block's 13x13, 9x9, dilated, ceil_mode, SqueezeNet's and Inception's 3x3)
    run on the C backend as a pass along the rows and one down the columns (`cpu/max_pool.py`): the
    bits of the chain over the window in row-major order, the last NaN's payload included, and
    torch's values and zero signs; one plane's maxima per row in any order of planes."""
    from luminal.kernels.cpu.max_pool import separable_max

    rng = np.random.default_rng(23)
    # channels 0-1: maxima that are mostly zeros of both signs (the first one's sign wins); 2-4:
    # windows holding several NaNs (the last one's payload wins)
    x = rng.choice(np.array([-0.0, 0.0, -1.0, -np.inf], dtype), size=(2, 5, 27, 26))
    x[:, 2:] = rng.choice(np.array([-0.0, 0.0, 1.0, -1.0, 2.0, np.inf, -np.inf], dtype), size=(2, 3, 27, 26))
    nans = (rng.random(x.shape) < 0.04) & (np.arange(5) >= 2)[None, :, None, None]
    ints = np.uint32 if dtype is np.float32 else np.uint64
    top = 23 if dtype is np.float32 else 52
    quiet = (ints(0x7FC00000) if dtype is np.float32 else ints(0x7FF8000000000000))
    bits = x.view(ints)
    bits[nans] = quiet | rng.integers(1, 1 << 20, nans.sum()).astype(ints) << ints(top - 21)
    g = lm.Graph("separable")
    xi = g.input("x", x.shape, DType.F32 if dtype is np.float32 else DType.F64)
    for i, (k, s, p, d, ceil) in enumerate(SEPARABLE_POOLS):
        g.output(nn.max_pool(xi, k, s, p, d, ceil_mode=ceil), f"p{i}")
    model = g.compile(device="cpu")
    windows = [n for n in toposort(model.outputs) if n.op is Op.WINDOW_REDUCE]
    assert len(windows) == len(SEPARABLE_POOLS) and all(separable_max(w) for w in windows)
    got = model({"x": x})
    t = torch.from_numpy(x)
    for (k, s, p, d, ceil), out in zip(SEPARABLE_POOLS, got):
        name = f"k{k} s{s} p{p} d{d} ceil {ceil}"
        ref = F.max_pool2d(t, k, s, p, d, ceil_mode=ceil).numpy()
        np.testing.assert_array_equal(out, ref, err_msg=name)
        np.testing.assert_array_equal(np.signbit(out[out == 0]), np.signbit(ref[out == 0]), err_msg=name)
        pads = (p, p) if isinstance(p, int) else p
        padded = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[0] + k[0] * s), (pads[1], pads[1] + k[1] * s)),
                        constant_values=-np.inf)
        want = np.empty_like(out)
        for n, c, i, j in np.ndindex(out.shape):
            win = padded[n, c, i * s:i * s + (k[0] - 1) * d + 1:d, j * s:j * s + (k[1] - 1) * d + 1:d]
            want[n, c, i, j] = _chain_max(win.reshape(-1))
        np.testing.assert_array_equal(out.view(ints), want.view(ints), err_msg=name)


def test_a_large_max_pool_over_a_dynamic_batch_runs_as_two_passes():
    """The planes of a two-pass max pool may be symbolic (an ONNX model's batch "N"): the same
    plan, the batch a kernel argument, at every batch the chain's bits, an empty batch included."""
    from luminal.kernels.cpu.max_pool import separable_max

    g = lm.Graph("dynamic")
    g.output(nn.max_pool(g.input("x", ("n", 3, 13, 13)), (9, 9), 1, 4))
    model = g.compile(device="cpu")
    assert [bool(separable_max(n)) for n in toposort(model.outputs) if n.op is Op.WINDOW_REDUCE] == [True]
    rng = np.random.default_rng(5)
    for n in (2, 1, 0):
        x = rng.standard_normal((n, 3, 13, 13)).astype(np.float32)
        x[..., 3, 4] = np.nan
        (got,) = model({"x": x})
        np.testing.assert_array_equal(got, F.max_pool2d(torch.from_numpy(x), 9, 1, 4).numpy(), err_msg=f"batch {n}")


def _window_chain(x: np.ndarray, kernel, w: np.ndarray | None, kind: str) -> np.ndarray:
    """Every output of a stride-1 window (`x`'s trailing dims, already padded) as one chain in the
    window's row-major order, in x's dtype from the identity: acc + x * w per term (rounded
    each time, no FMA), or the NaN-propagating max (`_chain_max`'s rule)."""
    out_shape = x.shape[:-len(kernel)] + tuple(n - k + 1 for n, k in zip(x.shape[-len(kernel):], kernel))
    acc = np.full(out_shape, 0 if kind == "sum" else -np.inf, x.dtype)
    for k in np.ndindex(*kernel):
        term = x[(...,) + tuple(slice(j, j + n) for j, n in zip(k, out_shape[-len(kernel):]))]
        if kind == "sum":
            acc = acc + (term * w[(...,) + k].reshape(w.shape[:-len(kernel)] + (1,) * len(kernel)) if w is not None else term)
        else:
            acc = np.where((term > acc) | (term != term), term, acc)
    return acc


def test_windows_past_the_unrolled_size_run_the_window_outside_the_row():
    """Windows past `UNROLL` terms (a 10x10 depthwise conv with its ReLU fused after it, a 9x9
    average pool's sum, a 5x5x5 max pool) run their loops outside the vector loop over each
    output row (`cpu.conv._window_outside_body`): each output the chain over its window in order,
    the bits a sequential f32 sum or max gives."""
    rng = np.random.default_rng(29)
    x = rng.standard_normal((1, 3, 16, 18)).astype(np.float32)
    x3 = rng.standard_normal((1, 2, 9, 10, 11)).astype(np.float32)
    x3[0, 0, 4, 5, 6] = np.nan
    w = rng.standard_normal((3, 1, 10, 10)).astype(np.float32)
    g = lm.Graph("outside")
    xi, x3i = g.input("x", x.shape), g.input("x3", x3.shape)
    g.output(nn.conv(xi, g.constant(w), padding=2, groups=3).relu(), "dw")
    g.output(nn.avg_pool(xi, (9, 9), 1), "avg")
    g.output(nn.max_pool(x3i, (5, 5, 5), 1), "max3")
    model = g.compile(device="cpu")
    windows = [n for n in toposort(model.outputs) if n.op is Op.WINDOW_REDUCE]
    assert len(windows) == 3, windows
    dw, avg, max3 = model({"x": x, "x3": x3})
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    want = np.maximum(_window_chain(padded, (10, 10), w[:, 0][None], "sum"), np.float32(0))
    np.testing.assert_array_equal(dw, want)
    t = torch.from_numpy(x)
    np.testing.assert_allclose(avg, F.avg_pool2d(t, 9, 1).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(max3, F.max_pool3d(torch.from_numpy(x3), 5, 1).numpy())
    np.testing.assert_array_equal(max3, _window_chain(x3, (5, 5, 5), None, "max"))


@pytest.mark.parametrize("dtype", [DType.I32, DType.I64])
def test_a_two_pass_max_pool_of_integers_is_the_reference_runtimes(dtype):
    """Integer max pools (unpadded: a padded one raises) take the two passes too: the NumPy
    runtime's values, the extremes of the type included."""
    from luminal.kernels.cpu.max_pool import separable_max

    info = np.iinfo(dtype.numpy)
    rng = np.random.default_rng(37)
    x = rng.integers(-50, 50, (2, 3, 17, 19)).astype(dtype.numpy)
    x[0, 0, :3, :3] = info.min
    x[1, 2, 5, 5] = info.max
    g = lm.Graph("ints")
    xi = g.input("x", x.shape, dtype)
    g.output(nn.max_pool(xi, (5, 5), 1), "s1")
    g.output(nn.max_pool(xi, (9, 9), 2), "s2")
    model = g.compile(device="cpu")
    assert all(separable_max(n) for n in toposort(model.outputs) if n.op is Op.WINDOW_REDUCE)
    for got, want in zip(model({"x": x}), g.compile(device="numpy")({"x": x})):
        assert got.dtype == want.dtype == dtype.numpy
        np.testing.assert_array_equal(got, want)


def test_a_two_pass_max_pool_over_a_large_plane_goes_in_bands_of_rows():
    """A plane whose row maxima would not fit one stack buffer (`max_pool.ROWS_MAX`) is pooled in
    bands of output rows, each band's maxima computed again at its borders: the chain's bits at
    stride 1 and 2, the last band shorter."""
    from luminal.kernels.cpu.max_pool import ROWS_MAX, separable_max

    rng = np.random.default_rng(31)
    x = rng.choice(np.array([-0.0, 0.0, -1.0, 1.0], np.float32), size=(1, 2, 200, 100))
    x[0, 1][rng.random((200, 100)) < 0.01] = np.nan
    g = lm.Graph("bands")
    xi = g.input("x", x.shape)
    for s in (1, 2):
        g.output(nn.max_pool(xi, (9, 9), s, 4), f"s{s}")
    model = g.compile(device="cpu")
    plans = [separable_max(n) for n in toposort(model.outputs) if n.op is Op.WINDOW_REDUCE]
    assert len(plans) == 2 and all(p and p.band < p.oh and p.rows(p.band) * p.ow <= ROWS_MAX for p in plans), plans
    chain = _window_chain(np.pad(x, ((0, 0), (0, 0), (4, 4), (4, 4)), constant_values=-np.inf), (9, 9), None, "max")
    for s, got in zip((1, 2), model({"x": x})):
        want = chain[..., ::s, ::s]
        np.testing.assert_array_equal(got, want, err_msg=f"stride {s}")
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"stride {s}")
    # one output row whose maxima would not fit the buffer (a pool over the whole height of a
    # long strip): the one-pass window, never an oversized stack buffer
    g = lm.Graph("strip")
    g.output(nn.max_pool(g.input("x", (1, 1, 9, 3 * ROWS_MAX)), (9, 9), 1), "y")
    strip = g.compile(device="cpu")
    assert [separable_max(n) for n in toposort(strip.outputs) if n.op is Op.WINDOW_REDUCE] == [None]
    x = rng.standard_normal((1, 1, 9, 3 * ROWS_MAX)).astype(np.float32)
    (got,) = strip({"x": x})
    np.testing.assert_array_equal(got, F.max_pool2d(torch.from_numpy(x), 9, 1).numpy())


def test_1x1_conv_on_a_channel_split_is_a_gemm_on_the_slice():
    """ShuffleNet's unit: channel shuffle, split in two, a 1x1 conv on the second half. The
    operand sits at an offset into the shuffled buffer: still one MatMul reading it in place
    (it was a broadcast product of 116 x 196 x 116 and a KahanSum), on every device."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 4, 1, 1)).astype(np.float32)

    def build(g):
        x = g.input("x", (2, 8, 5, 5))
        shuffled = x.reshape((2, 2, 4, 5, 5)).permute((0, 2, 1, 3, 4)).contiguous().reshape((2, 8, 5, 5))
        return nn.conv(shuffled[:, 4:], g.constant(w))

    outputs = _optimized(build)
    ops = collections.Counter(n.op for n in toposort(outputs) if n.op not in (Op.INPUT, Op.VIEW, Op.CONSTANT))
    assert ops == {Op.CONTIGUOUS: 1, Op.MAT_MUL: 1}, ops  # the shuffle's copy, the GEMM on its second half
    x = _values(rng, (2, 8, 5, 5), True)
    want = F.conv2d(torch.from_numpy(x.reshape(2, 2, 4, 5, 5).transpose(0, 2, 1, 3, 4).reshape(2, 8, 5, 5)[:, 4:].copy()),
                    torch.from_numpy(w)).numpy()
    g = lm.Graph("split")
    g.output(build(g))
    for device in ("numpy", "cpu"):
        np.testing.assert_allclose(g.compile(device=device)({"x": x})[0], want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.skipif(not devices.get("cpu").available, reason="no C compiler")
def test_cpu_conv_gemm_fills_im2col_tiles_from_the_unpadded_input():
    """On the C backend a GEMM conv is one kernel: tiles of the im2col matrix filled straight
    from the input (the padding read as zeros through the pad's mask), each multiplied into its
    output columns. The pad and im2col copies keep steps that do nothing; the result is the
    NumPy runtime's, at both precisions (tiles in parallel and one after another), for grouped
    and batched convs and a last partial tile, and from stored artifacts; an im2col copy
    something else also reads is materialized as before."""
    rng = np.random.default_rng(4)
    x = _values(rng, (2, 16, 40, 36), True)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.2 for s in ((16, 8, 3, 3), (8, 16, 5, 5)))
    g = lm.Graph("tiles")
    xi = g.input("x", (2, 16, 40, 36))
    g.output(nn.conv(xi, g.constant(w1), None, 1, 1, 1, 2).relu(), "grouped")  # (n, g) batch, wide output: tiles
    g.output(nn.conv(xi, g.constant(w2), None, 1, (2, 1), 1, 1), "tiled")  # K = 400, N = 40 x 34: three tiles
    cols = nn.windows(xi, (2, 2), (2, 2), (1, 1)).permute((0, 1, 4, 5, 2, 3)).reshape((2, 64, 360))
    g.output(g.constant(np.ones((3, 64), np.float32)).matmul(cols).add(cols.sum(1, keepdim=True)), "shared_copy")
    want = g.compile(device="numpy")({"x": x})
    compiled = g.compile(device="cpu")
    steps = compiled.runtime.program.steps
    # the grouped conv's GEMM runs in its ReLU's kernel and the shared copy's in its add's
    # (`conv_gemm.GemmEpilogue`), their own steps idle
    fused = [s for s in steps if s.output.op in (Op.MAT_MUL, Op.MAXIMUM) and any(i.op is Op.INPUT for i in s.inputs)]
    idle = [s for s in steps if not s.inputs]
    assert len(fused) == 2 and len(idle) == 6, [(s.name, [i.op for i in s.inputs]) for s in steps]
    for precision in ("float32", "float64"):
        previous = lm.set_precision(precision)
        try:
            got = compiled({"x": x})
        finally:
            lm.set_precision(previous)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True)
    from luminal.kernels.cpu.runtime import CpuRuntime  # a later process: the steps from stored artifacts

    restored = CpuRuntime(compiled.outputs, artifacts=compiled.runtime.artifacts())
    assert restored.restored and [s.name for s in restored.program.steps] == [s.name for s in steps]
    for a, b in zip(restored({"x": x}), want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_empty_batch():
    g = lm.Graph("empty")
    g.output(nn.conv(g.input("x", (0, 4, 6, 6)), g.input("w", (4, 1, 3, 3)), None, 1, 1, 1, 4), "dw")
    g.output(nn.max_pool(g.input("y", (0, 2, 6, 6)), (2, 2)), "pool")
    feeds = {"x": np.zeros((0, 4, 6, 6), np.float32), "w": np.ones((4, 1, 3, 3), np.float32),
             "y": np.zeros((0, 2, 6, 6), np.float32)}
    for device in ("numpy", "cpu"):
        dw, pool = g.compile(device=device)(feeds)
        assert dw.shape == (0, 4, 6, 6) and pool.shape == (0, 2, 3, 3)


def test_activations_fuse_into_one_region():
    """relu6 and hardswish (clamps: maximum of stacks) become one elementwise region (the relu6
    output, read twice by hardswish, a level shared inside it), no stack, no reduction."""
    outputs = _optimized(lambda g: _hardswish(g.input("x", (2, 3, 5, 4)).clamp(0.0, 6.0)))
    ops = collections.Counter(n.op for n in toposort(outputs) if n.op not in (Op.INPUT, Op.VIEW, Op.CONSTANT))
    assert ops == {Op.FUSED_ELEMENTWISE: 1}, ops
    assert any(e.op is Op.MAXIMUM for n in toposort(outputs) if n.op is Op.FUSED_ELEMENTWISE for e in n.arg.toposort())


def test_maximum_matches_its_definition():
    rng = np.random.default_rng(2)
    a, b = (Node(Op.INPUT, DType.F32, (4, 5), (), k) for k in "ab")
    feeds = {k: np.where(rng.random((4, 5)) < 0.3, rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], np.float32), (4, 5)),
                         rng.standard_normal((4, 5)).astype(np.float32)) for k in "ab"}
    fused = Node(Op.MAXIMUM, DType.F32, (4, 5), (a, b))
    (ref,) = reference.decompose([fused])
    np.testing.assert_array_equal(NumpyRuntime([fused])(feeds)[0], NumpyRuntime([ref])(feeds)[0])


def test_window_reduce_matches_its_definition():
    """The fused op's NumPy implementation against its decomposition (egraph/reference.py)."""
    rng = np.random.default_rng(1)
    x = Node(Op.INPUT, DType.F32, (1, 3, 6, 6), (), "x")
    w = Node(Op.INPUT, DType.F32, (3, 3, 3), (), "w")
    shape = (1, 3, 4, 4, 3, 3)
    xv = Node(Op.VIEW, DType.F32, shape, (x,), ShapeTracker(shape, (108, 36, 6, 1, 6, 1), 0))
    wv = Node(Op.VIEW, DType.F32, shape, (w,), ShapeTracker(shape, (0, 9, 0, 0, 3, 1), 0))
    feeds = {"x": _values(rng, (1, 3, 6, 6), True), "w": _values(rng, (3, 3, 3), False)}
    for fused in (Node(Op.WINDOW_REDUCE, DType.F32, shape[:4], (xv, wv), ("sum", 2)),
                  Node(Op.WINDOW_REDUCE, DType.F32, shape[:4], (xv,), ("max", 2)),
                  Node(Op.WINDOW_REDUCE, DType.F32, shape[:5], (xv, wv), ("sum", 1))):
        (ref,) = reference.decompose([fused])
        used = {k: v for k, v in feeds.items() if k in ("x", "w")[: len(fused.src)]}
        got, want = NumpyRuntime([fused])(used)[0], NumpyRuntime([ref])(used)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_symbolic_batch_and_spatial_dims():
    """One build serves every size; the depthwise conv and the pool stay WindowReduces."""
    g = lm.Graph("symbolic")
    x = g.input("x", ("n", 4, "h", "w"))
    g.output(nn.conv(x, g.input("w", (4, 1, 3, 3)), None, 2, 1, 1, 4), "dw")
    g.output(nn.conv(x, g.input("w2", (6, 4, 3, 3)), None, 1, 1), "conv")
    g.output(nn.max_pool(x, (3, 3), 2, 1), "pool")
    cg = g.compile(device="cpu")
    assert collections.Counter(n.op for n in toposort(cg.outputs))[Op.WINDOW_REDUCE] == 2
    rng = np.random.default_rng(3)
    w, w2 = _values(rng, (4, 1, 3, 3), False), _values(rng, (6, 4, 3, 3), False)
    for shape in ((1, 4, 9, 8), (2, 4, 12, 7)):
        xv = _values(rng, shape, True)
        dw, conv, pool = cg({"x": xv, "w": w, "w2": w2})
        t = torch.from_numpy(xv)
        _close(dw, F.conv2d(t, torch.from_numpy(w), None, 2, 1, 1, 4).numpy(), f"depthwise {shape}")
        _close(conv, F.conv2d(t, torch.from_numpy(w2), None, 1, 1).numpy(), f"conv {shape}")
        _close(pool, F.max_pool2d(t, 3, 2, 1).numpy(), f"pool {shape}")


def test_save_load_and_malformed_fused_nodes(tmp_path):
    """A saved graph with WindowReduce and Maximum loads and runs; a malformed one is refused."""
    from luminal.errors import LuminalError
    from luminal.hlir.verify import check_node

    g = lm.Graph("saved")
    x = g.input("x", (1, 4, 9, 8))
    w = g.constant(_values(np.random.default_rng(4), (4, 1, 3, 3), False))
    g.output(nn.conv(x, w, None, 1, 1, 1, 4).clamp(0.0, 6.0), "dw")
    g.output(nn.max_pool(x, (3, 3), 2, 1), "pool")
    cg = g.compile(device="cpu")
    cg.save(tmp_path / "m.lum")
    xv = _values(np.random.default_rng(5), (1, 4, 9, 8), True)
    for got, want in zip(lm.load(tmp_path / "m.lum", device="cpu")({"x": xv}), cg({"x": xv})):
        np.testing.assert_array_equal(got, want)
    a = Node(Op.INPUT, DType.F32, (2, 3, 3), (), "a")
    for bad in (Node(Op.WINDOW_REDUCE, DType.F32, (2,), (a,), ("mean", 2)),
                Node(Op.WINDOW_REDUCE, DType.F32, (2, 3), (a,), ("sum", 2)),
                Node(Op.WINDOW_REDUCE, DType.F32, (2, 3, 3), (a, a, a), ("sum", 0)),
                Node(Op.MAXIMUM, DType.F32, (2, 3), (a, a))):
        with pytest.raises(LuminalError):
            check_node(bad)
