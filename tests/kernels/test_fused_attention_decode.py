"""Attention with few queries (decode: one query a head, or a GQA group's heads as the rows of
one KV head), `kernels/render/attention_decode.py`: the C loops over keys and CUDA's split-K
launches (a block per chunk of 128 keys, then one combining the chunks) give torch's answer,
edge values included where they cross chunks: a chunk masked out entirely beside finite ones
(its NaN in v still reaches the row, 0 * NaN), a row masked out over every chunk, +inf and NaN
scores in a late chunk, no keys, an empty batch; f16/bf16/f64; a symbolic cache length; NVRTC
compiles them without spills; the plan's scratch buffer lives only between its two launches."""

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import luminal as lm
from luminal.egraph import attention, reference
from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node, Op, toposort
from luminal.kernels.render import attention_decode
from luminal.kernels.runtime import KernelRuntime

DEVICES = ["numpy", "cpu", "cpu-spans", "cuda-emulator"]


def _device(device: str, monkeypatch) -> str:
    """"cpu-spans": the C loops with the cache split into spans of 100 keys (each a task,
    combined after: what a cache past 2,048 keys gets), compiled afresh."""
    if device == "cpu-spans":
        monkeypatch.setattr(attention_decode, "FEW_SPLIT", 100)
        monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")
        return "cpu"
    return device


@pytest.fixture(autouse=True)
def fuse_short(monkeypatch):
    monkeypatch.setattr(attention, "MIN_KEYS", 0)


class Sdpa(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


class Eager(torch.nn.Module):
    """HF eager attention (no safe softmax), k and v repeated over the group as repeat_kv does."""

    def forward(self, q, k, v, mask):
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.25 + mask, dim=-1), v)


class EagerRepeatKv(torch.nn.Module):
    """HF eager attention with HF's repeat_kv (expand + reshape: a copy of k and v per query head)."""

    def forward(self, q, k, v, mask):
        def repeat_kv(x, group):
            b, h, n, d = x.shape
            return x[:, :, None].expand(b, h, group, n, d).reshape(b, h * group, n, d)

        group = q.shape[1] // k.shape[1]
        k, v = repeat_kv(k, group), repeat_kv(v, group)
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.25 + mask, dim=-1), v)


def _decode_inputs(b=2, h=8, hk=2, m=1, n=300, d=16, dv=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, m, d, generator=g), torch.randn(b, hk, n, d, generator=g),
            torch.randn(b, hk, n, dv, generator=g), torch.randn(b, 1, m, n, generator=g))


def _compile(model, args, device, monkeypatch):
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1")
    cm = lm.compile(model, args, device=_device(device, monkeypatch))
    assert cm.compiled.report().ops_after.get(Op.ATTENTION.title, 0) == 1
    return cm


