"""Fused attention in f16/bf16 and with a condition as its mask (`where(causal, s, -inf)`):
the pass fuses torch's half-precision lowerings (SDPA, HF eager with an f32 softmax) and the
builder's (softmax between casts, `where` masks); the NumPy runtime's fused op equals the
unfused graph bit for bit, the kernels (cpu, the CUDA emulator, both CUDA kernels) stay within
two half ulps of it and no less precise against float64, and edge values follow the unfused
graph."""

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.egraph import attention
from luminal.hlir.ops import Node, Op, toposort

DEVICES = ["numpy", "cpu", "cuda-emulator"]
NP = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
LM = {"f32": lm.f32, "bf16": lm.bf16, "f16": lm.f16}


@pytest.fixture(autouse=True)
def fuse_short(monkeypatch):
    monkeypatch.setattr(attention, "MIN_KEYS", 0)
    monkeypatch.setattr(attention, "MIN_QUERIES", 0)


def _graph(dtype, mode, h=2, m=70, n=70, d=16, dv=16, scale=0.25):
    """The builder's attention, as benchmarks/gpu_models builds the 1B model: q @ kᵀ * scale,
    a causal `where` (or none), softmax (f32 between casts for a half dtype), @ v."""
    g = lm.Graph("att")
    q, k, v = (g.input(name, (1, h, rows, cols), LM[dtype]) for name, rows, cols in (("q", m, d), ("k", n, d), ("v", n, dv)))
    s = q.matmul(k.transpose(-1, -2)) * scale
    if mode == "where":
        s = lm.where(g.ones((m, n), lm.bool_).tril(n - m), s, float("-inf"))
    elif mode == "where_negated":  # the fill first: where(~causal, -inf, s)
        s = lm.where(g.ones((m, n), lm.bool_).tril(n - m).logical_not(), float("-inf"), s)
    g.output(s.softmax(-1).matmul(v), "out")
    return g


def _feeds(dtype, h=2, m=70, n=70, d=16, dv=16, seed=0):
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal((1, h, rows, cols)) * 2).astype(NP[dtype])
            for name, rows, cols in (("q", m, d), ("k", n, d), ("v", n, dv))}


def _run(g, feeds, device, fused, monkeypatch):
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
    compiled = g.compile(device=device)
    count = compiled.report().ops_after.get(Op.ATTENTION.title, 0)
    return np.asarray(compiled(feeds)[0]).astype(np.float64), count, compiled


def _truth(feeds, mode, scale=0.25):
    q, k, v = (feeds[x].astype(np.float64) for x in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if mode != "plain":
        m, n = s.shape[-2:]
        s = np.where(np.tril(np.ones((m, n), bool), n - m), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def _eager(feeds, mode, scale=0.25):
    """The same attention in PyTorch eager, in the feeds' dtype (f32)."""
    q, k, v = (torch.from_numpy(feeds[x]) for x in "qkv")
    s = q @ k.transpose(-1, -2) * scale
    if mode != "plain":
        m, n = s.shape[-2:]
        s = s.masked_fill(~torch.ones(m, n, dtype=torch.bool).tril(n - m), float("-inf"))
    return (torch.softmax(s, -1) @ v).double().numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["where", "where_negated", "plain"])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_builder_attention_fuses_and_matches(dtype, mode, device, monkeypatch):
    g, feeds = _graph(dtype, mode), _feeds(dtype)
    got, count, compiled = _run(g, feeds, device, True, monkeypatch)
    assert count == 1
    assert not [x for x in toposort(compiled.outputs) if x.op not in (Op.INPUT, Op.VIEW) and len(x.shape) >= 2
                and tuple(x.shape[-2:]) == (70, 70)]  # no scores, probabilities or mask of their size
    want, _, _ = _run(_graph(dtype, mode), feeds, "numpy", False, monkeypatch)
    if device == "numpy":  # the executable specification: the unfused steps, each rounded as its op
        np.testing.assert_array_equal(got, want)
        return
    ulp = {"bf16": 2.0**-8, "f16": 2.0**-11, "f32": 2.0**-18}[dtype]  # (f32: the online softmax sums in another order)
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * ulp * np.abs(want).max() + 1e-6)
    truth = _truth(feeds, mode)
    if dtype != "f32":  # p kept in f32 is no worse than the reference's p rounded to the half type
        assert np.abs(got - truth).mean() <= 1.05 * np.abs(want - truth).mean()
    else:  # f32: at most eager's error (the NumPy reference sums in float64, so it is not the bar)
        assert np.abs(got - truth).mean() <= 1.5 * np.abs(_eager(feeds, mode) - truth).mean()


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
def test_half_heads_past_the_tiled_kernel(device, monkeypatch):
    """Heads of 80 columns: the CUDA kernel for larger heads, which for f16/bf16 keeps its
    accumulators in registers, 64 columns of v per pass over the keys."""
    shape = dict(d=80, dv=80, m=40, n=90)
    g, feeds = _graph("bf16", "where", **shape), _feeds("bf16", **shape)
    got, count, _ = _run(g, feeds, device, True, monkeypatch)
    want, _, _ = _run(_graph("bf16", "where", **shape), feeds, "numpy", False, monkeypatch)
    assert count == 1
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * 2.0**-8 * np.abs(want).max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_where_mask_edge_values(dtype, device, monkeypatch):
    """A NaN key masked out by the `where` is no NaN (the Select hides it, an added mask would
    not); unmasked it makes its rows NaN; +inf in a score makes its row NaN; a query row whose
    keys are all masked (n < m: the first rows of a shifted causal mask) is NaN under a plain
    softmax, as the unfused graph gives."""
    shape = dict(m=40, n=30)
    feeds = _feeds(dtype, **shape)
    feeds["k"][0, 0, 20, 3] = np.nan  # key 20: masked for query rows 0..29, live for rows 30..39
    feeds["q"][0, 1, 35, :] = np.inf
    got, count, _ = _run(_graph(dtype, "where", **shape), feeds, device, True, monkeypatch)
    want, _, _ = _run(_graph(dtype, "where", **shape), feeds, "numpy", False, monkeypatch)
    assert count == 1
    assert np.isnan(want[0, 0, :10]).all() and not np.isnan(want[0, 0, 10:30]).any() and np.isnan(want[0, 0, 30:]).all()
    assert np.isnan(want[0, 1, 35]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    atol = 4 * (2.0**-8 if dtype == "bf16" else 2.0**-18) * np.abs(want[ok]).max() + 1e-6
    np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=0 if device == "numpy" else atol)


