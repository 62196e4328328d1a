"""Tiny random-weight HF models (13 families) through both entry points, against eager."""

import pytest
import torch
from hf_models import ALL, example, first_output, make
from torch_helpers import assert_same, max_abs_error

import luminal
from luminal.frontends.torch import dynamo

_CACHE = {}


def family(name):
    """(model, example kwargs, eager output), built once per worker process."""
    if name not in _CACHE:
        model = make(name)
        kw = example(name)
        with torch.no_grad():
            _CACHE[name] = (model, kw, model(**kw))
    return _CACHE[name]


@pytest.mark.parametrize("path", ["dynamo", "export"])
@pytest.mark.parametrize("name", ALL)
def test_hf_family(name, path):
    model, kw, want = family(name)
    with torch.no_grad():
        if path == "dynamo":
            torch._dynamo.reset()
            before, fallbacks = luminal.stats()["graphs_compiled"], len(dynamo.EAGER_FALLBACKS)
            got = torch.compile(model, backend="luminal", options={"strict": True})(**kw)
            assert luminal.stats()["graphs_compiled"] == before + 1  # one graph, no break
            assert len(dynamo.EAGER_FALLBACKS) == fallbacks
        else:
            cm = luminal.compile(model, (), kw)
            got = cm(**kw)
            assert type(got) is type(want)  # a ModelOutput stays a ModelOutput
    err = max_abs_error(first_output(got), first_output(want))
    print(f"{name}/{path}: max abs error {err:.2e}")
    assert_same(first_output(got), first_output(want))


@pytest.fixture(scope="module")
def llama_exported():
    """Llama exported once with a dynamic sequence length, shared by the optimize on/off tests."""
    model, kw, want = family("llama")
    dyn = {"input_ids": {1: torch.export.Dim.DYNAMIC}, "use_cache": None}
    with torch.no_grad():
        return model, torch.export.export(model, (), kw, dynamic_shapes=dyn)


@pytest.mark.parametrize("optimize", [False, True])
def test_llama_optimize_on_and_off_dynamic_seq(llama_exported, optimize):
    model, ep = llama_exported
    cm = luminal.compile(ep, optimize=optimize)  # an ExportedProgram is compiled as is
    report = cm.report()
    assert report.ops_before and report.ops_after
    if not optimize:
        assert report.ops_before == report.ops_after
    for seq in (8, 3, 13):  # one graph, any sequence length (torch.export's range: >= 2)
        kw = example("llama", T=seq)
        with torch.no_grad():
            want, got = model(**kw), cm(**kw)
        print(f"llama optimize={optimize} seq={seq}: max abs error {max_abs_error(got.logits, want.logits):.2e}")
        assert_same(got.logits, want.logits)
    with pytest.raises(luminal.InputError, match="compiled for"):
        cm(**example("llama", T=1))


def test_llama_kv_cache_pytree_outputs():
    """use_cache=True: Dynamo returns logits plus a DynamicCache (a pytree) from luminal's outputs."""
    model = make("llama")
    kw = example("llama", use_cache=True)
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(**kw)
        got = torch.compile(model, backend="luminal", options={"strict": True})(**kw)
    assert_same(got.logits, want.logits)
    for lw, lg in zip(want.past_key_values.layers, got.past_key_values.layers):
        assert_same(lg.keys, lw.keys)
        assert_same(lg.values, lw.values)


def test_llama_mark_dynamic_one_graph():
    """torch._dynamo.mark_dynamic on the sequence dim: one luminal graph serves every length."""
    model, _, _ = family("llama")
    torch._dynamo.reset()
    fast = torch.compile(model, backend="luminal", options={"strict": True})
    before = luminal.stats()["graphs_compiled"]
    with torch.no_grad():
        for seq in (8, 5, 11):
            ids = example("llama", T=seq)["input_ids"]
            torch._dynamo.mark_dynamic(ids, 1)
            assert_same(fast(input_ids=ids, use_cache=False).logits, model(input_ids=ids, use_cache=False).logits)
    stats = luminal.stats()
    assert stats["graphs_compiled"] - before == 1
    assert stats["graphs"][-1]["calls"] == 3
