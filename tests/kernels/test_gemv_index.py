"""Decode-sized MatMuls (the GEMV kernel: 128-bit loads, split-K across warps) and the per-binding
choice between 32- and 64-bit index math, on the CPU emulator against the NumPy runtime and
float64 NumPy; and NVRTC compiles every such kernel for sm_80 and sm_90 without spills."""

import numpy as np
import pytest

import luminal as lm
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker
from luminal.hlir.symbolic import symbol
from luminal.kernels.plan import KernelPlan
from luminal.kernels.render import cstyle
from luminal.kernels.runtime import KernelRuntime
from luminal.runtime.numpy_runtime import NumpyRuntime

DTYPES = [DType.F32, DType.F16, DType.BF16, DType.F64]


def _matmul(m, k, dtype, k_contiguous: bool, tag: str) -> Node:
    """x[m, k] @ B[k, N] with B = W.T (W[N, k] row-major: k-contiguous, a Linear; N = 45) or
    B[k, N] (N = 48: 16 bytes of a row per lane)."""
    N = 45 if k_contiguous else 48
    x = Node(Op.INPUT, dtype, (m, k), (), f"x{tag}")
    if k_contiguous:
        w = Node(Op.INPUT, dtype, (N, k), (), f"w{tag}")
        b = Node(Op.VIEW, dtype, (k, N), (w,), ShapeTracker((k, N), (1, k)))
    else:
        b = Node(Op.INPUT, dtype, (k, N), (), f"w{tag}")
    return Node(Op.MAT_MUL, dtype, (m, N), (x, b))


def _check(outputs, feeds, got):
    """Each MatMul against float64 NumPy: the f32 accumulation bound, plus the output rounding."""
    for node, out in zip(outputs, got):
        x = feeds[node.src[0].arg].astype(np.float64)
        b_node = node.src[1]
        w = feeds[(b_node.src[0] if b_node.op is Op.VIEW else b_node).arg].astype(np.float64)
        b = w.T if b_node.op is Op.VIEW else w
        want, bound = x @ b, np.abs(x) @ np.abs(b)
        eps_acc = np.finfo(np.float64 if node.dtype is DType.F64 else np.float32).eps
        eps_out = 2.0**-7 if node.dtype is DType.BF16 else float(np.finfo(node.dtype.numpy).eps)
        err = np.abs(out.astype(np.float64) - want)
        assert np.all(err <= x.shape[1] * eps_acc * bound + eps_out * np.abs(want)), (node.dtype, float(err.max()))


def _feeds(runtime, bindings, rng):
    out = {}
    for n in runtime.inputs:
        shape = tuple(bindings.get(str(d), d) if not isinstance(d, int) else d for d in n.shape)
        out[n.arg] = rng.standard_normal(shape).astype(n.dtype.numpy)
    return out


@pytest.fixture(scope="module")
def gemv_static():
    """Static M in {1, 5}, K 136 (rows 16-byte aligned: the vector path) and 101 (not); K 1040
    (rows longer than WARP_K_BYTES: a block per column, not a warp)."""
    outputs = [_matmul(m, k, dt, kc, f"{dt.short}_{m}_{k}_{int(kc)}")
               for dt in DTYPES for m in (1, 5) for k in (136, 101) for kc in (True, False)]
    outputs += [_matmul(m, 1040 + odd, dt, True, f"{dt.short}_{m}_big{odd}")
                for dt in (DType.F32, DType.BF16) for m in (1, 5) for odd in (0, 3)]
    return outputs, KernelRuntime(outputs, lm.devices.get("cuda-emulator"))


def test_static_decode_matmuls_are_gemv_kernels(gemv_static):
    outputs, rt = gemv_static
    assert all(" part[8][" in k.source and not k.variants for k in rt.plan.launches)  # GEMV only
    assert all("*(uint4*)" in k.source for k in rt.plan.launches)  # both forms load 16 bytes
    feeds = _feeds(rt, {}, np.random.default_rng(0))
    _check(outputs, feeds, rt(feeds))


