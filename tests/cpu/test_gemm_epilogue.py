"""The pointwise region after a convolution's GEMM applied to each tile of its output as the GEMM
writes it (`luminal/kernels/cpu/conv_gemm.py`, `GemmEpilogue`): a conv's BatchNorm, bias, ReLU or
ReLU6 and residual add, for the tiled im2col GEMM and the plain GEMM of a 1x1 conv.

The fused kernel stores the GEMM's result before the region reads it, so its bits are the
unfused program's; checked with NaN, inf and -0.0 in the input, the BatchNorm vectors and the
residual, on teams of 1 to 4 threads, at both precisions, against the NumPy runtime and torch,
and from stored artifacts. A GEMM whose output anything else reads (a graph output, a second
region) or that the region reads transposed is not fused.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import luminal as lm
from luminal.builder import nn
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op
from luminal.kernels.cpu import conv_direct, conv_gemm, conv_pointwise
from luminal.kernels.cpu import runtime as cpu_runtime
from luminal.kernels.cpu import steps as cpu_steps
from luminal.kernels.cpu.choices import Choices

torch = pytest.importorskip("torch")


def _special(rng, shape, scale=1.0, special=True):
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = a.reshape(-1)
    if special and flat.size >= 8:
        flat[[1, 5, 7]] = np.nan, np.inf, -0.0
    return a


# Each case: (x shape, weight shape, stride, padding, groups, epilogue), the epilogue one of
# "bn_relu" (per-channel scale and shift, then ReLU), "bias_relu6", "residual_relu".
CASES = {
    "conv3x3_bn_relu": ((2, 16, 20, 20), (32, 16, 3, 3), 1, 1, 1, "bn_relu"),
    "conv3x3_s2_bias_relu6": ((2, 8, 21, 21), (24, 8, 3, 3), 2, 1, 1, "bias_relu6"),
    "conv3x3_residual_relu": ((1, 16, 14, 14), (16, 16, 3, 3), 1, 1, 1, "residual_relu"),
    "grouped_bn_relu": ((2, 32, 12, 12), (32, 16, 3, 3), 1, 1, 2, "bn_relu"),
    "partial_tiles_bn_relu": ((1, 16, 50, 50), (16, 16, 3, 3), 1, 1, 1, "bn_relu"),  # 2500 columns: a last partial tile
    "conv1x1_bn_relu": ((2, 32, 15, 15), (48, 32, 1, 1), 1, 0, 1, "bn_relu"),
    "conv1x1_residual_relu": ((1, 24, 17, 17), (24, 24, 1, 1), 1, 0, 1, "residual_relu"),
    "grouped_conv1x1_bn_relu": ((1, 64, 14, 14), (68, 16, 1, 1), 1, 0, 4, "bn_relu"),  # ShuffleNet's: a GEMM per group, 196 columns
    # outputs past EPILOGUE_TILED_MIN: the plain GEMM in column tiles, the last one partial
    "conv1x1_tiled_bn_relu": ((1, 16, 71, 75), (64, 16, 1, 1), 1, 0, 1, "bn_relu"),
    "conv1x1_tiled_residual_relu": ((2, 64, 60, 61), (40, 64, 1, 1), 1, 0, 1, "residual_relu"),
    # past it too, but A (300 x 256) past the tile's budget: one GEMM on the team, the region after
    "conv1x1_wide_a_whole_bn_relu": ((1, 256, 24, 24), (300, 256, 1, 1), 1, 0, 1, "bn_relu"),
    # past it with a short depth: AVX2 runs them on the direct convolution's micro-kernel in units
    # of columns (`conv_pointwise`): 4 x 24 tiles and a tail of 14 columns on the BLAS; 6 x 16
    # tiles for 18 rows; 2048 rows over 64 columns, the rows split into blocks across the team
    "conv1x1_units_bias_relu6": ((1, 16, 71, 75), (64, 16, 1, 1), 1, 0, 1, "bias_relu6"),
    "conv1x1_units_6x16_residual_relu": ((1, 24, 90, 91), (18, 24, 1, 1), 1, 0, 1, "residual_relu"),
    "conv1x1_units_row_blocks_bn_relu": ((1, 32, 8, 8), (2048, 32, 1, 1), 1, 0, 1, "bn_relu"),
}


def _case(name, rng):
    xs, ws, stride, padding, groups, epi = CASES[name]
    cout = ws[0]
    ho = (xs[2] + 2 * padding - ws[2]) // stride + 1
    wo = (xs[3] + 2 * padding - ws[3]) // stride + 1
    g = lm.Graph(name)
    # (no NaN in the weights: torch's padded convs skip the padding's products, NaN * 0 included)
    feeds = {"x": _special(rng, xs), "w": _special(rng, ws, 0.2, special=False)}
    # a 1x1 conv's weight stored in the graph, as a model's is (its GEMM may take the direct
    # convolution's micro-kernel); the others' given at each call
    x, w = g.input("x", xs), g.constant(feeds["w"]) if "1x1" in name else g.input("w", ws)
    y = nn.conv(x, w, None, stride, padding, 1, groups)
    if epi == "bn_relu":
        s, b = g.input("s", (cout, 1, 1)), g.input("b", (cout, 1, 1))
        feeds["s"], feeds["b"] = _special(rng, (cout, 1, 1)), _special(rng, (cout, 1, 1))
        feeds["s"][2] = -0.0
        out = (y * s + b).relu()
    elif epi == "bias_relu6":
        b = g.input("b", (cout,))
        feeds["b"] = _special(rng, (cout,))
        out = nn.conv(x, w, b, stride, padding, 1, groups).clamp(0, 6)
    else:
        r = g.input("r", (xs[0], cout, ho, wo))
        feeds["r"] = _special(rng, (xs[0], cout, ho, wo))
        out = (y + r).relu()
    g.output(out, "y")

    weight = feeds.pop("w") if "1x1" in name else feeds["w"]

    def reference():
        t = {k: torch.from_numpy(v) for k, v in feeds.items()} | {"w": torch.from_numpy(weight)}
        yt = torch.nn.functional.conv2d(t["x"], t["w"], None, stride, padding, 1, groups)
        if epi == "bn_relu":
            return torch.relu(yt * t["s"] + t["b"]).numpy()
        if epi == "bias_relu6":
            return torch.clamp(yt + t["b"].reshape(-1, 1, 1), 0, 6).numpy()
        return torch.relu(yt + t["r"]).numpy()

    return g, feeds, reference


def _epilogue_steps(compiled):
    """The steps of regions that run a GEMM absorbed into them."""
    steps = compiled.runtime.program.steps
    gemms = {id(s.output) for s in steps if s.absorbed and s.output.op is Op.MAT_MUL}
    return [s for s in steps if not s.absorbed and any(id(v) in gemms for v in _gemm_reads(s.output))]


def _gemm_reads(node):
    return [(v.src[0] if v.op is Op.VIEW else v) for v in node.src]


def _unfused(g, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(conv_gemm, "gemm_epilogue", lambda node, users: None)
        compiled = g.compile(device="cpu")
    assert not _epilogue_steps(compiled)
    return compiled


def _close(a, b, tol):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


def test_the_tiled_cases_are_past_the_threshold():
    for name in ("conv1x1_tiled_bn_relu", "conv1x1_tiled_residual_relu"):
        xs, ws = CASES[name][:2]
        m, n, k = ws[0], xs[2] * xs[3], ws[1]
        tile = conv_gemm.epilogue_tile(m, n)
        assert m * n >= conv_gemm.EPILOGUE_TILED_MIN and n % tile and n // tile >= 2, name  # tiles, the last one partial
        assert m * k <= conv_gemm.EPILOGUE_TILE_FLOATS, name  # A small enough to pack per tile
    xs, ws = CASES["conv1x1_wide_a_whole_bn_relu"][:2]
    assert ws[0] * xs[2] * xs[3] >= conv_gemm.EPILOGUE_TILED_MIN and ws[0] * ws[1] > conv_gemm.EPILOGUE_TILE_FLOATS


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_epilogue_matches_unfused_bits_numpy_and_torch(monkeypatch, name):
    g, feeds, reference = _case(name, np.random.default_rng(3))
    want = g.compile(device="numpy")(feeds)[0]
    _close(want, reference(), 1e-4)
    fused, plain = g.compile(device="cpu"), _unfused(g, monkeypatch)
    assert len(_epilogue_steps(fused)) == 1, [(s.name, s.absorbed) for s in fused.runtime.program.steps]
    # a 1x1 conv's GEMMs (a grouped one's groups one per thread; an ungrouped one's if
    # `conv_pointwise.takes` it) through the direct convolution's micro-kernel (on x86 with
    # AVX2): one FMA chain per output in k order, not necessarily the BLAS's order, so the bits
    # are the same on every team but only close to the unfused BLAS GEMM's
    xs, ws, _, _, groups, _ = CASES[name]
    pointwise = groups == 1 and ws[2:] == (1, 1) and conv_pointwise.takes(ws[0], xs[2] * xs[3], ws[1])
    micro = ("grouped_conv1x1" in name or pointwise) and conv_direct.wanted() and cpu_steps.dc_kernels() is cpu_steps.DC_KERNELS
    assert micro == bool(re.search(r"lum_dconv_\dx\d+\(mn, K, a_ptr \+ m0 \* a_ld, a_ld, b_ptr \+ p0", fused.runtime.source))
    first = {}
    for team in (1, 2, 3, 4):
        monkeypatch.setattr(cpu_runtime, "threads", lambda team=team: team)
        for precision in ("float32", "float64"):
            previous = lm.set_precision(precision)
            try:
                got, ref = fused(feeds)[0], plain(feeds)[0]
            finally:
                lm.set_precision(previous)
            same = first.setdefault(precision, got) if micro and precision == "float32" else ref
            np.testing.assert_array_equal(got, same)  # the same bits, NaN and -0.0 included
            assert np.array_equal(np.signbit(got), np.signbit(same))
            _close(got, ref, 1e-5)
            _close(got, want, 1e-4)
    restored = cpu_runtime.CpuRuntime(fused.outputs, artifacts=fused.runtime.artifacts())
    assert restored.restored and [s.absorbed for s in restored.program.steps] == [s.absorbed for s in fused.runtime.program.steps]
    np.testing.assert_array_equal(restored(feeds)[0], fused(feeds)[0])


def test_float64_graph_is_fused_too():
    rng = np.random.default_rng(5)
    g = lm.Graph("f64")
    x, w, s = g.input("x", (2, 8, 9, 9), DType.F64), g.input("w", (16, 8, 3, 3), DType.F64), g.input("s", (16, 1, 1), DType.F64)
    g.output((nn.conv(x, w, None, 1, 1) * s).relu(), "y")
    feeds = {"x": rng.standard_normal((2, 8, 9, 9)), "w": rng.standard_normal((16, 8, 3, 3)), "s": rng.standard_normal((16, 1, 1))}
    feeds["x"][0, 0, 0, :3] = np.nan, np.inf, -np.inf
    compiled = g.compile(device="cpu")
    assert len(_epilogue_steps(compiled)) == 1
    want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(feeds["x"]), torch.from_numpy(feeds["w"]), padding=1)
                      * torch.from_numpy(feeds["s"])).numpy()
    _close(compiled(feeds)[0], want, 1e-10)


def _not_fused(build):
    rng = np.random.default_rng(9)
    g = lm.Graph("nf")
    x, w = g.input("x", (1, 8, 10, 10)), g.input("w", (16, 8, 3, 3))
    s = g.input("s", (16, 1, 1))
    feeds = {"x": _special(rng, (1, 8, 10, 10)), "w": _special(rng, (16, 8, 3, 3), special=False), "s": _special(rng, (16, 1, 1))}
    build(g, nn.conv(x, w, None, 1, 1), s)
    compiled = g.compile(device="cpu")
    assert not _epilogue_steps(compiled)
    for a, b in zip(compiled(feeds), g.compile(device="numpy")(feeds)):
        _close(a, b, 1e-4)


def test_conv_output_also_a_graph_output_is_not_fused():
    def build(g, y, s):
        g.output(y, "conv")
        g.output((y * s).relu(), "y")
    _not_fused(build)


def test_conv_output_read_by_two_regions_is_not_fused():
    def build(g, y, s):
        g.output((y * s).relu(), "a")
        g.output((y + s).exp(), "b")
    _not_fused(build)


def test_conv_output_read_transposed_is_not_fused():
    def build(g, y, s):
        g.output((y.permute((0, 1, 3, 2)) * s).relu(), "y")
    _not_fused(build)


def test_fused_copy_keeps_its_tile_scratch():
    g, feeds, _ = _case("conv3x3_bn_relu", np.random.default_rng(1))
    compiled = g.compile(device="cpu")
    rt = compiled.runtime
    scratch = {id(n): s for n, s in zip(rt.intermediates, rt._tile_scratch)}
    steps = rt.program.steps
    copies = [s.output for s in steps if s.absorbed and s.output.op is Op.CONTIGUOUS
              and any(v.op is Op.MAT_MUL and _gemm_reads(v)[1] is s.output for v in (x.output for x in steps))]
    assert copies and all(scratch[id(c)] for c in copies)  # the GEMM's (K, N, M): the tiles' size, not 0 bytes
    gemm = next(s.output for s in steps if s.absorbed and s.output.op is Op.MAT_MUL)
    assert scratch[id(gemm)] == ()  # the region's buffer takes the GEMM's output: none of its own
    compiled(feeds)


@pytest.mark.parametrize("kernel", [3, 1])
def test_symbolic_batch(kernel):
    rng = np.random.default_rng(11)
    g = lm.Graph("dyn")
    x, w = g.input("x", ("n", 8, 11, 11)), g.input("w", (16, 8, kernel, kernel))
    s, r = g.input("s", (16, 1, 1)), g.input("r", ("n", 16, 11, 11))
    g.output((nn.conv(x, w, None, 1, kernel // 2) * s + r).clamp(0, 6), "y")
    compiled, reference = g.compile(device="cpu"), g.compile(device="numpy")
    assert len(_epilogue_steps(compiled)) == 1
    for n in (1, 3):
        feeds = {"x": _special(rng, (n, 8, 11, 11)), "w": _special(rng, (16, 8, kernel, kernel), special=False),
                 "s": _special(rng, (16, 1, 1)), "r": _special(rng, (n, 16, 11, 11))}
        _close(compiled(feeds)[0], reference(feeds)[0], 1e-4)


def test_linear_layer_bias_and_activation():
    """A plain GEMM (a linear layer: a batched product with the weight read transposed) fuses too."""
    rng = np.random.default_rng(12)
    g = lm.Graph("linear")
    x, w, b = g.input("x", (2, 5, 16)), g.input("w", (12, 16)), g.input("b", (12,))
    g.output(x.matmul(w.permute((1, 0))).add(b).relu(), "y")
    feeds = {"x": _special(rng, (2, 5, 16)), "w": _special(rng, (12, 16), special=False), "b": _special(rng, (12,))}
    compiled = g.compile(device="cpu")
    assert len(_epilogue_steps(compiled)) == 1
    want = torch.relu(torch.from_numpy(feeds["x"]) @ torch.from_numpy(feeds["w"]).T + torch.from_numpy(feeds["b"])).numpy()
    _close(compiled(feeds)[0], want, 1e-4)
    _close(compiled(feeds)[0], g.compile(device="numpy")(feeds)[0], 1e-4)


@pytest.mark.parametrize("kind", ["conv3x3", "linear"])
def test_an_exact_gelu_with_its_comparisons_fuses_into_the_gemm(monkeypatch, kind):
    """An exact GELU after a conv or a linear layer (erf's sign: comparisons feeding Selects, bool
    levels in the region) is the GEMM's epilogue too (PP-OCRv5/v6's recognizers ran it as a pass
    of its own): the unfused program's values (the weight given at each call, so both take the
    same GEMM) to an ulp or two, not its bits: erf's exp is glibc's vector expf in a vector loop
    and the scalar one elsewhere, and the two loops vectorize different runs of the row; NaN,
    inf and -0.0 in the input; close to torch where torch's value is finite."""
    rng = np.random.default_rng(21)
    g = lm.Graph(kind)
    if kind == "conv3x3":
        xs, ws = (1, 8, 12, 13), (16, 8, 3, 3)
        x, w = g.input("x", xs), g.input("w", ws)
        y = nn.conv(x, w, None, 1, 1)
    else:
        xs, ws = (2, 5, 16), (24, 16)
        x, w = g.input("x", xs), g.input("w", ws)
        y = x.matmul(w.permute((1, 0)))
    feeds = {"x": _special(rng, xs), "w": _special(rng, ws, 0.3, special=False)}
    tx, tw = torch.from_numpy(feeds["x"]), torch.from_numpy(feeds["w"])
    want = torch.nn.functional.gelu(torch.nn.functional.conv2d(tx, tw, None, 1, 1) if kind == "conv3x3" else tx @ tw.T)
    g.output(y.gelu(), "y")
    fused = g.compile(device="cpu")
    (step,) = _epilogue_steps(fused)
    assert any(e.dtype is DType.BOOL for e in step.output.arg.toposort())
    got = fused(feeds)[0]
    np.testing.assert_allclose(got, _unfused(g, monkeypatch)(feeds)[0], rtol=3e-7, atol=1e-7, equal_nan=True)
    # (torch's CPU GELU of +inf is NaN; luminal's, on every device, is +inf, its limit)
    finite = np.isfinite(want.numpy())
    _close(got[finite], want.numpy()[finite], 1e-5)


