"""Search by measurement (`luminal.search`): the candidates are checked against the reference
and timed, the fastest kept, and the choice stored in the compile cache folder."""

import re

import numpy as np
import pytest

import luminal
from luminal import Graph, search
from luminal.errors import OptionError
from luminal.kernels.cpu import build
from luminal.kernels.cpu.choices import DEFAULT, Choices

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="no C compiler")


def _graph(n=24):
    g = Graph(f"mlp{n}")
    x = g.input("x", (3, n))
    w = g.constant(np.random.default_rng(n).standard_normal((n, n)).astype(np.float32))
    g.output(((x @ w).relu() * 0.5).sum(-1), "y")
    return g


def _x(n=24):
    return np.random.default_rng(7).standard_normal((3, n)).astype(np.float32)


def _want(g, x):
    return luminal.compile_graph(g, device="numpy", optimize=False)(x=x)[0]


def _entries(cache):
    return sorted(cache.glob("*.search-*.json")) if cache.exists() else []


def test_the_winner_is_a_candidate_and_matches_the_reference(cache):
    g = _graph()
    cg = luminal.compile_graph(g, device="cpu", search=2)
    found = cg.report().search
    labels = [r["choices"] for r in found["candidates"]]
    assert labels[0] == "default" and len(labels) == len(luminal.devices.get("cpu").variants())
    assert found["chosen"] in labels and not found["cached"]
    assert cg.runtime.choices.label() == found["chosen"]
    assert all(r["status"] == "ok" and r["ms"] > 0 for r in found["candidates"])
    np.testing.assert_allclose(cg(x=_x())[0], _want(g, _x()), rtol=1e-5, atol=1e-5)
    assert "search (measured now): chosen" in str(cg.report())
    assert len(_entries(cache)) == 1


def test_a_wrong_candidate_is_discarded(cache, monkeypatch):
    def tamper(choices, outputs):  # every candidate but the default computes a wrong answer
        return outputs if choices == DEFAULT else [o + 1 for o in outputs]

    monkeypatch.setattr(search, "TAMPER", tamper)
    g = _graph()
    cg = luminal.compile_graph(g, device="cpu", search=2)
    found = cg.report().search
    rows = {r["choices"]: r for r in found["candidates"]}
    assert found["chosen"] == "default" and rows["default"]["status"] == "ok"
    wrong = [r for r in rows.values() if r["choices"] != "default"]
    assert wrong and all(r["status"] == "wrong" and "off by up to 1" in r["why"] for r in wrong)
    assert "wrong" in str(cg.report())
    np.testing.assert_allclose(cg(x=_x())[0], _want(g, _x()), rtol=1e-5, atol=1e-5)


def test_a_wrong_default_is_not_chosen(cache, monkeypatch):
    monkeypatch.setattr(search, "TAMPER", lambda c, outs: [o * 2 for o in outs] if c == DEFAULT else outs)
    cg = luminal.compile_graph(_graph(), device="cpu", search=2)
    found = cg.report().search
    assert found["candidates"][0]["status"] == "wrong" and found["chosen"] != "default"


def test_the_stored_choice_is_reused_without_timing(cache, monkeypatch):
    first = luminal.compile_graph(_graph(), device="cpu", search=2).report().search

    def no_timing(*args, **kwargs):
        raise AssertionError("timed again")

    monkeypatch.setattr(search, "measure", no_timing)
    again = luminal.compile_graph(_graph(), device="cpu", search=2)
    found = again.report().search
    assert found["cached"] and found["chosen"] == first["chosen"]
    assert again.runtime.choices.label() == first["chosen"]
    assert "reused from the compile cache" in str(again.report())


@pytest.mark.parametrize("damage", ["garbage", "edited", "foreign choice"])
def test_a_bad_entry_is_ignored_and_rebuilt(cache, damage):
    import json

    first = luminal.compile_graph(_graph(), device="cpu", search=2).report().search
    (path,) = _entries(cache)
    if damage == "garbage":
        path.write_bytes(b"\x00not json")
    else:
        data = json.loads(path.read_text())
        if damage == "edited":  # the sha256 no longer matches
            data["result"]["candidates"][0]["ms"] = 1e-9
        else:  # sealed again, but the choice is no candidate here
            from luminal import compile_cache

            data = compile_cache._sealed({**data, "choices": {"threads": 999}})
        path.write_text(json.dumps(data))
    cg = luminal.compile_graph(_graph(), device="cpu", search=2)
    found = cg.report().search
    assert not found["cached"] and found["chosen"] in [r["choices"] for r in first["candidates"]]
    stored = json.loads(path.read_text())  # rebuilt: a valid entry again
    assert Choices.from_json(stored["choices"]).label() == found["chosen"]
    np.testing.assert_allclose(cg(x=_x())[0], _want(_graph(), _x()), rtol=1e-5, atol=1e-5)


def test_search_off_changes_nothing(cache):
    cg = luminal.compile_graph(_graph(), device="cpu")
    report = cg.report()
    assert report.search is None and "search" not in report.phases and "search" not in str(report)
    assert _entries(cache) == []
    runtime = getattr(cg.runtime, "_compiled", None) or cg.runtime
    cg(x=_x())
    assert getattr(runtime, "choices", DEFAULT) == DEFAULT


