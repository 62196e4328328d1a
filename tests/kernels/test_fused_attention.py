"""The fused Attention op (`luminal/egraph/attention.py`, `kernels/render/attention.py`): the
pass recognizes torch's scaled_dot_product_attention lowering (no mask, causal, float and bool
masks, GQA) and HF eager-style attention (a scale after the first MatMul, no safe softmax); the
fused result equals the unfused graph and torch on numpy, cpu and the CUDA emulator, edge
values included (NaN, ±inf, rows masked out entirely, one key, no keys, an empty batch)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.egraph import attention, reference
from luminal.hlir.ops import Expr, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker
from luminal.kernels.render import attention_gemm
from luminal.kernels.runtime import KernelRuntime

DEVICES = ["numpy", "cpu", "cpu-loops", "cuda-emulator"]


def _device(device: str, monkeypatch) -> str:
    """"cpu-loops": the cpu device with its f32 kernel's register tiles in place of the SGEMM path
    (`attention_gemm.py`), which "cpu" runs wherever the BLAS is bound; both compiled afresh."""
    if device == "cpu-loops":
        monkeypatch.setattr(attention_gemm, "gemm_body", lambda *a: None)
        monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")
        return "cpu"
    return device


@pytest.fixture(autouse=True)
def fuse_short(monkeypatch):
    monkeypatch.setattr(attention, "MIN_KEYS", 0)  # the shapes here are short: fuse them anyway
    monkeypatch.setattr(attention, "MIN_QUERIES", 0)


class Sdpa(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kw)


class Eager(torch.nn.Module):
    """HF eager attention: matmul, scale, additive mask, softmax, matmul (no safe softmax)."""

    def forward(self, q, k, v, mask):
        s = torch.matmul(q, k.transpose(-1, -2)) * 0.125
        return torch.matmul(torch.softmax(s + mask, dim=-1), v)


class EagerVt(torch.nn.Module):
    """v given transposed: the kernels read it through a column-major view."""

    def forward(self, q, k, vt):
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.25, dim=-1), vt.transpose(-1, -2))


class SoftCap(torch.nn.Module):
    """Gemma 2's eager attention: scaled scores soft-capped, cap * tanh(s / cap), then the mask."""

    def forward(self, q, k, v, mask):
        s = torch.matmul(q, k.transpose(-1, -2)) * 0.25
        s = torch.tanh(s / 5.0) * 5.0
        return torch.matmul(torch.softmax(s + mask, dim=-1), v)