def _downsample_block(rng):
    """A ResNet downsample block's end: relu(bn(conv3x3/2(x)) + bn(conv1x1/2(x))), one region
    reading two GEMMs; NaN, inf and -0.0 in the input and the BatchNorm vectors."""
    g = lm.Graph("downsample")
    x = g.input("x", (2, 16, 15, 15))
    w3, w1 = (rng.standard_normal(s).astype(np.float32) * 0.2 for s in ((32, 16, 3, 3), (32, 16, 1, 1)))
    s3, b3, s1, b1 = (g.input(k, (32, 1, 1)) for k in ("s3", "b3", "s1", "b1"))
    y3, y1 = nn.conv(x, g.constant(w3), None, 2, 1), nn.conv(x, g.constant(w1), None, 2, 0)
    g.output((y3 * s3 + b3 + (y1 * s1 + b1)).relu(), "y")
    feeds = {"x": _special(rng, (2, 16, 15, 15))} | {k: _special(rng, (32, 1, 1)) for k in ("s3", "b3", "s1", "b1")}
    t = {k: torch.from_numpy(v) for k, v in feeds.items()}
    conv = torch.nn.functional.conv2d
    want = torch.relu(conv(t["x"], torch.from_numpy(w3), None, 2, 1) * t["s3"] + t["b3"]
                      + (conv(t["x"], torch.from_numpy(w1), None, 2, 0) * t["s1"] + t["b1"])).numpy()
    return g, feeds, want