@pytest.mark.parametrize("bad", [0, -1, 0.0, float("nan"), float("inf"), "10", True])
def test_a_bad_budget_is_a_named_error(bad):
    with pytest.raises(OptionError, match="search budget"):
        luminal.compile_graph(_graph(), device="cpu", search=bad)


def test_frontend_options_are_checked():
    torch = pytest.importorskip("torch")
    with pytest.raises(OptionError, match="search budget"):
        luminal.compile(torch.nn.Linear(4, 4), (torch.ones(2, 4),), options={"search": -5})
    with pytest.raises(OptionError, match="unknown option"):
        luminal.compile(torch.nn.Linear(4, 4), (torch.ones(2, 4),), options={"serach": 5})


def test_torch_and_onnx_frontends_search(cache, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(2, 16)
    compiled = luminal.compile(model, (x,), options={"search": 2})
    assert compiled.compiled.report().search["chosen"]
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    path = tmp_path / "m.onnx"
    torch.onnx.export(model, (x,), str(path), input_names=["x"], dynamo=False)
    onnx_model = luminal.onnx.compile(str(path), options={"search": 2})
    found = onnx_model.compiled.report().search
    assert found["chosen"] in [r["choices"] for r in found["candidates"]]
    np.testing.assert_allclose(onnx_model(x=x.numpy())[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    before = len(luminal.compiler.STATS.compiled)
    dynamo = torch.compile(model, backend="luminal", options={"search": 2})
    with torch.no_grad():
        torch.testing.assert_close(dynamo(x), model(x), rtol=1e-5, atol=1e-5)
    graphs = luminal.compiler.STATS.compiled[before:]
    assert graphs and all(g.report().search["chosen"] for g in graphs)


def test_choices_reach_the_runtime(cache):
    from luminal.kernels.cpu import sgemm
    from luminal.kernels.cpu.runtime import CpuRuntime

    g = _graph(40)
    optimized = luminal.compile_graph(g, device="numpy").outputs
    want = _want(g, _x(40))
    default = CpuRuntime(optimized)
    one = CpuRuntime(optimized, choices=Choices(threads=1))
    blas = CpuRuntime(optimized, choices=Choices(gemm="blas"))
    assert one._threads == 1 and blas.gemm == "blas"
    assert blas.library_path == default.library_path  # one build; the other GEMM binds a copy of it
    assert list(default.library_path.parent.glob(f"{default.library_path.stem}.blas*"))
    runtimes = [default, one, blas]
    if sgemm.isa() is not None:
        ours = CpuRuntime(optimized, choices=Choices(gemm="luminal"))
        assert ours.gemm == f"luminal-{sgemm.isa()}"
        runtimes.append(ours)
    assert Choices.from_json({"gemm": "avx512"}) == Choices(gemm="luminal")  # its name in older caches
    for rt in runtimes:
        np.testing.assert_allclose(rt({"x": _x(40)})[0], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        Choices.from_json({"gemm": "mkl"})


def test_the_convolution_path_is_a_choice(cache):
    """`Choices.conv` renders a program's convolutions with the direct micro-kernel or as im2col
    tiles and the BLAS, whatever the machine's default; artifacts stored for one path are not
    restored for the other (rebuilt instead), and both paths match the reference."""
    from luminal.builder import nn
    from luminal.kernels.cpu.choices import conv_path, variants
    from luminal.kernels.cpu.runtime import CpuRuntime

    g = Graph("convs")
    x = g.input("x", (1, 8, 20, 20))
    w1 = g.constant(np.random.default_rng(1).standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2)
    w2 = g.constant(np.random.default_rng(2).standard_normal((64, 16, 1, 1)).astype(np.float32) * 0.2)
    g.output(nn.conv(nn.conv(x, w1, None, 1, 1).relu(), w2, None, 1, 0).relu() * 0.5, "y")
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 8, 20, 20)).astype(np.float32)}
    optimized = luminal.compile_graph(g, device="numpy").outputs
    want = luminal.compile_graph(g, device="numpy", optimize=False)(feeds)[0]
    direct, im2col = (CpuRuntime(optimized, choices=Choices(conv=c)) for c in ("direct", "im2col"))
    assert (direct.conv, im2col.conv) == ("direct", "im2col")
    calls = re.compile(r"lum_dconv_\d+x\d+\(mn, K")  # a call of a micro-tile (the build's width decides which)
    assert calls.search(direct.source) and "lum_dconv_" not in im2col.source
    for rt in (direct, im2col):
        np.testing.assert_allclose(rt(feeds)[0], want, rtol=1e-5, atol=1e-5)
    stored = direct.artifacts()
    assert stored["conv"] == "direct"
    assert CpuRuntime(optimized, artifacts=stored, choices=Choices(conv="direct")).restored
    again = CpuRuntime(optimized, artifacts=stored, choices=Choices(conv="im2col"))
    assert not again.restored and "lum_dconv_" not in again.source
    # the other path is a candidate of its own, with the default's team and GEMM
    found = variants(2, False, "blas", "direct")
    assert found[0] == DEFAULT and found[-1] == Choices(conv="im2col")
    assert variants(1, True, "luminal", "im2col")[-1] == Choices(conv="direct")
    assert luminal.devices.get("cpu").variants()[-1] == Choices(conv=next(c for c in ("direct", "im2col") if c != conv_path(None)))
    assert Choices.from_json({"conv": "im2col"}) == Choices(conv="im2col")
    with pytest.raises(ValueError):
        Choices.from_json({"conv": "winograd"})