class Projected(torch.nn.Module):
    """Causal self-attention as models write it: q, k and v from linear layers (one fused QKV
    layer where `fused`, k then a part of its output), split into heads, HF's repeat_kv where
    there are fewer KV heads, torch's SDPA (whose lowering scales q and k by sqrt(scale) each)."""

    def __init__(self, fused: bool, heads: int = 4, kv_heads: int = 4, d: int = 16):
        super().__init__()
        self.fused, self.h, self.hk, self.d = fused, heads, kv_heads, d
        if fused:
            self.qkv = torch.nn.Linear(heads * d, (heads + 2 * kv_heads) * d)
        else:
            self.q, self.k, self.v = (torch.nn.Linear(heads * d, n * d) for n in (heads, kv_heads, kv_heads))

    def forward(self, x):
        b, n, _ = x.shape
        if self.fused:
            q, k, v = self.qkv(x).split([self.h * self.d, self.hk * self.d, self.hk * self.d], -1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = (t.view(b, n, -1, self.d).transpose(1, 2) for t in (q, k, v))
        group = self.h // self.hk
        if group > 1:  # HF's repeat_kv: expand, then a reshape that copies
            k, v = (t[:, :, None].expand(b, self.hk, group, n, self.d).reshape(b, self.h, n, self.d) for t in (k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, -1)


def _inputs(b=2, h=3, hk=3, m=37, n=150, d=20, dv=24, mask=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(b, h, m, d, generator=g), torch.randn(b, hk, n, d, generator=g), torch.randn(b, hk, n, dv, generator=g)
    if mask == "float":
        return q, k, v, torch.randn(b, 1, m, n, generator=g)
    if mask == "bool":
        return q, k, v, torch.rand(b, 1, m, n, generator=g) > 0.3
    return q, k, v


CASES = {
    "plain": (Sdpa(), dict()),
    "causal": (Sdpa(is_causal=True), dict(n=37)),
    "float_mask": (Sdpa(), dict(mask="float")),
    "bool_mask": (Sdpa(), dict(mask="bool", m=133)),  # two query blocks of the C kernel, the last of 5
    "gqa": (Sdpa(enable_gqa=True), dict(h=4, hk=2)),
    "eager_scaled": (Eager(), dict(mask="float", n=64, dv=16)),
    "v_transposed": (EagerVt(), dict(n=70, dv=40)),
    "soft_cap": (SoftCap(), dict(mask="float", m=133)),
    "soft_cap_decode": (SoftCap(), dict(mask="float", m=1, n=300)),
}


def _compile(model, args, device, fused, monkeypatch):
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1" if fused else "0")
    cm = lm.compile(model, args, device=_device(device, monkeypatch))
    return cm, cm.compiled.report().ops_after.get(Op.ATTENTION.title, 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES))
def test_fused_attention_fires_and_matches(case, device, monkeypatch):
    model, shape = CASES[case]
    args = _inputs(**shape)
    if isinstance(model, EagerVt):
        args = (args[0], args[1], args[2].transpose(-1, -2).contiguous())
    want = model(*args).numpy()
    fused, count = _compile(model, args, device, True, monkeypatch)
    assert count == 1
    m, n = args[0].shape[-2], args[1].shape[-2]
    scores_sized = [x for x in toposort(fused.compiled.outputs) if x.op not in (Op.INPUT, Op.VIEW) and
                    len(x.shape) >= 2 and tuple(x.shape[-2:]) == (m, n)]
    assert not scores_sized  # no scores, probabilities or (causal, padding) mask of their size
    got = fused(*args).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
    if device != "cuda-emulator":  # (the emulator's unfused run costs minutes; numpy and cpu cover it)
        unfused, count = _compile(model, args, device, False, monkeypatch)
        assert count == 0
        np.testing.assert_allclose(got, unfused(*args).numpy(), rtol=1e-5, atol=2e-6)


def test_cpu_at_precision_float64(monkeypatch):
    """precision "float64": the C kernel's double loops (f32 values widened, v staged)."""
    model, shape = CASES["float_mask"]
    args = _inputs(**shape)
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1")
    fused = lm.compile(model, args, device="cpu", precision="float64")
    assert fused.compiled.report().ops_after.get(Op.ATTENTION.title) == 1
    want = lm.compile(model, args, device="numpy", precision="float64")(*args).numpy()
    np.testing.assert_allclose(fused(*args).numpy(), want, rtol=1e-6, atol=1e-7)


def test_short_keys_and_few_queries_are_not_fused(monkeypatch):
    monkeypatch.setattr(attention, "MIN_KEYS", 64)
    _, count = _compile(Sdpa(), _inputs(n=37), "numpy", True, monkeypatch)
    assert count == 0
    monkeypatch.setattr(attention, "MIN_KEYS", 0)
    monkeypatch.setattr(attention, "MIN_QUERIES", 16)
    _, count = _compile(Sdpa(), _inputs(m=1), "numpy", True, monkeypatch)
    assert count == 0


def _edge_inputs():
    q, k, v, mask = _inputs(b=1, h=2, hk=2, m=6, n=70, d=8, dv=16, mask="float")
    mask[0, 0, 1, :] = -torch.inf  # a row masked out entirely
    mask[0, 0, 2, 5] = torch.inf  # +inf score: the row is NaN
    mask[0, 0, 3, 7] = torch.nan
    mask[0, 0, 4, :69] = -torch.inf  # one key left
    q[0, 1, 0, 0] = torch.nan  # a NaN query row
    v[0, 0, 69, 3] = torch.nan  # a NaN value: NaN in column 3 of every row of head 0 (0 * NaN too)
    v[0, 1, 10, 2] = torch.inf
    return q, k, v, mask


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", [Sdpa(), Eager(), SoftCap()], ids=["sdpa_safe_softmax", "eager_softmax", "soft_cap"])
def test_edge_values_as_torch(model, device, monkeypatch):
    args = _edge_inputs()
    want = model(*args).numpy()
    fused, count = _compile(model, args, device, True, monkeypatch)
    assert count == 1
    got = fused(*args).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, equal_nan=True)
    if isinstance(model, Sdpa):  # torch's safe softmax: the masked-out row is 0 (NaN where v is NaN)
        assert np.isnan(got[0, 0, 1, 3]) and not np.isnan(got[0, 0, 1, :3]).any() and (got[0, 0, 1, :3] == 0).all()
    else:
        assert np.isnan(got[0, :, 1]).all()
    if isinstance(model, SoftCap):  # the cap applies before the mask: its +inf still makes a NaN row
        assert np.isnan(got[0, 0, 2]).all()


@pytest.mark.parametrize("device", ["numpy", "cpu", "cpu-loops"])
def test_nan_query_without_mask_follows_the_math_path(device, monkeypatch):
    """Without a mask torch's CPU flash kernel returns 0 for a NaN query row; its math path (the
    decomposition luminal lowers, fused or not) returns NaN, and so does luminal."""
    q, k, v = _inputs(m=20, n=30)
    q[0, 1, 3, 0] = torch.nan
    fused, count = _compile(Sdpa(), (q, k, v), device, True, monkeypatch)
    assert count == 1
    got = fused(q, k, v).numpy()
    want = torch.ops.aten._scaled_dot_product_attention_math(q, k, v)[0].numpy()
    assert np.isnan(got[0, 1, 3]).all() and not np.isnan(np.delete(got.reshape(-1, got.shape[-1]), 1 * 20 + 3, 0)).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, equal_nan=True)