def _took_the_decode_kernels(cm, device) -> None:
    runtime = cm.compiled.runtime
    if device.startswith("cpu"):
        assert "a dot product over the head" in runtime.source
        assert f"N > {attention_decode.FEW_SPLIT} ?" in runtime.source  # (the spans' length, in the source)
    elif device == "cuda-emulator":  # two launches: the chunks' partials, then the rows
        launches = [k for k in runtime.plan.launches if k.output.op is Op.ATTENTION]
        assert len(launches) == 2 and attention_decode.is_partials(launches[0].output)
        assert launches[1].inputs[-1] is launches[0].output


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", [Sdpa(), Eager()], ids=["sdpa_safe_softmax", "eager_softmax"])
@pytest.mark.parametrize("m", [1, 3], ids=["one_token", "three_tokens"])
def test_decode_matches_torch_with_edge_values_across_chunks(m, model, device, monkeypatch):
    """Group of 4 query heads per KV head: rows of 4 (one token) or 12 (three, speculative);
    300 keys: three chunks of CUDA's 128, two blocks of C's 256."""
    q, k, v, mask = _decode_inputs(b=4, m=m)
    mask[0, 0, 0, :128] = -torch.inf  # chunk 0 masked out of element 0's first row ...
    v[0, 0, 5, 3] = torch.nan  # ... where v has a NaN: 0 * NaN, NaN in column 3 of KV head 0's rows
    mask[1, 0, 0, :] = -torch.inf  # a row masked out over every chunk
    mask[2, 0, m - 1, 290] = torch.inf  # +inf in the last chunk: a NaN row
    mask[3, 0, m - 1, 200] = torch.nan
    args = (q, k, v, mask)
    want = model(*args).numpy()
    cm = _compile(model, args, device, monkeypatch)
    _took_the_decode_kernels(cm, device)
    got = cm(*args).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, equal_nan=True)
    assert np.isnan(got[0, :4, 0, 3]).all() and not np.isnan(got[0, :4, 0, :3]).any()
    assert np.isnan(got[2:, :, m - 1]).all()
    if isinstance(model, Sdpa):  # safe softmax: the row masked out everywhere is 0 @ v
        assert (got[1, :, 0] == 0).all()
    else:
        assert np.isnan(got[1, :, 0]).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m", [1, 5], ids=["decode_folds_the_group", "five_queries_a_head"])
def test_repeat_kv_copies_are_read_where_they_came_from(m, device, monkeypatch):
    """HF's repeat_kv copies k and v for each query head of a group: the fused op reads the
    KV heads instead (no copy of the cache's size left), under batch (b, KV heads, G); with one
    query a head the group's 4 heads are the rows of its KV head (the decode kernels' rows)."""
    q, k, v, mask = _decode_inputs(b=2, h=8, hk=2, m=m, n=200)
    mask[1, 0, 0, :] = -torch.inf
    v[0, 1, 7, 2] = torch.nan
    args = (q, k, v, mask)
    want = EagerRepeatKv()(*args).numpy()
    cm = _compile(EagerRepeatKv(), args, device, monkeypatch)
    nodes = toposort(cm.compiled.outputs)
    assert not [x for x in nodes if x.op is Op.CONTIGUOUS and sym.product(x.shape) >= 2 * 8 * 200 * 16]
    (node,) = [x for x in nodes if x.op is Op.ATTENTION]
    assert tuple(node.shape) == ((2, 2, 4, 24) if m == 1 else (2, 2, 4, 5, 24))
    got = cm(*args).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6, equal_nan=True)


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
def test_decode_kernels_against_the_tiled_ones(device, monkeypatch):
    """The same graph with the decode kernels switched off (FEW_QUERIES = 0: the tiles of
    `attention.py`): equal within rounding, one key to three chunks."""
    q, k, v, mask = _decode_inputs(m=2, n=257, d=64, dv=64)
    args = (q, k, v, mask)
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "0")
    few = _compile(Sdpa(), args, device, monkeypatch)
    _took_the_decode_kernels(few, device)
    got = few(*args).numpy()
    monkeypatch.setattr(attention_decode, "FEW_QUERIES", 0)
    tiles = _compile(Sdpa(), args, device, monkeypatch)
    np.testing.assert_allclose(got, tiles(*args).numpy(), rtol=1e-5, atol=2e-6)


def _direct(shapes, arg, dtype=lm.f32):
    g = lm.Graph("attention")
    ts = [g.input(k, s, dtype) for k, s in zip(["q", "kt", "v", "mask"], shapes)]
    node = Node(Op.ATTENTION, dtype, (*ts[0].shape[:-1], ts[2].shape[-1]), tuple(t.node for t in ts), arg)
    g.output(lm.Tensor(g, node))
    ref = lm.Graph("decomposed")
    ref.output(reference.attention([ref.input(k, s, dtype) for k, s in zip(["q", "kt", "v", "mask"], shapes)], arg))
    return g, ref