def _planes(runtime) -> int:
    """How many of the library's kernels take the direct path (fill phase planes)."""
    return runtime.source.count("/* X (the padded input) into its phase planes */")


def test_a_region_reading_two_gemms_takes_in_the_conv_with_its_im2col(monkeypatch):
    """The region after a ResNet downsample block's two convolutions takes in the 3x3 one (the
    GEMM with an im2col, the most work per output); the 1x1 shortcut's GEMM keeps its own step
    and is read as an operand. The bits are the unfused program's on every team and from stored
    artifacts; close to torch's and the NumPy runtime's."""
    g, feeds, want = _downsample_block(np.random.default_rng(21))
    fused, plain = g.compile(device="cpu"), _unfused(g, monkeypatch)
    steps = fused.runtime.program.steps
    [step] = _epilogue_steps(fused)
    taken = [s.output for s in steps if s.absorbed and s.output.op is Op.MAT_MUL]
    assert len(taken) == 1 and tuple(taken[0].src[0].shape)[-1] == 16 * 9, taken  # the 3x3 conv's GEMM (K = 144)
    assert sum(1 for s in steps if not s.absorbed and s.output.op is Op.MAT_MUL) == 1  # the shortcut's
    for team in (1, 2, 3):
        monkeypatch.setattr(cpu_runtime, "threads", lambda team=team: team)
        got = fused(feeds)[0]
        np.testing.assert_array_equal(got, plain(feeds)[0])
        assert np.array_equal(np.signbit(got), np.signbit(plain(feeds)[0]))
        _close(got, want, 1e-4)
    _close(fused(feeds)[0], g.compile(device="numpy")(feeds)[0], 1e-4)
    restored = cpu_runtime.CpuRuntime(fused.outputs, artifacts=fused.runtime.artifacts())
    assert restored.restored
    np.testing.assert_array_equal(restored(feeds)[0], fused(feeds)[0])


