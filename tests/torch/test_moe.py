"""Mixture-of-Experts at transformers' default experts (sort + histc + grouped_mm_fallback):
every MoE family's forward and greedy generate() equal eager on numpy and cpu (the forward on the
CUDA emulator too), one graph each; the routing ops (histc, the grouped GEMMs) against torch on
their edge cases."""

import pytest
import torch
from hf_models import MOE, example, make
from torch_helpers import assert_same, max_abs_error

import luminal
from luminal import devices
from luminal.frontends.torch import compile_forward, dynamo
from luminal.hlir.ops import Op, toposort

DEVICES = ["numpy", "cpu"]
# the CUDA C of the routing ops and the grouped GEMMs, compiled by g++ where there is no GPU
OP_DEVICES = DEVICES + (["cuda-emulator"] if devices.get("cuda-emulator").available else [])


def _ops(model, kw):
    """The call targets Dynamo hands a backend for `model(**kw)`."""
    seen = set()

    def backend(gm, example_inputs):
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(**kw)
    return seen


def test_default_experts_are_the_grouped_mm_path():
    """The families are built at transformers' defaults: the graph carries the grouped GEMM and
    histc (not batched_mm's bmm)."""
    ops = _ops(make("qwen3_moe", layers=1), example("qwen3_moe"))
    assert "transformers.grouped_mm_fallback" in ops and any("histc" in o for o in ops), ops


@pytest.mark.parametrize("device", DEVICES + OP_DEVICES[2:])
@pytest.mark.parametrize("name", MOE)
def test_moe_forward_at_defaults(name, device):
    model, kw = make(name), example(name)
    torch._dynamo.reset()
    before, fallbacks = luminal.stats()["graphs_compiled"], len(dynamo.EAGER_FALLBACKS)
    with torch.no_grad():
        want = model(**kw).logits
        got = torch.compile(model, backend="luminal", options={"strict": True, "device": device})(**kw).logits
    print(f"{name}/{device}: max abs error {max_abs_error(got, want):.2e}")
    assert luminal.stats()["graphs_compiled"] == before + 1 and len(dynamo.EAGER_FALLBACKS) == fallbacks
    assert_same(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MOE)
def test_moe_generate_at_defaults(name, device):
    ids = example(name)["input_ids"]
    with torch.no_grad():
        want = make(name).generate(ids, max_new_tokens=12, do_sample=False, use_cache=True)
        model = compile_forward(make(name), strict=True, device=device)
        torch._dynamo.reset()
        before = luminal.stats()["graphs_compiled"]
        got = model.generate(ids, max_new_tokens=12, do_sample=False, use_cache=True)
    graphs = [g for g in luminal.stats()["graphs"] if g["number"] >= before]
    assert torch.equal(got, want)
    assert 1 <= len(graphs) <= 3 and sum(g["calls"] for g in graphs) == 12, graphs


def test_batched_mm_experts_still_run():
    """The other experts implementation transformers offers (gather + bmm)."""
    model, kw = make("qwen2_moe", moe_impl="batched_mm"), example("qwen2_moe")
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(**kw).logits
        got = torch.compile(model, backend="luminal", options={"strict": True})(**kw).logits
    assert_same(got, want)


def test_moe_model_on_cpu_runs_the_grouped_step():
    """A Qwen3-MoE model at transformers' defaults, compiled for `cpu`: its experts' products are
    GroupedMatMul steps (a BLAS call per group), and no node holds the experts' weights per row
    (a (S, K, N) gather): every rank-3 value the size of an expert's matrix is the weight itself."""
    from luminal.compiler import STATS

    model, kw = make("qwen3_moe", layers=1), example("qwen3_moe")
    torch._dynamo.reset()
    before = len(STATS.compiled)
    with torch.no_grad():
        want = model(**kw).logits
        got = torch.compile(model, backend="luminal", options={"strict": True, "device": "cpu"})(**kw).logits
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    (cg,) = STATS.compiled[before:]
    nodes = toposort(cg.outputs)
    grouped = [n for n in nodes if n.op is Op.GROUPED_MAT_MUL]
    assert len(grouped) == 2, cg.report().ops_after  # gate_up and down, one layer
    for gm in grouped:
        x, w, _ = gm.src
        matrix = {tuple(w.shape[1:]), tuple(w.shape[1:][::-1])}
        for n in nodes:
            if len(n.shape) == 3 and tuple(n.shape[1:]) in matrix and n.op not in (Op.CONSTANT, Op.VIEW, Op.INPUT):
                raise AssertionError(f"{n} materializes experts' matrices")
    assert cg.runtime.source.count("lum_gemm_") and "groupedmatmul_" in cg.runtime.source


