"""Generated CUDA C for every core op: NVRTC compiles it (sm_80, sm_90, no spills) and the CPU
emulator runs it with the same results as the NumPy runtime, under two thread schedules.

All op cases of tests/op_cases.py go into ONE graph, so one NVRTC call per arch and one g++
build cover every kernel (both cached on disk)."""

import numpy as np
import pytest
from op_cases import CASES, case_graph

import luminal as lm
from luminal.kernels.plan import KernelPlan
from luminal.kernels.runtime import KernelRuntime


@pytest.fixture(scope="module")
def all_cases():
    g, feeds, _ = case_graph(CASES, 0, "c")
    return g, feeds, g.run(feeds)


@pytest.fixture(scope="module")
def emulated(all_cases):
    g, feeds, _ = all_cases
    return KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_compiles_with_nvrtc_without_spills(all_cases, arch):
    nvrtc = pytest.importorskip("luminal.kernels.nvrtc")
    if not nvrtc.nvrtc_available():
        pytest.skip("NVRTC wheel not installed")
    plan = KernelPlan.build(all_cases[0].output_nodes)
    binary = nvrtc.compile_cuda(plan.source, arch)
    assert set(binary.kernels) == {k.name for k in plan.launches}
    spills = {k: r for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads}
    assert not spills
    regs = [r.registers for r in binary.kernels.values()]
    print(f"{arch}: {len(regs)} kernels, registers max {max(regs)} mean {np.mean(regs):.1f}, no spills")


def test_source_is_self_contained(all_cases):
    source = KernelPlan.build(all_cases[0].output_nodes).source
    assert "INFINITY" not in source and "#include <cuda_fp16.h>" in source  # the f16 cast case
    g = lm.Graph()
    x = g.input("x", (4,))
    g.output(x.exp())
    small = KernelPlan.build(g.output_nodes).source
    assert "#include" not in small  # headers only when half types are used


def _used(feeds, runtime):
    return {n.arg: feeds[n.arg] for n in runtime.inputs}


def test_emulator_matches_numpy_runtime(all_cases, emulated):
    g, feeds, expected = all_cases
    got = emulated(_used(feeds, emulated))
    for (name, _), want, out in zip(g.outputs, expected, got):
        assert out.dtype == want.dtype and out.shape == want.shape, name
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(out, want, err_msg=name)
        else:
            # the emulator flushes denormals (-ftz=true) and sums in a different order
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_two_schedules_are_bitwise_identical(all_cases, emulated):
    g, feeds, _ = all_cases
    forward = emulated(_used(feeds, emulated))
    reverse = KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"), schedule=1)(_used(feeds, emulated))
    # float scatter-add uses atomicAdd, whose rounding depends on the order (as torch's
    # scatter_add_ on CUDA, documented nondeterministic): equal within rounding, not bitwise
    order_dependent = {"scatter_add"}
    for (name, _), a, b in zip(g.outputs, forward, reverse):
        if name in order_dependent:
            np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_symbolic_dims_are_kernel_arguments():
    g = lm.Graph()
    x = g.input("x", ("batch", "seq"))
    g.output(x[:, 1:].softmax(-1).sum(0))
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"))
    assert "long long d_seq" in rt.plan.source
    for batch, seq in [(1, 2), (3, 37), (2, 5000)]:  # a long row (> 4096) too
        a = np.random.default_rng(seq).standard_normal((batch, seq)).astype(np.float32)
        np.testing.assert_allclose(rt({"x": a})[0], g.run(x=a)[0], rtol=1e-5, atol=1e-6)


def test_out_of_range_index_is_flagged():
    g = lm.Graph()
    x, i = g.input("x", (3,)), g.input("i", (2,), lm.int64)
    g.output(x.gather(0, i))
    rt = KernelRuntime(g.output_nodes, lm.devices.get("cuda-emulator"))
    np.testing.assert_array_equal(rt({"x": np.arange(3, dtype=np.float32), "i": np.array([2, 0])})[0], [2, 0])
    with pytest.raises(lm.IndexOutOfRange):
        rt({"x": np.arange(3, dtype=np.float32), "i": np.array([0, 3])})


def test_compiled_model_on_the_emulator_device():
    from luminal.demo import build_block, make_weights

    g = build_block(make_weights())
    compiled = g.compile(device="cuda-emulator", optimize=False)
    assert "__global__" in compiled.cuda_source()
    x = np.random.default_rng(0).standard_normal((2, 9, 64)).astype(np.float32)
    np.testing.assert_allclose(compiled(x=x)[0], g.run(x=x)[0], rtol=1e-5, atol=1e-5)