def _direct(shapes, arg):
    """A graph of one Attention node (and the same graph in its reference decomposition)."""
    g = lm.Graph("attention")
    names = ["q", "kt", "v", "mask"][:len(shapes)]
    ts = [g.input(k, s, lm.f32) for k, s in zip(names, shapes)]
    out_shape = (*ts[0].shape[:-1], ts[2].shape[-1])
    node = Node(Op.ATTENTION, lm.f32, out_shape, tuple(t.node for t in ts), arg)
    g.output(lm.Tensor(g, node))
    ref = lm.Graph("decomposed")
    rts = [ref.input(k, s, lm.f32) for k, s in zip(names, shapes)]
    ref.output(reference.attention(rts, arg))
    return g, ref


@pytest.mark.parametrize("device", ["cpu", "cpu-loops", "cuda-emulator"])
@pytest.mark.parametrize("b,m,n,d,dv", [(1, 1, 1, 4, 3), (0, 5, 7, 4, 3), (2, 3, 0, 4, 3), (2, 4, 5, 0, 3)],
                         ids=["one_key", "empty_batch", "no_keys", "empty_head"])
@pytest.mark.parametrize("arg", [(None, True), (0.5, False)], ids=["safe", "scaled"])
def test_direct_op_matches_numpy_and_reference(b, m, n, d, dv, arg, device, monkeypatch):
    device = _device(device, monkeypatch)
    rng = np.random.default_rng(3)
    shapes = [(b, m, d), (b, d, n), (b, n, dv), (b, m, n)]
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in zip(["q", "kt", "v", "mask"], shapes)}
    g, ref = _direct(shapes, arg)
    want = ref.run(feeds)[0]
    np.testing.assert_allclose(g.run(feeds)[0], want, rtol=1e-6, atol=1e-6, equal_nan=True)
    got = KernelRuntime(g.output_nodes, lm.devices.get(device))(feeds)[0] if device == "cuda-emulator" else \
        lm.compile_graph(g, device=device, optimize=False)(feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_cuda_kernels_compile_with_nvrtc():
    """The tiled kernel (f32 heads of 64) and the one for larger heads and f64: no spills."""
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    from luminal.kernels.plan import KernelPlan

    outputs = []
    for dtype, d, n in ((lm.f32, 64, 1600), (lm.f64, 32, 300), (lm.f32, 96, 300)):
        q, kt, v, mask = (Node(Op.INPUT, dtype, s, (), f"{k}{len(outputs)}") for k, s in
                          (("q", (8, 300, d)), ("kt", (8, d, n)), ("v", (8, n, d)), ("mask", (8, 300, n))))
        outputs.append(Node(Op.ATTENTION, dtype, (8, 300, d), (q, kt, v, mask), (0.125, True)))
    # a causal mask as an expression over two iotas (query and key positions), not a buffer
    q, kt, v = (Node(Op.INPUT, lm.f32, sh, (), f"{k}c") for k, sh in (("q", (8, 300, 64)), ("kt", (8, 64, 300)),
                                                                      ("v", (8, 300, 64))))
    i, j = (Node(Op.VIEW, lm.int64, (8, 300, 300), (Node(Op.IOTA, lm.int64, (300,), (), 300),),
                 ShapeTracker((8, 300, 300), strides)) for strides in ((0, 1, 0), (0, 0, 1)))
    later = Expr(Op.LESS_THAN, lm.bool_, (Expr(Op.INPUT, lm.int64, (), 0), Expr(Op.INPUT, lm.int64, (), 1)))
    causal = Expr(Op.SELECT, lm.f32, (later, Expr(Op.CONSTANT, lm.f32, (), float("-inf")), Expr(Op.CONSTANT, lm.f32, (), 0.0)))
    outputs.append(Node(Op.ATTENTION, lm.f32, (8, 300, 64), (q, kt, v, i, j), (None, True, causal)))
    source = KernelPlan.build(outputs).source
    assert source.count("__shared__") == 4  # the tiled kernels stage kᵀ and v in shared memory
    for arch in ("sm_80", "sm_90"):
        binary = nvrtc.compile_cuda(source, arch)
        assert sum(k.startswith(Op.ATTENTION.title.lower()) for k in binary.kernels) == 4  # (and the iota's)
        assert not [k for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads]


def test_onnx_attention_is_fused(tmp_path, monkeypatch):
    """An exported HF-eager-style attention (MatMul, Div by sqrt(d), Add, Softmax, MatMul)."""
    pytest.importorskip("onnx")
    import luminal.onnx

    class Divided(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / 8.0 + mask, dim=-1), v)

    args = _inputs(b=1, h=2, hk=2, m=40, n=50, d=16, dv=16, mask="float")
    path = tmp_path / "attention.onnx"
    torch.onnx.export(Divided(), args, str(path), dynamo=False, opset_version=18)
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1")
    sess = luminal.onnx.compile(str(path), device="cpu")
    assert sess.compiled.report().ops_after.get(Op.ATTENTION.title) == 1
    got = sess(*[a.numpy() for a in args])
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(got, Divided()(*args).numpy(), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("device", ["cpu", "cpu-loops", "cuda-emulator"])
def test_symbolic_lengths(device, monkeypatch):
    """One compiled Attention serves every (M, N): a partial query block, several key blocks (of
    each C kernel's: 128 x 128 for the loops, 256 x 512 for the SGEMM's)."""
    device = _device(device, monkeypatch)
    g, ref = _direct([(2, "m", 8), (2, 8, "n"), (2, "n", 16), (2, "m", "n")], (0.5, True))
    run = KernelRuntime(g.output_nodes, lm.devices.get(device)) if device == "cuda-emulator" else \
        lm.compile_graph(g, device=device, optimize=False)
    rng = np.random.default_rng(5)
    for m, n in [(5, 7), (33, 150)] + ([(300, 1100)] if device == "cpu" else []):
        shapes = [(2, m, 8), (2, 8, n), (2, n, 16), (2, m, n)]
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in zip(["q", "kt", "v", "mask"], shapes)}
        np.testing.assert_allclose(run(feeds)[0], ref.run(feeds)[0], rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_hf_models_fuse_every_layer(family, monkeypatch):
    """HF's sdpa attention: Llama's causal mask with GQA, BERT's padding mask (from
    attention_mask, one row padded out): every layer fused, no float mask of the scores' size."""
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=64, attn_implementation="sdpa")
    ids = torch.randint(0, 128, (2, 20))
    if family == "llama":
        model, args = tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **common)).eval(), (ids,)
        model.config.use_cache = False
    else:
        attention_mask = torch.ones(2, 20, dtype=torch.long)
        attention_mask[1, 15:] = 0
        model, args = tf.BertModel(tf.BertConfig(**common)).eval(), (ids, attention_mask)
    with torch.no_grad():
        want = model(*args)[0].numpy()
        cm, count = _compile(model, args, "cpu", True, monkeypatch)
        got = cm(*args)[0].numpy()
    assert count == 2
    # no float buffer of the scores' size (Llama's position ids come from a cumsum the builder
    # spells as a triangular sum: an integer [2, 20, 20], attention's business it is not)
    nodes = toposort(cm.compiled.outputs)
    assert not [x for x in nodes if x.op not in (Op.INPUT, Op.VIEW) and x.dtype.is_float
                and len(x.shape) >= 2 and tuple(x.shape[-2:]) == (20, 20)]
    # k scaled where it is stored (`attention._scaled_at_source`): no transposed copy of k, none per query head
    assert not [x for x in nodes if x.op not in (Op.INPUT, Op.VIEW) and tuple(x.shape[-2:]) == (16, 20)]
    assert not [x for x in nodes if x.op is Op.CONTIGUOUS and len(x.shape) == 5]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("device", ["cpu", "cpu-loops"])