# --- the ops -------------------------------------------------------------------------------------
def _compiled(fn, device):
    torch._dynamo.reset()
    return torch.compile(fn, backend="luminal", options={"strict": True, "device": device})


@pytest.mark.parametrize("device", OP_DEVICES)
def test_histc_matches_torch(device):
    """Bin edges, the closed last bin, values outside the range, NaN and inf dropped, a range
    taken from the data (min == max), and a single-valued input widened by one each way."""
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(200, generator=g) * 3, torch.arange(-4, 5).float(), torch.tensor([0.1, 0.7, 2.9999999,
                   float("nan"), float("inf"), -float("inf"), 1 / 3, 2 / 3])])
    ids = torch.tensor([3.0, 0.0, 1.0, 3.0, 2.0, 0.0, 3.0, 3.0])  # a router's expert ids, 4 experts
    cases = [(x, 7, -3.0, 3.0), (x, 10, 0.0, 1.0), (x, 3, -1.0, 2.0), (ids, 4, 0, 3), (ids, 5, 0, 0),
             (torch.full((5,), 2.5), 4, 0, 0)]
    for t, bins, lo, hi in cases:
        fn = _compiled(lambda t, bins=bins, lo=lo, hi=hi: torch.histc(t, bins=bins, min=lo, max=hi), device)
        got, want = fn(t), torch.histc(t, bins=bins, min=lo, max=hi)
        assert torch.equal(got, want), (bins, lo, hi, got, want)


@pytest.mark.parametrize("device", OP_DEVICES)
def test_histc_at_every_bin_edge(device):
    """Elements exactly at the bin edges and one ulp either side: the quotient's rounding decides
    their bin. Other float dtypes are refused by name, never binned wrong."""
    lo, hi, bins = -3.446389620791792, -1.0213178243830563, 20
    edges = torch.tensor([k * (hi - lo) / bins + lo for k in range(bins + 1)], dtype=torch.float64)
    x = torch.cat([edges, torch.nextafter(edges, edges + 1), torch.nextafter(edges, edges - 1)])
    fn = _compiled(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), device)
    t = x.float()
    assert torch.equal(fn(t), torch.histc(t, bins=bins, min=lo, max=hi))
    for t in (x, x.half(), x.bfloat16()):
        with pytest.raises(Exception, match="histc on .*a bin edge"):
            _compiled(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), device)(t)


def _grouped_case():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(9, 8, generator=g), torch.randn(4, 8, 16, generator=g)
    # an empty group, and rows 8.. past the last offset
    return x, w, torch.tensor([3, 3, 6, 8], dtype=torch.int32)


@pytest.mark.parametrize("device", OP_DEVICES)
def test_grouped_mm_fallback_and_its_backward(device):
    pytest.importorskip("transformers.integrations.moe")
    x, w, offs = _grouped_case()
    fwd = _compiled(lambda x, w, o: torch.ops.transformers.grouped_mm_fallback(x, w, o), device)
    assert_same(fwd(x, w, offs), torch.ops.transformers.grouped_mm_fallback(x, w, offs))
    grad = torch.randn(9, 16, generator=torch.Generator().manual_seed(1))
    bwd = _compiled(lambda x, w, o, d: torch.ops.transformers.grouped_mm_fallback_backward(x, w, o, d), device)
    for got, want in zip(bwd(x, w, offs, grad), torch.ops.transformers.grouped_mm_fallback_backward(x, w, offs, grad)):
        assert_same(got, want)


@pytest.mark.parametrize("device", OP_DEVICES)
def test_aten_grouped_mm(device):
    """torch._grouped_mm (what transformers calls for bf16 weights; bf16 only under tracing): the
    2-D x 3-D form with offsets (rows past the last offset are unspecified in torch, compared up
    to it) and the 3-D x 3-D batched form, within one bf16 rounding."""
    x, w, offs = (t.bfloat16() if t.is_floating_point() else t for t in _grouped_case())
    bf16 = dict(atol=1e-2, rtol=2**-7)
    got = _compiled(lambda x, w, o: torch._grouped_mm(x, w, offs=o), device)(x, w, offs)
    assert got.dtype == torch.bfloat16
    assert_same(got[:8], torch._grouped_mm(x, w, offs=offs)[:8], **bf16)
    assert torch.equal(got[8:], torch.zeros(1, 16, dtype=torch.bfloat16))
    a = torch.randn(4, 3, 8, generator=torch.Generator().manual_seed(2)).bfloat16()
    assert_same(_compiled(lambda a, w: torch._grouped_mm(a, w), device)(a, w), torch._grouped_mm(a, w), **bf16)
