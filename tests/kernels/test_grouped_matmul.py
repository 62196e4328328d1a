"""GroupedMatMul, the grouped GEMM of Mixture-of-Experts layers: on every runtime (the NumPy
reference, `cpu`'s BLAS call per group, the CUDA kernel on the emulator) equal to a float64
row-by-row reference, to its primitive decomposition and to transformers' grouped_mm_fallback,
over empty groups, one group holding every row, rows past the last offset, offsets outside
[0, S] and no rows at all (the MoE models: `tests/torch/test_moe.py`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.frontends.torch  # noqa: F401 - registers the "luminal" torch.compile backend
from luminal import devices
from luminal.builder.linalg import grouped_rows
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Op, toposort

DEVICES = ["numpy", "cpu"] + (["cuda-emulator"] if devices.get("cuda-emulator").available else [])
E, K, N = 4, 24, 40
CASES = {  # rows S, offsets
    "empty groups, rows past the end": (9, [3, 3, 6, 8]),
    "one group holds every row": (7, [0, 0, 7, 7]),
    "every group empty": (5, [0, 0, 0, 0]),
    "offsets past S, and negative": (6, [-2, 4, 9, 12]),
    "no rows": (0, [0, 0, 0, 0]),
    "prefill-sized groups": (70, [20, 33, 33, 61]),
}


def _want(x: np.ndarray, w: np.ndarray, offs: np.ndarray) -> np.ndarray:
    """The definition row by row in float64: x[s] @ w[g(s)], g(s) = #{i : offs[i] <= s}."""
    out = np.zeros((x.shape[0], w.shape[2]))
    for s in range(x.shape[0]):
        g = int(np.sum(offs <= s))
        if g < w.shape[0]:
            out[s] = x[s].astype(np.float64) @ w[g].astype(np.float64)
    return out


def _graph(dtype, decomposed: bool = False, weight_input: bool = False, transposed: bool = False):
    g = lm.Graph("grouped")
    x = g.input("x", ("s", K), dtype)
    w = g.input("w", (E, N, K) if transposed else (E, K, N), dtype)
    if transposed:  # a (K, N) view of each (N, K) matrix: the operand is read transposed
        w = w.transpose(-1, -2)
    offs = g.input("offs", (E,), DType.I32)
    g.output(grouped_rows(x, w, offs) if decomposed else x.grouped_matmul(w, offs), "y")
    return g


def _feeds(rows, offs, dtype, transposed=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, K)).astype(dtype.numpy)
    w = (rng.standard_normal((E, K, N)) / 4).astype(dtype.numpy)
    feeds = {"x": x, "w": np.ascontiguousarray(w.transpose(0, 2, 1)) if transposed else w,
             "offs": np.array(offs, np.int32)}
    return feeds, x, w