@pytest.mark.parametrize("device", ["cpu", "cpu-spans", "cuda-emulator"])
def test_symbolic_cache_length(device, monkeypatch):
    """One compiled decode attention over a growing cache: no keys, one, a chunk and one more,
    three chunks (the first launch's grid and the scratch's size follow the binding)."""
    g, ref = _direct([(3, 4, 16), (3, 16, "n"), (3, "n", 8), (3, 4, "n")], (0.25, True))
    device = _device(device, monkeypatch)
    run = KernelRuntime(g.output_nodes, lm.devices.get(device)) if device == "cuda-emulator" else \
        lm.compile_graph(g, device=device, optimize=False)
    rng = np.random.default_rng(5)
    for n in (0, 1, 129, 300):
        shapes = [(3, 4, 16), (3, 16, n), (3, n, 8), (3, 4, n)]
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in zip(["q", "kt", "v", "mask"], shapes)}
        got = run(feeds)[0]
        np.testing.assert_allclose(got, ref.run(feeds)[0], rtol=1e-5, atol=2e-6)
        if n == 0:
            assert (got == 0).all()


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
@pytest.mark.parametrize("dtype", ["f64", "f16", "bf16"])
def test_decode_in_other_dtypes(dtype, device):
    """f64 accumulates in double; f16/bf16 round each step of the scores as the unfused ops do
    and the output once: within two half ulps of the NumPy runtime's unfused graph."""
    lm_dtype, np_dtype = {"f64": (lm.f64, np.float64), "f16": (lm.f16, np.float16),
                          "bf16": (lm.bf16, ml_dtypes.bfloat16)}[dtype]
    shapes = [(4, 4, 32), (4, 32, 300), (4, 300, 32), (4, 4, 300)]
    g, ref = _direct(shapes, (0.125, True), lm_dtype)
    rng = np.random.default_rng(9)
    feeds = {k: rng.standard_normal(s).astype(np_dtype) for k, s in zip(["q", "kt", "v", "mask"], shapes)}
    want = ref.run(feeds)[0].astype(np.float64)
    run = KernelRuntime(g.output_nodes, lm.devices.get(device)) if device == "cuda-emulator" else \
        lm.compile_graph(g, device=device, optimize=False)
    got = np.asarray(run(feeds)[0]).astype(np.float64)
    tol = {"f64": 1e-12, "f16": 2 * 2.0 ** -10, "bf16": 2 * 2.0 ** -7}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_split_kernels_compile_with_nvrtc_and_plan_their_scratch():
    """f32 GQA rows over a symbolic cache, f64, bf16 heads of 128 and 15 rows: each node two
    launches, the first writing the scratch the second reads last; no spills on sm_80/sm_90;
    the scratch's last use is the second launch; the roofline reads it there, not q, kᵀ, v."""
    from luminal.kernels import roofline
    from luminal.kernels.plan import KernelPlan

    n = sym.symbol("n")
    outputs = []
    for dtype, m, d in ((lm.f32, 4, 64), (lm.f64, 1, 128), (lm.bf16, 15, 128)):
        k = len(outputs)
        q, kt, v, mask = (Node(Op.INPUT, dtype, s, (), f"{name}{k}") for name, s in
                          (("q", (8, m, d)), ("kt", (8, d, n)), ("v", (8, n, d)), ("mask", (8, m, n))))
        outputs.append(Node(Op.ATTENTION, dtype, (8, m, d), (q, kt, v, mask), (0.125, True)))
    plan = KernelPlan.build(outputs)
    assert len(plan.launches) == 6
    for first, second in zip(plan.launches[::2], plan.launches[1::2]):
        assert attention_decode.is_partials(first.output) and second.inputs[-1] is first.output
        assert plan.last_use[id(first.output)] == plan.launches.index(second)
    rows = roofline.roofline(plan, {"n": 640})
    kv = 8 * 640 * 64 * 4 * 2  # the f32 node's kᵀ and v
    assert rows[0]["bytes"] > kv and rows[1]["bytes"] < kv / 10
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    for arch in ("sm_80", "sm_90"):
        binary = nvrtc.compile_cuda(plan.source, arch)
        assert sum(name.startswith("attention") for name in binary.kernels) >= 6
        assert not [name for name, r in binary.kernels.items() if r.spill_stores or r.spill_loads]


