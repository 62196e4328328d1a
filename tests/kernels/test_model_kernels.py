"""Every kernel of the test models (the torch zoo and tiny Llama, Qwen3, GPT-2, BERT, MiniLM, as
compiled, optimized and saved in benchmarks/gpu_models/) is rendered by the current renderer,
compiled by NVRTC for sm_80 and sm_90 without spills, and the tiny models run on the emulator
under two thread schedules with bitwise-identical results that match the NumPy runtime."""

from pathlib import Path

import numpy as np
import pytest
from graph_helpers import renamed_inputs

import luminal as lm
from luminal.archive import read_archive
from luminal.kernels.plan import KernelPlan
from luminal.kernels.runtime import KernelRuntime

MODELS = Path(__file__).parent.parent.parent / "benchmarks" / "gpu_models"
TINY = ["llama", "qwen3", "gpt2", "bert", "minilm"]


def _checked_models():
    return sorted(p for p in MODELS.glob("*.lum") if not p.name.startswith("bench_"))


def test_the_model_set_is_there():
    names = {p.stem for p in _checked_models()}
    assert set(TINY) <= names
    assert sum(n.startswith("zoo_") for n in names) >= 60


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_model_kernel_compiles_without_spills(arch):
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    outputs = [n for p in _checked_models() for n in read_archive(p)[1]]
    plan = KernelPlan.build(outputs)  # identical kernels are emitted once
    binary = nvrtc.compile_cuda(plan.source, arch)
    assert {k.name for k in plan.launches} <= set(binary.kernels)
    spills = {k: r for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads}
    assert not spills, spills
    regs = sorted(r.registers for r in binary.kernels.values())
    print(f"{arch}: {len(binary.kernels)} distinct kernels of {len(_checked_models())} models; registers "
          f"median {regs[len(regs) // 2]}, max {regs[-1]}; no spills")


@pytest.mark.parametrize("name", TINY)
def test_tiny_model_on_the_emulator_two_schedules(name):
    _, outputs, _ = read_archive(MODELS / f"{name}.lum")
    data = np.load(MODELS / f"{name}.npz")
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    forward = KernelRuntime(outputs, lm.devices.get("cuda-emulator"), schedule=0)
    reverse = KernelRuntime(outputs, lm.devices.get("cuda-emulator"), schedule=1)  # the same build, threads reversed
    got_f = forward(feeds)
    got_r = reverse(feeds)
    want = [data[k] for k in data.files if k.startswith("out:")]
    for a, b, w in zip(got_f, got_r, want):
        np.testing.assert_array_equal(a, b)  # a race would show up as a difference
        # f32: the kernels sum in another order than NumPy (and flush denormals)
        np.testing.assert_allclose(a.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def zoo():
    """Every zoo model in one kernel plan (one g++ build): (outputs, feeds, [(name, want)], runtime)."""
    outputs, feeds, wants = [], {}, []
    for i, path in enumerate(p for p in _checked_models() if p.stem.startswith("zoo_")):
        _, outs, _ = read_archive(path)
        data = np.load(path.with_suffix(".npz"))
        outputs += renamed_inputs(outs, f"m{i}_")
        feeds.update({f"m{i}_{k[3:]}": data[k] for k in data.files if k.startswith("in:")})
        wants += [(path.stem, data[k]) for k in data.files if k.startswith("out:")]
    forward = KernelRuntime(outputs, lm.devices.get("cuda-emulator"), schedule=0)
    used = {n.arg for n in forward.inputs}
    return outputs, {k: v for k, v in feeds.items() if k in used}, wants, forward


def test_zoo_on_the_emulator_two_schedules(zoo):
    """Every zoo model run under two thread schedules."""
    outputs, feeds, wants, forward = zoo
    got_f = forward(feeds)
    got_r = KernelRuntime(outputs, lm.devices.get("cuda-emulator"), schedule=1)(feeds)
    assert len(got_f) == len(wants) >= 60
    for (name, want), a, b in zip(wants, got_f, got_r):
        np.testing.assert_array_equal(a, b, err_msg=name)
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(a, want, err_msg=name)
        else:
            np.testing.assert_allclose(a.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-5, err_msg=name)


def test_zoo_with_nan_inf_and_signed_zero_inputs(zoo):
    """Every float input of every zoo model gets a NaN, +inf, -inf and -0.0 (spread over its
    rows): each kernel must propagate them as the NumPy runtime does (NaN in the same places,
    the same infinities), e.g. a softmax row with one NaN is all NaN, a sum with an inf is inf."""
    from luminal.runtime import NumpyRuntime

    outputs, feeds, wants, forward = zoo
    edge = {}
    for k, v in feeds.items():
        v = np.array(v, copy=True)
        if v.dtype.kind == "f" and v.size >= 4:
            flat = v.reshape(-1)
            step = max(v.size // 4, 1)
            flat[0], flat[step], flat[2 * step + 1], flat[3 * step + 2 if 3 * step + 2 < v.size else -1] = (
                np.nan, np.inf, -np.inf, -0.0)
        edge[k] = v
    got = forward(edge)
    want = NumpyRuntime(outputs)(edge)
    for (name, _), a, w in zip(wants, got, want):
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(a, w, err_msg=name)
            continue
        a, w = a.astype(np.float64), w.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(w), err_msg=f"{name}: NaN positions")
        np.testing.assert_array_equal(np.isinf(a) * np.sign(a), np.isinf(w) * np.sign(w), err_msg=f"{name}: infinities")
        finite = np.isfinite(w)
        np.testing.assert_allclose(a[finite], w[finite], rtol=1e-4, atol=1e-4, err_msg=name)
