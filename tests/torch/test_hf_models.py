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


CACHED = ["llama", "qwen3", "mistral", "phi3", "gemma3", "gpt2"]  # decoders whose cache torch.export traces


@pytest.mark.parametrize("name", CACHED)
def test_export_with_the_default_cache(name):
    """luminal.compile of a causal LM called as its config says (use_cache=True): the logits and
    the DynamicCache, every key and value, as eager returns them (`hf_caches`: the cache registered
    as a pytree for torch.export)."""
    from torch.utils._pytree import tree_flatten

    model = make(name)
    kw = example(name, use_cache=None)  # no use_cache argument: the config's default, True
    assert model.config.use_cache
    with torch.no_grad():
        want = model(**kw)
        got = luminal.compile(model, (), kw)(**kw)
    assert_same(got.logits, want.logits)
    assert type(got.past_key_values) is type(want.past_key_values)
    got_kv, got_spec = tree_flatten(got.past_key_values)
    want_kv, want_spec = tree_flatten(want.past_key_values)
    assert got_spec == want_spec and len(got_kv) == 2 * 2  # keys and values of both layers
    for g, w in zip(got_kv, want_kv):
        assert_same(g, w)
    assert got.past_key_values.get_seq_length() == want.past_key_values.get_seq_length() == kw["input_ids"].shape[1]


def test_saved_model_returns_the_cache(tmp_path):
    """A compiled causal LM with its cache, saved and loaded: the output structure, DynamicCache included."""
    model = make("llama")
    kw = example("llama", use_cache=None)
    with torch.no_grad():
        want = model(**kw)
        path = luminal.compile(model, (), kw).save(tmp_path / "llama.lum")
    got = luminal.load(path)(**kw)
    assert_same(got.logits, want.logits)
    for lw, lg in zip(want.past_key_values.layers, got.past_key_values.layers):
        assert_same(lg.keys, lw.keys)
        assert_same(lg.values, lw.values)


def test_cache_registration_never_imports_transformers():
    import subprocess
    import sys

    code = ("import sys; from luminal.frontends.torch import hf_caches; hf_caches.register(); "
            "assert 'transformers' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("name", ["t5", "mixtral"])
def test_export_with_a_cache_torch_cannot_decompose(name):
    """An encoder-decoder's or a mixture-of-experts model's cache: torch's run_decompositions fails
    on the empty tensors it lifts; a named error saying what to do, never torch's SpecViolationError."""
    model = make(name)
    kw = example(name, use_cache=None)
    kw["use_cache"] = True
    with pytest.raises(luminal.UnsupportedError, match="use_cache=False"):
        luminal.compile(model, (), kw)


def test_export_output_of_an_unknown_type_is_named():
    class Box:  # not a pytree node
        def __init__(self, t):
            self.t = t

    class M(torch.nn.Module):
        def forward(self, x):
            return Box(x * 2)

    with pytest.raises(luminal.UnsupportedError, match=r"output of type .*Box.*register_pytree_node"):
        luminal.compile(M(), (torch.ones(3),))


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