@pytest.mark.parametrize("transposed", [False, True], ids=["plain", "transposed-weight"])
@pytest.mark.parametrize("dtype", [lm.f32, lm.bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("device", DEVICES)
def test_grouped_matmul_on_every_runtime(device, dtype, transposed):
    cg = _graph(dtype, transposed=transposed).compile(device=device)
    assert cg.report().ops_after.get("GroupedMatMul") == 1
    decomposed = _graph(dtype, decomposed=True, transposed=transposed)
    tol = 1e-5 if dtype is lm.f32 else 2**-7
    for case, (rows, offs) in CASES.items():
        feeds, x, w = _feeds(rows, offs, dtype, transposed)
        (got,) = cg(feeds)
        assert got.dtype == dtype.numpy and got.shape == (rows, N), case
        want = _want(x, w, np.array(offs))
        scale = max(1.0, float(np.abs(want).max(initial=0)))
        assert np.abs(got.astype(np.float64) - want).max(initial=0) <= tol * scale, case
        assert np.all(got[want == 0] == 0) if rows else True, case  # rows of no group are exactly 0
        (prim,) = decomposed.run(feeds)  # the primitive form, unoptimized, on the NumPy runtime
        assert np.abs(got.astype(np.float64) - prim.astype(np.float64)).max(initial=0) <= 2 * tol * scale, case


@pytest.mark.parametrize("dtype", [lm.f32, lm.bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("device", DEVICES)
def test_grouped_matmul_equals_transformers_fallback(device, dtype):
    """The op as the torch frontend emits it for transformers::grouped_mm_fallback (nondecreasing
    offsets: the cumulative counts of the routing)."""
    pytest.importorskip("transformers.integrations.moe")
    fn = torch.compile(lambda x, w, o: torch.ops.transformers.grouped_mm_fallback(x, w, o), backend="luminal",
                       options={"strict": True, "device": device})
    tdt = torch.float32 if dtype is lm.f32 else torch.bfloat16
    for case, (rows, offs) in CASES.items():
        if any(o < 0 for o in offs) or rows == 0:
            continue  # the fallback slices by the offsets as given; S = 0 has no rows to compare
        offs = [min(o, rows) for o in offs]
        g = torch.Generator().manual_seed(rows)
        x, w = torch.randn(rows, K, generator=g).to(tdt), (torch.randn(E, K, N, generator=g) / 4).to(tdt)
        o = torch.tensor(offs, dtype=torch.int32)
        torch._dynamo.reset()
        got, want = fn(x, w, o), torch.ops.transformers.grouped_mm_fallback(x, w, o)
        assert got.dtype == want.dtype, case
        tol = 1e-5 if dtype is lm.f32 else 2**-6
        scale = max(1.0, want.float().abs().max().item())
        assert (got.float() - want.float()).abs().max().item() <= tol * scale, case



@pytest.mark.parametrize("device", DEVICES)
def test_integer_grouped_matmul_wraps_as_torch(device):
    """Integers (the shared generator on every target, no BLAS): exact, wrapping on overflow."""
    g = lm.Graph("grouped-int")
    x, w, offs = g.input("x", ("s", K), DType.I32), g.input("w", (E, K, N), DType.I32), g.input("offs", (E,), DType.I64)
    g.output(x.grouped_matmul(w, offs), "y")
    cg = g.compile(device=device)
    rng = np.random.default_rng(3)
    xv = rng.integers(-2**20, 2**20, (9, K), dtype=np.int32)
    wv = rng.integers(-2**12, 2**12, (E, K, N), dtype=np.int32)
    o = np.array([3, 3, 6, 8])
    (got,) = cg({"x": xv, "w": wv, "offs": o})
    want = torch.ops.transformers.grouped_mm_fallback(torch.from_numpy(xv), torch.from_numpy(wv), torch.from_numpy(o)) \
        if _has_fallback() else None
    ref = np.zeros((9, N), np.int64)
    for s in range(8):
        ref[s] = xv[s].astype(np.int64) @ wv[int(np.sum(o <= s))].astype(np.int64)
    assert np.array_equal(got, ref.astype(np.int32))  # two's complement wrap, as torch's int32 mm
    if want is not None:
        assert np.array_equal(got[:8], want.numpy()[:8])


def _has_fallback() -> bool:
    try:
        import transformers.integrations.moe  # noqa: F401
    except ImportError:
        return False
    return True


def test_cuda_kernels_compile_with_nvrtc():
    """The CUDA dialect's GroupedMatMul (every dtype, static and symbolic rows, a transposed
    weight view) compiles with NVRTC for the GPUs luminal targets, without spills."""
    from luminal.kernels.nvrtc import compile_cuda, nvrtc_available
    from luminal.kernels.plan import KernelPlan

    if not nvrtc_available():
        pytest.skip("NVRTC cannot be loaded")
    g = lm.Graph("grouped-nvrtc")
    offs = g.input("offs", (E,), DType.I32)
    for dt in (lm.f32, lm.bf16, DType.F64, DType.I32):
        for rows in (16, "s"):
            x, w = g.input(f"x{dt.short}{rows}", (rows, K), dt), g.input(f"w{dt.short}{rows}", (E, N, K), dt)
            g.output(x.grouped_matmul(w.transpose(-1, -2), offs))
    plan = KernelPlan.build(g.output_nodes)
    names = {v.name for k in plan.launches for v in (k, *k.variants)}
    assert sum(n.startswith("groupedmatmul_") for n in names) >= 8
    for arch in ("sm_80", "sm_90"):
        binary = compile_cuda(plan.source, arch)
        assert names <= set(binary.kernels)
        spills = {k: r for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads or r.stack}
        assert not spills, spills


def test_grouped_matmul_survives_save_and_load(tmp_path):
    """A .lum file keeps the op (and `luminal.load` checks it as an untrusted node: `verify.py`)."""
    from luminal.loading import load

    cg = _graph(lm.f32).compile(device="numpy")
    cg.save(tmp_path / "m.lum")
    feeds, _, _ = _feeds(9, [3, 3, 6, 8], lm.f32)
    loaded = load(tmp_path / "m.lum", device="cpu")
    assert [n.op for n in toposort(loaded.outputs)].count(Op.GROUPED_MAT_MUL) == 1
    np.testing.assert_allclose(loaded(feeds)[0], cg(feeds)[0], rtol=1e-5, atol=1e-5)


def test_malformed_grouped_matmul_nodes_are_named_errors():
    from luminal.errors import DTypeError, ShapeError
    from luminal.hlir.ops import Node
    from luminal.hlir.verify import check_node

    x, w = Node(Op.INPUT, lm.f32, (5, K), (), "x"), Node(Op.INPUT, lm.f32, (E, K, N), (), "w")
    offs = Node(Op.INPUT, DType.I32, (E,), (), "offs")
    check_node(Node(Op.GROUPED_MAT_MUL, lm.f32, (5, N), (x, w, offs)))
    with pytest.raises(ShapeError, match="GroupedMatMul needs x"):
        check_node(Node(Op.GROUPED_MAT_MUL, lm.f32, (5, K), (x, w, offs)))
    with pytest.raises(ShapeError, match="GroupedMatMul needs x"):
        check_node(Node(Op.GROUPED_MAT_MUL, lm.f32, (5, N), (x, w)))
    with pytest.raises(DTypeError, match="integer offsets"):
        check_node(Node(Op.GROUPED_MAT_MUL, lm.f32, (5, N), (x, w, Node(Op.INPUT, lm.f32, (E,), (), "o"))))
    g = lm.Graph()
    with pytest.raises(ShapeError, match="do not agree"):
        g.input("x", (5, K)).grouped_matmul(g.input("w", (E + 1, K, N)), g.input("o", (E,), DType.I32))