def test_gemv_matches_numpy_runtime_with_edge_values(gemv_static):
    outputs, rt = gemv_static
    rng = np.random.default_rng(1)
    feeds = _feeds(rt, {}, rng)
    for arr in feeds.values():  # NaN, ±inf and -0.0 in the activations and the weights
        flat = arr.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = [np.nan, np.inf, -0.0]
    got = rt(feeds)
    want = NumpyRuntime(outputs)(feeds)
    for node, out, ref in zip(outputs, got, want):
        assert np.array_equal(np.isnan(out.astype(np.float64)), np.isnan(ref.astype(np.float64)))
        finite = np.isfinite(ref.astype(np.float64))
        np.testing.assert_array_equal(np.isinf(out.astype(np.float64)), np.isinf(ref.astype(np.float64)))
        rtol = {DType.F32: 1e-4, DType.F64: 1e-10, DType.F16: 1e-2, DType.BF16: 5e-2}[node.dtype]
        np.testing.assert_allclose(out.astype(np.float64)[finite], ref.astype(np.float64)[finite], rtol=rtol, atol=rtol)


def test_symbolic_m_picks_gemv_up_to_8_rows_and_tiles_above():
    outputs = [_matmul(symbol("m"), 128, DType.F32, kc, str(int(kc)))
               for kc in (True, False)]
    rt = KernelRuntime(outputs, lm.devices.get("cuda-emulator"))
    rng = np.random.default_rng(2)
    for m in (1, 5, 8, 9, 40):
        feeds = _feeds(rt, {"m": m}, rng)
        _check(outputs, feeds, rt(feeds))
        seq = rt.sequence({"m": m})
        names = {ln.name for ln in seq.launches}
        gemv = {k.variants[0].name for k in rt.plan.launches}
        assert (names == gemv) == (m <= 8), m


def test_gemv_on_unaligned_rows_of_b():
    """B a slice W[:, 1:49] of W[k, 50] (or W[1:, :] of W[k + 1, 48]): 16-byte rows where the
    offset allows, element loads where it does not; and x @ W.T with an odd K."""
    outputs = []
    for dt in (DType.F32, DType.BF16):
        for off, width in ((1, 50), (48, 48)):
            w = Node(Op.INPUT, dt, (131, width), (), f"w{dt.short}{off}")
            b = Node(Op.VIEW, dt, (130, 48), (w,), ShapeTracker((130, 48), (width, 1), off))
            x = Node(Op.INPUT, dt, (3, 130), (), f"x{dt.short}{off}")
            outputs.append(Node(Op.MAT_MUL, dt, (3, 48), (x, b)))
    rt = KernelRuntime(outputs, lm.devices.get("cuda-emulator"))
    feeds = _feeds(rt, {}, np.random.default_rng(7))
    for node, out, ref in zip(outputs, rt(feeds), NumpyRuntime(outputs)(feeds)):
        tol = 1e-5 if node.dtype is DType.F32 else 2e-2
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)


# --- 32- or 64-bit index math -------------------------------------------------------------------
def _index_graph():
    g = lm.Graph()
    x, y = g.input("x", ("n", 64)), g.input("y", (1, 64))
    g.output((x * y + 1).exp())  # a fused region over a broadcast
    g.output(x.sum(-1))
    g.output(x.max(0))
    g.output(x[1:, ::2] - 2)  # an offset, strided view
    g.output(x.permute(1, 0).contiguous())
    return g


@pytest.fixture(scope="module")
def index_graph():
    g = _index_graph()
    return g, g.compile(device="cuda-emulator")


def _launch_widths(cg, bindings) -> list[str]:
    """"i32"/"i64" for each launch of the binding that has both builds."""
    specs = [k for k in cg.runtime.plan.launches if k.chooser is not None and "matmul" not in k.name]
    wide, narrow = {k.name for k in specs}, {k.variants[0].name for k in specs}
    seq = cg.runtime.sequence(bindings)
    return ["i32" if ln.name in narrow else "i64" for ln in seq.launches if ln.name in wide | narrow]


def test_both_index_widths_equal_the_numpy_runtime(index_graph, monkeypatch):
    g, cg = index_graph
    assert any(k.variants for k in cg.runtime.plan.launches)
    x = np.random.default_rng(3).standard_normal((70, 64)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    y = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    want = g.run(x=x, y=y)
    got32 = cg(x=x, y=y)
    assert set(_launch_widths(cg, {"n": 70})) == {"i32"}
    monkeypatch.setattr(cstyle, "INDEX32_LIMIT", 64)  # every size of this call is past it
    cg64 = g.compile(device="cuda-emulator")  # a fresh runtime: bindings are resolved anew
    got64 = cg64(x=x, y=y)
    assert set(_launch_widths(cg64, {"n": 70})) == {"i64"}
    for a, b, w in zip(got32, got64, want):
        np.testing.assert_array_equal(a, b)  # the same arithmetic, only the index type differs
        np.testing.assert_array_equal(np.isnan(a), np.isnan(w))
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5)
        assert np.array_equal(np.signbit(a[a == 0]), np.signbit(w[a == 0]))