class Sdpa(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **self.kw)


class HfEager(torch.nn.Module):
    """HF eager attention in half precision: the scale as torch lowers a half tensor times a
    Python float (an f32 product, rounded), an added mask, softmax(dtype=float32), the cast back."""

    def forward(self, q, k, v, mask):
        s = torch.matmul(q, k.transpose(-1, -2)) * 0.3
        return torch.matmul(torch.softmax(s + mask, dim=-1, dtype=torch.float32).to(q.dtype), v)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("case", ["sdpa", "causal", "hf_eager"])
def test_torch_half_attention_fuses(case, dtype, device, monkeypatch):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 40, 16, generator=g).to(dtype) for _ in range(3))
    model, args = {"sdpa": (Sdpa(), (q, k, v)), "causal": (Sdpa(is_causal=True), (q, k, v)),
                   "hf_eager": (HfEager(), (q, k, v, torch.randn(2, 1, 40, 40, generator=g).to(dtype)))}[case]
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1")
    cm = lm.compile(model, args, device=device)
    assert cm.compiled.report().ops_after.get(Op.ATTENTION.title, 0) == 1
    got = cm(*args).double()
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "0")
    want = lm.compile(model, args, device="numpy")(*args).double()
    if device == "numpy":
        assert torch.equal(got, want)
    else:
        ulp = 2.0**-8 if dtype is torch.bfloat16 else 2.0**-11
        torch.testing.assert_close(got, want, rtol=0, atol=4 * ulp * want.abs().max().item())
    torch.testing.assert_close(got, model(*args).double(), rtol=0, atol=8 * (2.0**-8 if dtype is torch.bfloat16 else 2.0**-11)
                               * want.abs().max().item())