@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_cpu_causal_at_each_isa(isa, device, monkeypatch):
    """The C kernel's tiles are as wide as the ISA's vectors (64 bytes with AVX-512): a causal
    mask (half the scores -inf, exp's slow inputs) over heads wider than a tile, two query blocks."""
    monkeypatch.setenv("LUMINAL_ISA", isa)
    model = Sdpa(is_causal=True)
    args = _inputs(b=1, h=2, hk=2, m=150, n=150, d=64, dv=80)
    got, count = _compile(model, args, device, True, monkeypatch)
    assert count == 1
    np.testing.assert_allclose(got(*args).numpy(), model(*args).numpy(), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("device", ["cpu", "cpu-loops"])
@pytest.mark.parametrize("model", [Sdpa(), Eager()], ids=["sdpa_safe_softmax", "eager_softmax"])
def test_cpu_tiny_probabilities_are_exact(model, device, monkeypatch):
    """Scores 87 to 104 below the row's max give p = exp(s - max) below FLT_MIN, denormal but
    not 0, which the kernel exps apart from the rest: inf * p is inf, where p = 0 would give NaN,
    as on numpy (torch's own kernels flush such p to 0). Each batch element's two queries share
    their mask row: a key masked out of a row would give 0 * inf = NaN there."""
    q, k, v, mask = _inputs(b=4, h=1, hk=1, m=2, n=40, d=8, dv=8, mask="float")
    q.zero_()  # every score is the mask's value
    mask.fill_(-torch.inf)
    mask[..., 0] = 0
    mask[0, ..., 5], mask[1, ..., 6], mask[2, ..., 7] = -95.0, -88.0, -103.0  # p: ~5.5e-42, ~6e-39, ~1.4e-45
    mask[3, ..., 1], mask[3, ..., 2], mask[3, ..., 3] = -90.0, -120.0, -86.5  # tiny, 0 and normal p in one row
    v[0, 0, 5, 1] = v[1, 0, 6, 2] = v[2, 0, 7, 3] = v[3, 0, 1, 4] = torch.inf
    v[3, 0, 3, 4] = 1e30
    args = (q, k, v, mask)
    want, count = _compile(model, args, "numpy", True, monkeypatch)
    want = want(*args).numpy()
    assert np.isinf(want[[0, 1, 2, 3], 0, :, [1, 2, 3, 4]]).all() and not np.isnan(want).any()
    fused, count = _compile(model, args, device, True, monkeypatch)
    assert count == 1
    got = fused(*args).numpy()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-37, equal_nan=True)