def test_auto_keeps_a_strided_1x1_conv_on_the_tiles_and_its_artifacts_restore(monkeypatch):
    """By default (auto) a strided 1x1 convolution, whose im2col copy is a subsample of its input,
    stays on the im2col tiles while the 3x3 one takes the direct path; the direct path chosen
    (LUMINAL_CONV=direct, the search's candidate) takes both. Each program's artifacts restore it
    without rendering, and not the other's: the stored record says how it was rendered."""
    if not conv_direct.wanted():
        pytest.skip("the direct path is auto's on x86 with AVX2 and FMA only")
    monkeypatch.delenv("LUMINAL_CONV", raising=False)
    g, feeds, want = _downsample_block(np.random.default_rng(22))
    auto = g.compile(device="cpu").runtime
    chosen = cpu_runtime.CpuRuntime(auto.outputs, choices=Choices(conv="direct"))
    assert (_planes(auto), _planes(chosen)) == (1, 2)
    np.testing.assert_array_equal(auto(feeds)[0], chosen(feeds)[0])  # each output one FMA chain in k order
    _close(auto(feeds)[0], want, 1e-4)
    for rt in (auto, chosen):
        again = cpu_runtime.CpuRuntime(rt.outputs, artifacts=rt.artifacts(), choices=rt.choices)
        assert again.restored and again.artifacts()["conv"] == rt.artifacts()["conv"]
        np.testing.assert_array_equal(again(feeds)[0], rt(feeds)[0])
    crossed = cpu_runtime.CpuRuntime(auto.outputs, artifacts=chosen.artifacts())
    assert not crossed.restored and _planes(crossed) == 1