def test_the_choice_crosses_the_threshold_per_binding(index_graph, monkeypatch):
    g, _ = index_graph
    monkeypatch.setattr(cstyle, "INDEX32_LIMIT", 64 * 64)  # the test hook: 4096 elements, not 2**31
    cg = g.compile(device="cuda-emulator")
    rng = np.random.default_rng(5)
    y = rng.standard_normal((1, 64)).astype(np.float32)
    for n, width in ((63, "i32"), (64, "i64"), (65, "i64"), (3, "i32")):
        x = rng.standard_normal((n, 64)).astype(np.float32)
        for a, w in zip(cg(x=x, y=y), g.run(x=x, y=y)):
            np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5)
        assert set(_launch_widths(cg, {"n": n})) == {width}, n


def test_the_real_threshold_is_2_to_the_31_elements():
    """The choice at the real limit, from sizes alone (nothing of 2**31 elements is allocated)."""
    g = _index_graph()
    plan = KernelPlan.build(g.output_nodes)
    ew = next(k for k in plan.launches if k.chooser is not None and k.output.shape == (g.output_nodes[0].shape))
    assert ew.chooser({"n": 2**25 - 1}) == 1  # (2**25 - 1) * 64 < 2**31 elements: 32-bit
    assert ew.chooser({"n": 2**25}) == 0  # 2**31 elements: 64-bit
    assert "long long idx" in ew.source and "int idx" in ew.variants[0].source
    assert "LL" not in ew.variants[0].source.split("{", 1)[1]  # no 64-bit literal in the 32-bit body


def test_static_sizes_build_one_width():
    g = lm.Graph()
    x = g.input("x", (8, 64))
    g.output(x.exp().sum(-1))
    plan = KernelPlan.build(g.output_nodes)
    assert all(not k.variants for k in plan.launches)
    assert all("long long idx" not in k.source and "long long row" not in k.source for k in plan.launches)


# --- 16-byte loads and stores ---------------------------------------------------------------------
def test_vectorized_kernels_with_aligned_and_unaligned_rows():
    g = lm.Graph()
    x, h = g.input("x", ("n", 68)), g.input("h", (5, 64), lm.f16)
    y = g.input("y", (1, 64))
    g.output((x[:, :64] * y + 1).exp())  # 4 floats per thread, 16-byte loads where rows are aligned
    g.output(x[:, 1:65] * 3)  # every row 4 bytes past alignment: element loads, 16-byte stores
    g.output(h * 2 + 1)  # 8 halves per thread
    g.output(x.permute(1, 0).contiguous())  # element loads (stride 68), 16-byte stores
    g.output(x.sum(-1))  # 16-byte loads along the reduced axis (rows of 272 bytes: aligned)
    g.output(h.max(-1))
    g.output(x[:, 3:].max(-1))  # rows not aligned: element loads
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"))
    # every kernel but the transposition's (chains are one kernel each: producers inline, `render/inline.py`)
    assert [k.output.op.name for k in rt.plan.launches if "*(uint4*)" not in k.source] == ["CONTIGUOUS"]
    assert len(rt.plan.launches) == 7
    rng = np.random.default_rng(6)
    for n in (3, 70):
        feeds = {"x": rng.standard_normal((n, 68)).astype(np.float32), "h": rng.standard_normal((5, 64)).astype(np.float16),
                 "y": rng.standard_normal((1, 64)).astype(np.float32)}
        feeds["x"][0, :4] = [np.nan, np.inf, -np.inf, -0.0]
        feeds["x"][1, 1:5] = [-0.0, np.nan, np.inf, -np.inf]
        for a, w in zip(rt(feeds), g.run(feeds)):
            a, w = a.astype(np.float64), w.astype(np.float64)
            np.testing.assert_array_equal(np.isnan(a), np.isnan(w))
            np.testing.assert_allclose(a, w, rtol=1e-3, atol=1e-5)
            assert np.array_equal(np.signbit(a[a == 0]), np.signbit(w[a == 0]))