@pytest.mark.parametrize("device", ["cpu", "cuda-emulator"])
def test_empty_batch_and_head(device):
    for shapes in ([(0, 2, 4), (0, 4, 300), (0, 300, 3), (0, 2, 300)], [(2, 2, 4), (2, 4, 300), (2, 300, 0), (2, 2, 300)]):
        g, ref = _direct(shapes, (None, True))
        rng = np.random.default_rng(1)
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in zip(["q", "kt", "v", "mask"], shapes)}
        run = KernelRuntime(g.output_nodes, lm.devices.get(device)) if device == "cuda-emulator" else \
            lm.compile_graph(g, device=device, optimize=False)
        got = run(feeds)[0]
        assert got.shape == ref.run(feeds)[0].shape and got.size == 0


def test_hf_llama_decode_fuses_and_generates_eagers_tokens():
    """HF generate with the KV cache through the torch.compile backend: the decode steps'
    attention (one query a head, GQA) fused in every layer, the group's heads the rows of their
    KV head, no repeat_kv copy of the cache (nor of the prompt's k and v) left, the tokens eager's."""
    tf = pytest.importorskip("transformers")
    from luminal.frontends.torch import dynamo

    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, attn_implementation="sdpa")).eval()
    prompt = torch.randint(0, 128, (1, 130), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, use_cache=True, pad_token_id=0)
    graphs = []
    with torch.no_grad():
        want = model.generate(prompt, **kw)
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, backend=lambda gm, ex: dynamo.backend(
            gm, ex, {"strict": True}, graphs=graphs))
        got = model.generate(prompt, **kw)
    torch._dynamo.reset()
    assert torch.equal(got, want)
    fused = [[n for n in toposort(g.imported.compiled.outputs) if n.op is Op.ATTENTION] for g in graphs if g.imported]
    assert len(fused) >= 2 and all(len(f) == 2 for f in fused), fused  # every layer of the prefill and the decode steps
    assert any(attention_decode.few(n) for f in fused for n in f), fused
    every = [toposort(g.imported.compiled.outputs) for g in graphs if g.imported]
    assert any(any(n.op is Op.ATTENTION and attention_decode.few(n) for n in nodes) for nodes in every)
    # no repeat_kv copy in the decode steps nor in the prefill (where k is scaled by sqrt(scale)
    # after the repeat, torch's SDPA lowering: the Mul runs on the KV heads, `_scaled_at_source`)
    assert not [n for nodes in every for n in nodes if n.op is Op.CONTIGUOUS and len(n.shape) == 5]


def test_cpu_at_precision_float64_and_two_threads(monkeypatch):
    """precision "float64": the C loops in double, against the NumPy runtime in float64; two
    Python threads calling one compiled decode attention get one call's bits."""
    import concurrent.futures

    args = _decode_inputs(b=3, m=1, n=700)
    monkeypatch.setenv("LUMINAL_FUSED_ATTENTION", "1")
    wide = lm.compile(Sdpa(), args, device="cpu", precision="float64")
    want = lm.compile(Sdpa(), args, device="numpy", precision="float64")(*args).numpy()
    np.testing.assert_allclose(wide(*args).numpy(), want, rtol=1e-6, atol=1e-7)
    cm = _compile(Sdpa(), args, "cpu", monkeypatch)
    first = cm(*args).numpy()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # both threads in the kernel's team at once
        outs = list(pool.map(lambda _: [cm(*args).numpy() for _ in range(5)], range(2)))
    for out in (o for calls in outs for o in calls):
        np.testing.assert_array_equal(out, first)