def test_half_cuda_kernels_compile_with_nvrtc():
    """bf16 and f16 Attention: the tiled kernel (heads of 64) and the one for larger heads,
    with a select mask: NVRTC compiles them for sm_80 and sm_90 without spills."""
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    from luminal.kernels.plan import KernelPlan

    outputs = []
    for dtype, d in ((lm.bf16, 64), (lm.f16, 64), (lm.bf16, 128)):
        q, kt, v = (Node(Op.INPUT, dtype, s, (), f"{k}{len(outputs)}") for k, s in
                    (("q", (8, 512, d)), ("kt", (8, d, 512)), ("v", (8, 512, d))))
        mask = Node(Op.INPUT, lm.bool_, (8, 512, 512), (), f"mask{len(outputs)}")
        outputs.append(Node(Op.ATTENTION, dtype, (8, 512, d), (q, kt, v, mask),
                            (0.125, False, None, (float("-inf"), True), dtype)))
    source = KernelPlan.build(outputs).source
    assert source.count("__shared__") == 4  # two tiled kernels stage kᵀ and v
    for arch in ("sm_80", "sm_90"):
        binary = nvrtc.compile_cuda(source, arch)
        assert sum(k.startswith(Op.ATTENTION.title.lower()) for k in binary.kernels) == 3
        assert not [k for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_grouped_query_heads_folded_into_rows(dtype, device, monkeypatch):
    """GQA without copies of k and v, as benchmarks/gpu_models builds its Llama: the query heads
    of a KV head are the rows of one MatMul (..., G*M, N), the scores reshaped to (..., G, M, N)
    for the causal `where` and the softmax and back: fused, kᵀ and v broadcast over the group."""
    kvh, grp, m, d = 2, 3, 50, 16

    def build():
        g = lm.Graph("gqa")
        q = g.input("q", (1, kvh, grp * m, d), LM[dtype])
        k, v = (g.input(x, (1, kvh, m, d), LM[dtype]) for x in "kv")
        s = (q.matmul(k.transpose(-1, -2)) * 0.25).reshape(1, kvh, grp, m, m)
        p = lm.where(g.ones((m, m), lm.bool_).tril(), s, float("-inf")).softmax(-1).reshape(1, kvh, grp * m, m)
        g.output(p.matmul(v), "out")
        return g

    rng = np.random.default_rng(5)
    feeds = {"q": rng.standard_normal((1, kvh, grp * m, d)).astype(NP[dtype]),
             "k": rng.standard_normal((1, kvh, m, d)).astype(NP[dtype]), "v": rng.standard_normal((1, kvh, m, d)).astype(NP[dtype])}
    got, count, _ = _run(build(), feeds, device, True, monkeypatch)
    want, _, _ = _run(build(), feeds, "numpy", False, monkeypatch)
    assert count == 1
    if device == "numpy":
        np.testing.assert_array_equal(got, want)
    else:
        ulp = 2.0**-8 if dtype == "bf16" else 2.0**-18
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * ulp * np.abs(want).max())
    # against float64: each query head j of a group reads its KV head
    q = feeds["q"].astype(np.float64).reshape(1, kvh, grp, m, d)
    k, v = (feeds[x].astype(np.float64)[:, :, None] for x in "kv")
    s = np.where(np.tril(np.ones((m, m), bool)), q @ k.transpose(0, 1, 2, 4, 3) * 0.25, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    truth = ((e / e.sum(-1, keepdims=True)) @ v).reshape(got.shape)
    assert np.abs(got - truth).max() < (0.1 if dtype == "bf16" else 1e-5)


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
@pytest.mark.parametrize("b,m,n,d,dv", [(1, 1, 1, 4, 3), (0, 5, 7, 4, 3), (2, 3, 0, 4, 3), (2, 4, 5, 0, 3)],
                         ids=["one_key", "empty_batch", "no_keys", "empty_head"])
def test_direct_bf16_select_op_at_the_edges(b, m, n, d, dv, device):
    """The long-form op itself (bf16, a bool mask kept where true, safe softmax): one key, an
    empty batch, no keys (0, not NaN, under the safe softmax), an empty head, as NumPy gives."""
    from luminal.kernels.runtime import KernelRuntime

    g = lm.Graph("attention")
    shapes = [(b, m, d), (b, d, n), (b, n, dv), (b, m, n)]
    ts = [g.input(k, s, lm.bf16) for k, s in zip(["q", "kt", "v"], shapes[:3])] + [g.input("mask", shapes[3], lm.bool_)]
    g.output(lm.Tensor(g, Node(Op.ATTENTION, lm.bf16, (b, m, dv), tuple(t.node for t in ts),
                               (0.5, True, None, (float("-inf"), True), lm.bf16))))
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(s).astype(ml_dtypes.bfloat16) for k, s in zip(["q", "kt", "v"], shapes[:3])}
    feeds["mask"] = rng.random(shapes[3]) > 0.5
    want = g.run(feeds)[0].astype(np.float64)
    got = (KernelRuntime(g.output_nodes, lm.devices.get(device))(feeds)[0] if device == "cuda-emulator" else
           lm.compile_graph(g, device=device, optimize=False)(feeds)[0]).astype(np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * 2.0**-8 * (np.abs(want).max(initial=0) + 1), equal_nan=True)