def test_cpu_renders_the_sgemm_path_for_f32_operands_in_place(monkeypatch):
    """f32 q, kᵀ, v read in place (v transposed too): the SGEMM kernel beside the loops (which run
    where the BLAS is not bound; "cpu-loops" above tests them)."""
    for model, shape in (CASES["plain"], CASES["v_transposed"]):
        args = _inputs(**shape)
        if isinstance(model, EagerVt):
            args = (args[0], args[1], args[2].transpose(-1, -2).contiguous())
        cm, count = _compile(model, args, "cpu", True, monkeypatch)
        assert count == 1 and "lum_sgemm(101, q_mode" in cm.compiled.runtime.source


@pytest.mark.parametrize("dv", [48, 64, 96])
@pytest.mark.parametrize("blas", ["mkl", "openblas"])
def test_cpu_sgemm_path_on_each_blas_and_two_threads(blas, dv, monkeypatch, tmp_path):
    """The SGEMM kernel on torch's MKL and on NumPy's OpenBLAS (what an ONNX model without torch
    binds), each called from the team's threads: several blocks of queries and keys, a mask, GQA-like
    broadcast batch; two threads on one compiled graph get the single call's bits. P·V on the
    micro-kernel where the library is built for AVX-512 and the value width is a multiple of its
    tile (64), else the SGEMM; 300 queries and 1,100 keys leave partial tiles."""
    import threading

    from benchmarks.timing import wait_for_builds

    monkeypatch.setenv("LUMINAL_BLAS", blas)
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    shapes = [(3, 300, 64), (3, 64, 1100), (3, 1100, dv), (3, 300, 1100)]
    rng = np.random.default_rng(7)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in zip(["q", "kt", "v", "mask"], shapes)}
    g, ref = _direct(shapes, (0.125, True))
    run = lm.compile_graph(g, device="cpu", optimize=False)
    run(feeds)
    wait_for_builds()  # the C library's result, not the NumPy runtime's while it builds
    assert "lum_sgemm(101, q_mode" in run.runtime.source and "lum_attn_pv(nq" in run.runtime.source
    got = run(feeds)[0]
    np.testing.assert_allclose(got, ref.run(feeds)[0], rtol=1e-5, atol=2e-6)
    outs = [None, None]

    def call(k):
        outs[k] = run(feeds)[0]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in outs:
        np.testing.assert_array_equal(out, got)


