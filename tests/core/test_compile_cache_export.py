"""The compile cache under `luminal.compile`: the exported program is keyed right after
torch.export, before the lowering (`export.program_key`), so a warm hit skips the lowering, the
import and egglog; programs that differ in anything the lowering reads never share an entry."""

import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_compile_cache import EGGLOG_PHASES, entries

import luminal as lm


class _Scaled:
    """A factory of small torch models that differ in one thing at a time (for the export key)."""

    @staticmethod
    def make(k=2.0, seed=0, dtype=None):
        import torch

        class Scaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 8)

            def forward(self, input):  # `input`: the lowering renames the placeholder (`input_1`)
                return torch.nn.functional.gelu(self.lin(input)) * k

        torch.manual_seed(seed)
        m = Scaled().eval()
        return m.to(dtype) if dtype is not None else m


def _lowerings(monkeypatch) -> list:
    """Counts the lowerings of `luminal.compile` (the program decomposed to core ATen)."""
    from luminal.frontends.torch.export import CompiledModel

    calls, lower = [], CompiledModel._decompose
    monkeypatch.setattr(CompiledModel, "_decompose", staticmethod(lambda ep: calls.append(1) or lower(ep)))
    return calls


def test_luminal_compile_hit_skips_the_lowering(cache, monkeypatch, tmp_path):
    """The second compile of one model finds its exported program in the cache: no lowering,
    import or egglog; outputs bit-identical to the cold compile; saving and the lazily lowered
    `graph` still work."""
    torch = pytest.importorskip("torch")
    lowerings = _lowerings(monkeypatch)
    x = torch.randn(3, 8)
    with torch.no_grad():
        cold = lm.compile(_Scaled.make(), (x,), device="numpy")
        hit = lm.compile(_Scaled.make(), (x,), device="numpy")
        assert len(lowerings) == 1
        rep = hit.report()
        assert rep.cache == {"exported program": "hit", "optimize": "hit"}, rep.cache
        assert not {"lower", "import", *EGGLOG_PHASES} & set(rep.phases) and "export" in rep.phases, rep.phases
        assert "cache" not in cold.report().cache and cold.report().cache["optimize"] == "miss"
        assert torch.equal(hit(x), cold(x))
        torch.testing.assert_close(hit(x), _Scaled.make()(x), rtol=1e-5, atol=1e-6)
        loaded = lm.load(hit.save(tmp_path / "hit.lum"), device="numpy")
        np.testing.assert_array_equal(loaded(x.numpy()), cold(x).numpy())
        assert hit.graph.op_counts() == cold.graph.op_counts() and len(lowerings) == 2  # lowered when asked
    assert len(entries(cache)) == 1 and len(list(cache.glob("*.link.json"))) == 1


@pytest.mark.parametrize("change", ["weight value", "op", "dtype", "dynamic", "device", "optimize", "argument"])
def test_luminal_compile_programs_that_differ_do_not_share_an_entry(cache, change):
    """Each thing the lowering's result depends on is in the key: a model that differs in one
    misses and computes its own answer. Weight values are bound at each hit (references, not
    part of the key): a model with other values hits and runs its own weights."""
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 8)
    base = dict(model=_Scaled.make(), args=(x,), kw={"device": "numpy"})
    other = {"weight value": dict(base, model=_Scaled.make(seed=1)),
             "op": dict(base, model=_Scaled.make(k=5.0)),
             "dtype": dict(base, model=_Scaled.make(dtype=torch.float64), args=(x.double(),)),
             "dynamic": dict(base, kw={"device": "numpy", "dynamic": {"input": {0: "batch"}}}),
             "device": dict(base, kw={"device": "cpu"}),
             "optimize": dict(base, kw={"device": "numpy", "optimize": False}),
             "argument": dict(base, args=(x[:2],))}[change]
    with torch.no_grad():
        first = lm.compile(base["model"], base["args"], **base["kw"])
        torch.testing.assert_close(first(*base["args"]), base["model"](*base["args"]))
        second = lm.compile(other["model"], other["args"], **other["kw"])
        want = other["model"](*other["args"])
        got = second(*other["args"])
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        if change == "dynamic":
            torch.testing.assert_close(second(x[:2]), other["model"](x[:2]), rtol=1e-5, atol=1e-6)
    hit = second.report().cache.get("exported program")
    assert hit == ("hit" if change == "weight value" else None), second.report().cache
    if change == "weight value":
        assert not torch.equal(got, first(x))


