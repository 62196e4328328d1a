"""The C backend's WindowReduce kernels (`luminal/kernels/cpu/conv.py`) at their size thresholds.

Depthwise convs and pools whose output rows are narrow (one flat vector loop per plane, up to
`FLAT_MAX` elements) or wide (a vector loop per row), on both sides of each threshold, with
strides, dilation, padding, odd sizes, NaN and infinities in the input, large enough for the
thread team: the C against the NumPy runtime (the spec) and torch. And the kernels' shape: a
conv's weights are read once per row or plane, before the vector loop, not per element.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import luminal as lm
from luminal import devices
from luminal.builder import nn
from luminal.hlir.ops import Op, toposort
from luminal.kernels.cpu import conv as cpu_conv
from luminal.kernels.cpu import conv_gemm
from luminal.kernels.render import C
from luminal.kernels.render.cexpr import rendering

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.skipif(not devices.get("cpu").available, reason="no C compiler")

# (name, input shape, weight shape, stride, padding, dilation): depthwise (groups = channels)
CONVS = [
    ("w63_flat", (1, 2, 6, 63), (2, 1, 3, 3), 1, 1, 1),  # the widest flat plane
    ("w64_rows", (1, 2, 5, 64), (2, 1, 3, 3), 1, 1, 1),  # the narrowest row loop
    ("flat_max", (1, 1, 64, 62), (1, 1, 3, 3), 1, 1, 1),  # 64 rows of 64: FLAT_MAX exactly
    ("over_flat_max", (1, 1, 65, 62), (1, 1, 3, 3), 1, 1, 1),  # one row more: the row loop
    ("odd_rows_team", (2, 8, 37, 67), (8, 1, 3, 3), 1, 1, 1),  # rows of 67, work for two threads
    ("stride2_wide", (1, 4, 9, 141), (4, 1, 3, 3), 2, 1, 1),
    ("stride2_dil2_wide", (1, 2, 9, 140), (2, 1, 3, 3), 2, 2, 2),
    ("stride2_narrow", (1, 6, 15, 15), (6, 1, 3, 3), 2, 1, 1),  # rows of 8, not a flat plane (stride 2)
    ("mult2_5x5_wide", (1, 2, 8, 70), (4, 1, 5, 5), 1, 2, 1),  # two outputs per input channel
    ("no_pad_7x7", (1, 3, 20, 19), (3, 1, 7, 7), 1, 0, 1),  # 49 terms, unrolled; a flat plane
    ("loops_9x9_wide", (1, 2, 12, 72), (2, 1, 9, 9), 1, 4, 1),  # 81 terms: window loops, not unrolled
]
# (name, input shape, torch function, luminal function)
POOLS = [
    ("max3_s2_p1_wide", (1, 3, 7, 131), lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: nn.max_pool(x, (3, 3), 2, 1)),
    ("max3_s1_p1_flat", (1, 3, 14, 14), lambda x: F.max_pool2d(x, 3, 1, 1), lambda x: nn.max_pool(x, (3, 3), 1, 1)),
    ("max2_team", (2, 16, 30, 130), lambda x: F.max_pool2d(x, 2), lambda x: nn.max_pool(x, (2, 2))),
    ("avg3_s2_p1_wide", (1, 3, 7, 131), lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: nn.avg_pool(x, (3, 3), 2, 1)),
    ("avg3_s1_flat", (1, 3, 12, 13), lambda x: F.avg_pool2d(x, 3, 1, 0), lambda x: nn.avg_pool(x, (3, 3), 1, 0)),
]


def _values(rng, shape) -> np.ndarray:
    v = rng.standard_normal(shape).astype(np.float32)
    v.flat[[3, 70, v.size // 2]] = [np.nan, np.inf, -np.inf]
    v.flat[-2] = -0.0
    return v


@pytest.fixture(scope="module")
def grid():
    rng = np.random.default_rng(5)
    g, feeds, want = lm.Graph("window_reduce"), {}, {}
    for name, xs, ws, stride, padding, dilation in CONVS:
        x, w, b = _values(rng, xs), rng.standard_normal(ws).astype(np.float32), rng.standard_normal(ws[:1]).astype(np.float32)
        feeds[f"{name}_x"] = x
        out = nn.conv(g.input(f"{name}_x", xs), g.constant(w), g.constant(b), stride, padding, dilation, xs[1])
        g.output(out, name)
        want[name] = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, padding, dilation, xs[1]).numpy()
    for name, xs, fn, lfn in POOLS:
        x = _values(rng, xs)
        feeds[f"{name}_x"] = x
        g.output(lfn(g.input(f"{name}_x", xs)), name)
        want[name] = fn(torch.from_numpy(x)).numpy()
    return g, feeds, want


def _close(got, want, what):
    assert got.shape == want.shape, what
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=what)


def test_cpu_matches_numpy_runtime_and_torch(grid):
    g, feeds, want = grid
    names = [n for n, *_ in CONVS] + [n for n, *_ in POOLS]
    spec = dict(zip(names, g.run(feeds)))
    got = dict(zip(names, g.compile(device="cpu")(feeds)))
    for name in names:
        _close(spec[name], want[name], f"{name}: the NumPy runtime vs torch")
        _close(got[name], spec[name], f"{name} on cpu vs the NumPy runtime")
        _close(got[name], want[name], f"{name} on cpu vs torch")


def _window_reduce_body(xs, ws, stride=1, padding=1) -> str:
    g = lm.Graph("one")
    w = np.random.default_rng(0).standard_normal(ws).astype(np.float32)
    g.output(nn.conv(g.input("x", xs), g.constant(w), None, stride, padding, 1, xs[1]))
    nodes = [n for n in toposort(g.compile(device="numpy").outputs) if n.op is Op.WINDOW_REDUCE]
    assert len(nodes) == 1
    with rendering(C):
        inputs, _, _, body = cpu_conv.window_reduce(nodes[0])
    assert len(inputs) == 2
    return body


@pytest.mark.parametrize("xs, stride", [((1, 4, 20, 100), 1), ((1, 4, 20, 100), 2), ((1, 4, 14, 14), 1)],
                         ids=["rows", "rows_stride2", "flat_plane"])
def test_conv_weights_are_read_before_the_vector_loop(xs, stride):
    """The 9 weights of a 3x3 depthwise conv are locals set per row (or plane): the vector loop
    reads one buffer, the input (in the OpenMP region the pointers are not `restrict`, so the
    compiler reloads a weight read inside the loop for every vector of outputs)."""
    body = _window_reduce_body(xs, (xs[1], 1, 3, 3), stride)
    head, loop = body.split("#pragma omp simd", 1)
    assert len(re.findall(r"const float w\d+ = ", head)) == 9, head
    assert len(set(re.findall(r"\bin\d+\[", loop))) == 1, loop  # the input's reads only
    if stride == 2:  # the row's loop reads the phase rows filled before it (`_phases`), no buffer
        assert not re.findall(r"\bin\d+\[", body.rsplit("#pragma omp simd", 1)[1])


# (name, input shape, weight shape, stride, padding, dilation) of convs whose rows take phase rows
STRIDED = [
    ("s2_k3", (1, 3, 9, 141), (3, 1, 3, 3), 2, 1, 1),
    ("s2_k5_odd", (1, 2, 11, 133), (2, 1, 5, 5), 2, 2, 1),
    ("s3_k2", (1, 2, 6, 200), (2, 1, 2, 2), 3, 0, 1),  # fewer taps than the stride: 2 of 3 phases
    ("s4_dil2", (1, 2, 9, 150), (2, 1, 3, 3), 4, 2, 2),  # the dilation's stride is the window axis's
    ("s2_mult2", (2, 2, 7, 66), (4, 1, 3, 3), 2, 1, 1),  # two outputs per channel, a batch of 2
]


def _strided_graph(rng):
    g, feeds = lm.Graph("strided"), {}
    for name, xs, ws, stride, padding, dilation in STRIDED:
        feeds[f"{name}_x"] = _values(rng, xs)
        w = g.constant(rng.standard_normal(ws).astype(np.float32))
        g.output(nn.conv(g.input(f"{name}_x", xs), w, None, stride, padding, dilation, xs[1]), name)
    for name, fn in [("max_s2", lambda x: nn.max_pool(x, (3, 3), 2, 1)), ("avg_s2", lambda x: nn.avg_pool(x, (3, 3), 2, 1))]:
        feeds[f"{name}_x"] = _values(rng, (1, 3, 7, 131))
        g.output(fn(g.input(f"{name}_x", (1, 3, 7, 131))), name)
    x = g.input("epi_x", (1, 6, 15, 130))  # with a BatchNorm + ReLU6 epilogue in the kernel
    feeds["epi_x"] = _values(rng, (1, 6, 15, 130))
    g.output(_bn_relu6(nn.conv(x, g.constant(rng.standard_normal((6, 1, 3, 3)).astype(np.float32)), None, 2, 1, 1, 6), 6), "epi")
    return g, feeds


def test_strided_rows_through_phase_rows_keep_the_bits(fused, monkeypatch):
    """A stride-s window along the row reads phase rows (`conv_phases.strided_phases`: each input row split into s
    contiguous rows before the row's loop) with the terms in the same order, so the bits equal the
    strided reads': compared with the kernels built without them, NaN, infinities and -0.0 in the
    inputs, and with the NumPy runtime."""
    g, feeds = _strided_graph(np.random.default_rng(11))
    spec = g.run(feeds)
    compiled = g.compile(device="cpu")
    # (some of these lower to compensated sums, not WindowReduce: the rest take phase rows, of
    # the input itself or, read through their padding in place, of the unpadded one: pd)
    source = compiled.runtime.source
    assert source.count(" ph0_0[") + source.count(" pd0_0[") >= 5, source
    got = compiled(feeds)
    monkeypatch.setattr(cpu_conv, "strided_phases", lambda *a: None)
    monkeypatch.setattr(cpu_conv, "window_pad", lambda *a: None)
    monkeypatch.setattr(conv_gemm, "window_pad", lambda *a: None)
    plain = g.compile(device="cpu")
    assert "ph0_1[" not in plain.runtime.source and "pd0_1[" not in plain.runtime.source
    for name, a, b, s in zip(compiled.output_names, got, plain(feeds), spec):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32), err_msg=name)
        _close(a, s, f"{name} on cpu vs the NumPy runtime")


# --- a WindowReduce's pointwise epilogue in its kernel (`conv.WindowEpilogue`) --------------------
@pytest.fixture
def fused(monkeypatch):
    """The C library built at once (not after the tiered NumPy runtime's first calls) and not
    from the compile cache, so the program holds the fused kernels `program.py` plans."""
    monkeypatch.setenv("LUMINAL_TIERED", "0")
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")


def _bn_relu6(t, c):
    """A BatchNorm (per-channel scale and shift, as inference folds it) and ReLU6, in torch or luminal."""
    scale, shift = np.linspace(0.5, 1.5, c, dtype=np.float32), np.linspace(-1, 1, c, dtype=np.float32)
    if isinstance(t, torch.Tensor):
        return (t * torch.from_numpy(scale)[:, None, None] + torch.from_numpy(shift)[:, None, None]).clamp(0.0, 6.0)
    g = t.graph
    return (t * g.constant(scale).reshape((c, 1, 1)).expand(t.shape) + g.constant(shift).reshape((c, 1, 1)).expand(t.shape)).clamp(0.0, 6.0)


EPILOGUES = [  # (name, input shape, kernel, stride, padding, dilation, epilogue)
    ("bn_relu6_rows", (1, 8, 11, 70), 3, 1, 1, 1, "bn_relu6"),
    ("bn_relu6_flat", (2, 8, 14, 14), 3, 1, 1, 1, "bn_relu6"),
    ("bn_relu6_stride2", (1, 6, 15, 130), 3, 2, 1, 1, "bn_relu6"),
    ("hardswish_flat_team", (1, 64, 28, 28), 3, 1, 1, 1, "hardswish"),
    ("hardswish_rows_team", (1, 16, 40, 72), 3, 1, 1, 1, "hardswish"),
    ("bias_only_rows", (1, 4, 9, 80), 3, 1, 1, 1, "bias"),
    ("dil2_5x5_pad3_rows", (1, 3, 12, 75), 5, 1, 3, 2, "bn_relu6"),
    ("5x5_stride3_pad2_rows", (1, 2, 9, 200), 5, 3, 2, 1, "bias"),
    ("no_pad_rows", (1, 2, 6, 90), 3, 1, 0, 1, "bn_relu6"),
]


def _epilogue(kind, t, c):
    if kind == "bn_relu6":
        return _bn_relu6(t, c)
    if kind == "hardswish":
        return F.hardswish(t) if isinstance(t, torch.Tensor) else t.mul(t.add(3.0).clamp(0.0, 6.0)).mul(1.0 / 6.0)
    return t


def test_a_depthwise_conv_and_its_epilogue_are_one_kernel(fused):
    """Depthwise convs followed by BatchNorm + ReLU6, hardswish or only the bias, and pools by their
    scale: every WindowReduce is absorbed into the pointwise kernel after it (its step does
    nothing); the values, NaN and infinities (at the borders too) are the NumPy runtime's and torch's."""
    rng = np.random.default_rng(11)
    g, feeds, want = lm.Graph("epilogues"), {}, {}
    for name, xs, k, stride, padding, dilation, kind in EPILOGUES:
        c = xs[1]
        x, w, b = _values(rng, xs), rng.standard_normal((c, 1, k, k)).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        x[0, 0, 0, :3] = [np.nan, -np.inf, np.inf]  # read by the windows that cross the border
        x[0, -1, -1, -2:] = [np.inf, np.nan]
        feeds[f"{name}_x"] = x
        conv = nn.conv(g.input(f"{name}_x", xs), g.constant(w), g.constant(b), stride, padding, dilation, c)
        g.output(_epilogue(kind, conv, c), name)
        ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride, padding, dilation, c)
        want[name] = _epilogue(kind, ref, c).numpy()
    x = _values(rng, (1, 3, 12, 70))
    feeds["avg_x"] = x
    g.output(nn.avg_pool(g.input("avg_x", x.shape), (3, 3), 2, 1) * 2.0, "avg")
    want["avg"] = (F.avg_pool2d(torch.from_numpy(x), 3, 2, 1) * 2.0).numpy()
    names = [n for n, *_ in EPILOGUES] + ["avg"]
    spec = dict(zip(names, g.run(feeds)))
    compiled = g.compile(device="cpu")
    got = dict(zip(names, compiled(feeds)))
    for name in names:
        _close(spec[name], want[name], f"{name}: the NumPy runtime vs torch")
        _close(got[name], spec[name], f"{name} on cpu vs the NumPy runtime")
        _close(got[name], want[name], f"{name} on cpu vs torch")
    steps = compiled.runtime.program.steps
    windows = [st for st in steps if st.output.op is Op.WINDOW_REDUCE]
    assert len(windows) == len(names) and all(st.absorbed for st in windows), [(st.name, st.absorbed) for st in windows]


def test_a_window_read_elsewhere_keeps_its_own_kernel(fused):
    """A WindowReduce that is also a graph output, or that a pointwise op reads transposed, is
    computed by its own kernel (one write, read by the epilogue): the same values."""
    rng = np.random.default_rng(12)
    x, w = _values(rng, (1, 4, 10, 10)), rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    g = lm.Graph("kept")
    conv = nn.conv(g.input("x", x.shape), g.constant(w), None, 1, 1, 1, 4)
    g.output(conv, "conv")
    g.output(conv.relu(), "relu")
    conv2 = nn.conv(g.input("x2", x.shape), g.constant(w), None, 1, 1, 1, 4)
    g.output(conv2.permute((0, 1, 3, 2)) * 2.0, "transposed")
    t = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, 1, 1, 1, 4)
    want = [t.numpy(), t.relu().numpy(), (t.permute(0, 1, 3, 2) * 2.0).numpy()]
    compiled = g.compile(device="cpu")
    for got, ref in zip(compiled({"x": x, "x2": x}), want):
        _close(got, ref, "cpu vs torch")
    steps = compiled.runtime.program.steps
    assert not any(st.absorbed for st in steps if st.output.op is Op.WINDOW_REDUCE)


def test_two_convs_of_one_padded_input_fuse_their_epilogues(fused):
    """Two depthwise convs (rows of 70) of one padded input: each fused with its ReLU, the padded
    copy they share written once and read by both."""
    rng = np.random.default_rng(13)
    x, w1, w2 = _values(rng, (1, 4, 6, 70)), rng.standard_normal((4, 1, 3, 3)).astype(np.float32), rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    g = lm.Graph("shared_pad")
    xi = g.input("x", x.shape)
    for name, w in (("a", w1), ("b", w2)):
        g.output(nn.conv(xi, g.constant(w), None, 1, 1, 1, 4).relu(), name)
    compiled = g.compile(device="cpu")
    for got, w in zip(compiled({"x": x}), (w1, w2)):
        _close(got, F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, 1, 1, 1, 4).relu().numpy(), "cpu vs torch")
    steps = compiled.runtime.program.steps
    assert [st.absorbed for st in steps if st.output.op is Op.CONTIGUOUS] == [False]
    assert all(st.absorbed for st in steps if st.output.op is Op.WINDOW_REDUCE)


# --- a padded operand read in place (`conv_padded.WindowPad`) ------------------------------------
# (name, input shape, kernel, stride, padding, dilation, what): rows of 64 or more (narrower ones
# run as flat planes over the padded copy, with 16 planes or more over a plane of it at a time),
# stride 1 (the border split) and strided (phase rows)
PADDED = [
    ("dw_s1", (1, 5, 7, 130), 3, 1, 1, 1, "conv"),
    ("dw_s2", (1, 4, 9, 141), 3, 2, 1, 1, "conv"),
    ("dw_k5_dil2", (2, 3, 8, 140), 5, 1, 4, 2, "conv"),  # two planes a channel apart, a padding of 4
    ("dw_s3_k2_pad0", (1, 2, 6, 200), 2, 3, 0, 1, "conv"),  # no padding: no copy, nothing to read through
    ("dw_s1_bn_relu6", (1, 6, 6, 100), 3, 1, 1, 1, "conv_bn_relu6"),
    ("dw_s2_bn_relu6", (1, 6, 9, 133), 3, 2, 1, 1, "conv_bn_relu6"),
    ("max_s2", (1, 3, 9, 150), 3, 2, 1, 1, "max"),  # -inf padding
    ("dw_s3_k5_pad2", (1, 3, 8, 200), 5, 3, 2, 1, "conv"),  # three phases filled side by side
    ("max_s3_pad1", (1, 3, 9, 190), 3, 3, 1, 1, "max"),
    ("dw_s2_k5_pad2", (1, 2, 10, 151), 5, 2, 2, 1, "conv"),  # each phase's own ends two wide
    ("max_s2_k2_pad1", (1, 2, 6, 129), 2, 2, 1, 1, "max"),
    # 16 planes or more: strided rows a plane at a time (`conv_padded.plane_rows`), each row of the
    # copy filled once; past PLANE_MAX elements a plane, a row at a time again
    ("dw_s2_planes_bn_relu6", (1, 16, 9, 141), 3, 2, 1, 1, "conv_bn_relu6"),
    ("dw_s3_k5_planes", (1, 16, 11, 130), 5, 3, 2, 1, "conv"),
    ("max_s2_planes", (2, 8, 10, 133), 3, 2, 1, 1, "max"),  # planes of two images
    ("max_s2_k2_pad1_planes", (1, 17, 7, 129), 2, 2, 1, 1, "max"),  # the last output row reads the bottom pad
    ("dw_s2_past_plane_max", (1, 16, 40, 600), 3, 2, 1, 1, "conv"),
    # narrow stride-1 rows over 16 planes or more: each plane's padded copy in a stack buffer,
    # read as one flat run (`conv._plane_flat_body`), not a copy written whole
    ("dw_s1_flat_planes_bn_relu6", (1, 16, 14, 14), 3, 1, 1, 1, "conv_bn_relu6"),
    ("dw_s1_k5_flat_planes", (1, 16, 9, 28), 5, 1, 2, 1, "conv"),
    ("dw_dil2_flat_planes", (1, 16, 10, 30), 3, 1, 2, 2, "conv"),
    ("max_s1_flat_planes", (2, 8, 7, 7), 3, 1, 1, 1, "max"),
    # strided rows under 32 outputs over 16 planes or more: the plane's rows by row phase, one
    # flat run (`conv_padded.FLAT_STRIDED_MAX`)
    ("dw_s2_flat_planes_bn_relu6", (1, 16, 14, 14), 3, 2, 1, 1, "conv_bn_relu6"),
    ("dw_s3_k5_flat_planes", (1, 16, 10, 40), 5, 3, 2, 1, "conv"),
    ("max_s2_flat_planes", (2, 8, 9, 29), 3, 2, 1, 1, "max"),
    ("max_s2_k2_pad1_flat_planes", (1, 16, 8, 8), 2, 2, 1, 1, "max"),
    ("dw_s2_dil2_flat_planes", (1, 16, 13, 27), 3, 2, 2, 2, "conv"),  # every window row and column in phase 0
    ("dw_s2_dil2_planes", (1, 16, 13, 140), 3, 2, 2, 2, "conv"),
    ("max_s1", (2, 3, 5, 80), 3, 1, 1, 1, "max"),
    ("avg_s1", (1, 3, 5, 80), 3, 1, 1, 1, "avg"),
]


def _padded_graph(rng):
    g, feeds, want = lm.Graph("padded"), {}, {}
    for name, xs, k, stride, padding, dilation, what in PADDED:
        x = _values(rng, xs)
        x[:, :, 0, :2] = [np.nan, np.inf]  # read by windows across the top-left corner
        x[:, :, -1, -2:] = [-np.inf, np.nan]
        x[:, :, 3, -1] = -0.0
        feeds[f"{name}_x"] = x
        xi, xt = g.input(f"{name}_x", xs), torch.from_numpy(x)
        c = xs[1]
        if what.startswith("conv"):
            w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
            y, yt = nn.conv(xi, g.constant(w), None, stride, padding, dilation, c), F.conv2d(xt, torch.from_numpy(w), None, stride, padding, dilation, c)
            if what.endswith("bn_relu6"):
                y, yt = _bn_relu6(y, c), _bn_relu6(yt, c)
        elif what == "max":
            y, yt = nn.max_pool(xi, (k, k), stride, padding), F.max_pool2d(xt, k, stride, padding)
        else:
            y, yt = nn.avg_pool(xi, (k, k), stride, padding), None
        g.output(y, name)
        want[name] = None if yt is None else yt.numpy()
    return g, feeds, want


def test_a_padded_operand_is_read_in_place_with_the_copys_bits(fused, monkeypatch):
    """Depthwise convs (with and without their BatchNorm + ReLU6 epilogue) and pools whose rows are
    64 or more wide read their padding in place: the padded copy's step does nothing (no buffer),
    and the bits, NaN, infinities and -0.0 at the borders included, are those of the kernels
    reading the copy; the values the NumPy runtime's and torch's."""
    g, feeds, want = _padded_graph(np.random.default_rng(21))
    names = [n for n, *_ in PADDED]
    spec = dict(zip(names, g.run(feeds)))
    compiled = g.compile(device="cpu")
    steps = compiled.runtime.program.steps
    pads = [st for st in steps if st.output.op in (Op.CONTIGUOUS, Op.SELECT)]
    assert len(pads) == len(names) - 1 and all(st.absorbed for st in pads), [(st.name, st.absorbed) for st in pads]
    assert "pd0_0[" in compiled.runtime.source  # the strided rows' phase rows of the unpadded input
    # filled in one loop over the range every phase reads (`conv_phases.phases_side_by_side`), ends apart
    assert compiled.runtime.source.count("the range of j every phase reads from the input") >= 11
    assert compiled.runtime.source.count("the plane's rows of the copy") == 14
    assert compiled.runtime.source.count("output (y, x) at") == 9
    # stride 1: the rows with a window row in the padding staged too, one vector loop each
    assert compiled.runtime.source.count("a window row outside the input: its rows staged") >= 3
    got = dict(zip(names, compiled(feeds)))
    monkeypatch.setattr(cpu_conv, "window_pad", lambda *a: None)
    monkeypatch.setattr(conv_gemm, "window_pad", lambda *a: None)
    copied = g.compile(device="cpu")
    assert not any(st.absorbed for st in copied.runtime.program.steps if st.output.op in (Op.CONTIGUOUS, Op.SELECT))
    for name, b in zip(names, copied(feeds)):
        np.testing.assert_array_equal(got[name].view(np.uint32), b.view(np.uint32), err_msg=name)
        _close(got[name], spec[name], f"{name} on cpu vs the NumPy runtime")
        if want[name] is not None:
            _close(got[name], want[name], f"{name} on cpu vs torch")


def test_a_padded_copy_read_by_flat_planes_is_written(fused):
    """A padded copy whose reader runs flat planes (rows under 64: at 14 x 14) is written and read,
    as a copy two convs share is (`test_two_convs_of_one_padded_input_fuse_their_epilogues`)."""
    rng = np.random.default_rng(22)
    x, w = _values(rng, (1, 4, 14, 14)), rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    g = lm.Graph("flat_pad")
    g.output(nn.conv(g.input("x", x.shape), g.constant(w), None, 1, 1, 1, 4).relu(), "y")
    compiled = g.compile(device="cpu")
    _close(compiled({"x": x})[0], F.conv2d(torch.from_numpy(x), torch.from_numpy(w), None, 1, 1, 1, 4).relu().numpy(), "cpu vs torch")
    steps = compiled.runtime.program.steps
    assert [st.absorbed for st in steps if st.output.op is Op.CONTIGUOUS] == [False]
    assert "pd0_" not in compiled.runtime.source


def test_border_rows_past_the_staging_limit_test_each_term(fused, monkeypatch):
    """A stride-1 row too wide to stage (`conv_phases.PHASE_MAX`) keeps the tested terms at the top and
    bottom rows; either way the bits are those of the kernel reading the padded copy."""
    rng = np.random.default_rng(5)
    x = _values(rng, (1, 2, 4, 3000))
    x[:, :, 0, :2] = [np.nan, np.inf]
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    g = lm.Graph("wide")
    g.output(nn.conv(g.input("x", x.shape), g.constant(w), None, 1, 1, 1, 2), "y")
    compiled = g.compile(device="cpu")
    assert "its rows staged" not in compiled.runtime.source
    got = compiled({"x": x})[0]
    monkeypatch.setattr(cpu_conv, "window_pad", lambda *a: None)
    monkeypatch.setattr(conv_gemm, "window_pad", lambda *a: None)
    np.testing.assert_array_equal(got.view(np.uint32), g.compile(device="cpu")({"x": x})[0].view(np.uint32))
    _close(got, g.run({"x": x})[0], "a 3000-wide row on cpu vs the NumPy runtime")