@pytest.mark.parametrize("device", DEVICES)
def test_soft_cap_of_infinite_scores(device, monkeypatch):
    """A score q . k of +inf or -inf is capped to +-cap before the mask, as torch computes it
    (a finite row, not NaN); inf * 0 in the product is NaN and makes its row NaN."""
    q, k, v, mask = _inputs(b=1, h=2, hk=2, m=4, n=140, d=8, dv=8, mask="float")
    q[0, 0, 0, 0] = torch.inf  # every score of the row is +inf or -inf (k's first column has both signs)
    k[0, 1, 3, :] = 0.0
    q[0, 1, 2, :] = torch.inf  # and one key with k = 0 makes inf * 0 = NaN there
    args = (q, k, v, mask)
    want = SoftCap()(*args).numpy()
    fused, count = _compile(SoftCap(), args, device, True, monkeypatch)
    assert count == 1
    got = fused(*args).numpy()
    assert not np.isnan(want[0, 0, 0]).any() and np.isnan(want[0, 1, 2]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, equal_nan=True)


def test_hf_gemma2_soft_capped_attention_fuses_every_layer(monkeypatch):
    """Gemma 2 (eager attention, attn_logit_softcapping, GQA, sliding window): every layer's
    attention one fused op, the logits torch's."""
    tf = pytest.importorskip("transformers")
    if not hasattr(tf, "Gemma2ForCausalLM"):
        pytest.skip("this transformers has no Gemma 2")
    torch.manual_seed(0)
    model = tf.Gemma2ForCausalLM(tf.Gemma2Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, sliding_window=8,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, attn_implementation="eager")).eval()
    model.config.use_cache = False
    ids = torch.randint(0, 128, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits.numpy()
        cm, count = _compile(model, (ids,), "cpu", True, monkeypatch)
        got = cm(ids).logits.numpy()
    assert count == 2
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused,kv_heads", [(False, 4), (False, 2), (True, 4), (True, 1)],
                         ids=["projections", "projections_gqa", "fused_qkv", "fused_qkv_mqa"])
def test_q_and_k_scaled_where_they_are_stored(fused, kv_heads, device, monkeypatch):
    """torch's SDPA lowering scales q and k by sqrt(scale) each: those Muls run where q and k are
    stored (`attention._scaled_at_source`): no transposed copy of k, none per query head of a
    group (the op reads the KV heads in place under batch (b, KV heads, G)), a projection's
    scale in its GEMM's epilogue; torch's values, NaN where torch's are."""
    torch.manual_seed(0)
    model = Projected(fused, kv_heads=kv_heads).eval()
    x = torch.randn(2, 40, 64)
    x[1, 30, 5] = torch.nan  # q, k and v of one position NaN
    with torch.no_grad():
        want = model(x).numpy()
    cm, count = _compile(model, (x,), device, True, monkeypatch)
    assert count == 1
    nodes = toposort(cm.compiled.outputs)
    assert not [t for t in nodes if t.op not in (Op.INPUT, Op.VIEW) and tuple(t.shape[-2:]) == (16, 40)]  # kᵀ
    assert not [t for t in nodes if t.op is Op.CONTIGUOUS and len(t.shape) == 5]  # repeat_kv's copies
    (op,) = [t for t in nodes if t.op is Op.ATTENTION]  # (one KV head: a broadcast view, never copied)
    assert tuple(op.shape[:-2]) == ((2, kv_heads, 4 // kv_heads) if 1 < kv_heads < 4 else (2, 4))
    scales = [int(np.prod(t.shape)) for t in nodes if t.op is Op.MUL and t.dtype.is_float and len(t.shape) >= 2]
    if fused:  # q's Mul on its part of the output, as before; k's on k's rows, once per KV head
        assert sorted(scales) == sorted([2 * 4 * 40 * 16, 2 * kv_heads * 40 * 16]), scales
    else:  # both in their projection's GEMM epilogue (a FusedElementwise region each)
        assert not scales, scales
    with torch.no_grad():
        got = cm(x).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[1]).all() and not np.isnan(got[0]).any()  # (v's NaN at key 30: 0 * NaN in every row's p @ v)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