def test_luminal_compile_caches_a_program_whose_lowering_keeps_its_signature(cache):
    """A program lowered by `run_decompositions` (a dynamic dim) is cached when the lowered
    program feeds and returns what the exported one does: the hit takes every size. One whose
    lowering reveals a mutation (an in-place buffer update, which the exported program's
    signature does not show) is not: a hit would bake the buffer in as a constant."""
    torch = pytest.importorskip("torch")

    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("count", torch.zeros((), dtype=torch.int64))

        def forward(self, x):
            self.count += 1
            return self.lin(x) * self.count

    caches = {"dynamic": [], "mutating": []}
    with torch.no_grad():
        for _ in range(2):
            torch.manual_seed(0)
            model, ref = Counter(), Counter()
            ref.load_state_dict(model.state_dict())
            cm = lm.compile(model, (torch.randn(3, 4),), device="numpy", dynamic={"x": {0: "batch"}})
            for n in (3, 5, 2):
                xn = torch.randn(n, 4)
                torch.testing.assert_close(cm(xn), ref(xn), rtol=1e-5, atol=1e-6)
            assert int(model.count) == 3
            caches["mutating"].append(cm.report().cache)
            torch.manual_seed(0)
            seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
            cm = lm.compile(seq, (torch.randn(3, 4),), device="numpy", dynamic={"input": {0: "batch"}})
            assert any("by run_decompositions" in n for n in cm.report().notes), cm.report().notes
            for n in (3, 5, 2):
                xn = torch.randn(n, 4)
                torch.testing.assert_close(cm(xn), seq(xn), rtol=1e-5, atol=1e-6)
            caches["dynamic"].append(cm.report().cache)
    assert [c.get("exported program") for c in caches["dynamic"]] == [None, "hit"], caches
    assert [c.get("exported program") for c in caches["mutating"]] == [None, None], caches


def test_luminal_compile_hits_in_a_second_process(tmp_path):
    """A tiny Llama compiled in one process (the cpu device, its C built in the compile) is found
    by the next: the lowering is never called, and the logits are bit-identical to the cold ones."""
    # imported here: child processes import this module without tests/ on their path
    from processes import run_in_processes

    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent.parent / "torch")!r})
        import numpy as np
        import torch
        import luminal
        from luminal.frontends.torch.export import CompiledModel
        from hf_models import example, make

        calls, lower = [], CompiledModel._decompose
        CompiledModel._decompose = staticmethod(lambda ep: calls.append(1) or lower(ep))
        model, kw = make("llama"), example("llama")
        cm = luminal.compile(model, (), kw, device="cpu")
        with torch.no_grad():
            logits = cm(**kw).logits
            torch.testing.assert_close(logits, model(**kw).logits, rtol=1e-4, atol=1e-5)
        print("CACHE", sorted(cm.report().cache.items()), "LOWERINGS", len(calls), "PHASES", sorted(cm.report().phases))
        print("LOGITS", logits.numpy().tobytes().hex())
    """)
    first, second = run_in_processes(script, tmp_path, tiered="0")
    assert "('optimize', 'miss')" in first.stdout and "LOWERINGS 1" in first.stdout, first.stdout
    assert "('exported program', 'hit')" in second.stdout and "LOWERINGS 0" in second.stdout, second.stdout
    assert "'lower'" not in second.stdout and "'import'" not in second.stdout, second.stdout
    logits = [next(line for line in r.stdout.splitlines() if line.startswith("LOGITS")) for r in (first, second)]
    assert logits[0] == logits[1]
