"""NVRTC compiles every sample kernel for the GPUs luminal targets, on a machine with no GPU."""

import pytest

from luminal.kernels.emulator import find_kernels
from luminal.kernels.nvrtc import (
    CompileError,
    NVRTCCompiler,
    compile_cuda,
    nvrtc_available,
    parse_ptxas_log,
)

pytestmark = pytest.mark.skipif(
    not nvrtc_available(),
    reason="NVRTC cannot be loaded: pip install cuda-bindings 'nvidia-cuda-nvrtc==13.0.*' nvidia-cuda-runtime")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_sample_kernel_compiles_without_spills(sample_source, arch):
    result = compile_cuda(sample_source, arch)
    assert result.binary[:4] == b"\x7fELF"  # a cubin
    assert set(result.kernels) == set(find_kernels(sample_source))
    for name, res in result.kernels.items():
        assert res.registers > 0, name
        assert (res.spill_stores, res.spill_loads, res.stack) == (0, 0, 0), f"{name} spills: {res}"
    assert result.kernels["matmul_tiled16"].shared_mem == 2 * 16 * 16 * 4 + 16 * 4
    assert result.kernels["row_sum_tree"].barriers == 1


def test_compute_arch_gives_ptx(sample_source):
    result = compile_cuda(sample_source, "compute_90")
    text = result.binary.decode()
    assert ".target sm_90" in text and ".entry softmax_online" in text
    assert result.kernels == {}  # no ptxas ran


def test_compile_error_carries_log_and_numbered_source():
    source = 'extern "C" __global__ void broken(float* x) {\n    x[0] = undefined_name;\n}\n'
    with pytest.raises(CompileError) as info:
        compile_cuda(source, "sm_90")
    message = str(info.value)
    assert 'kernel.cu(2): error: identifier "undefined_name" is undefined' in message
    assert "\n   2 |     x[0] = undefined_name;\n" in message
    assert info.value.log and info.value.arch == "sm_90"


def test_cache_hits_in_memory_then_on_disk(tmp_path):
    source = 'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n'
    compiler = NVRTCCompiler(tmp_path)
    first = compiler.compile(source, "sm_90")
    assert compiler.compile(source, "sm_90") is first
    assert (compiler.compiles, compiler.memory_hits) == (1, 1)
    fresh = NVRTCCompiler(tmp_path)  # another process, as far as the cache can tell
    again = fresh.compile(source, "sm_90")
    assert (fresh.compiles, fresh.disk_hits) == (0, 1)
    assert again.binary == first.binary and again.kernels == first.kernels
    fresh.compile(source, "sm_90", ("-lineinfo",))  # other options, other entry
    fresh.compile(source, "sm_80")
    assert fresh.compiles == 2


def test_ptxas_log_parser():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
           "ptxas info    : Function properties for k\n"
           "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 376 bytes cmem[0]\n")
    (res,) = parse_ptxas_log(log).values()
    assert (res.registers, res.spill_stores, res.spill_loads, res.stack, res.shared_mem, res.barriers) == (
        255, 4, 4, 8, 1024, 1)


def test_gemv_vectorized_and_32_bit_index_kernels_compile_without_spills():
    """The kernels issue 19 added: GEMV (both B layouts, every float dtype, static and symbolic M),
    16-byte loads/stores in elementwise and reduction kernels, and both index-width builds."""
    import luminal as lm
    from luminal.hlir.dtypes import DType
    from luminal.hlir.ops import Node, Op
    from luminal.hlir.shape import ShapeTracker
    from luminal.hlir.symbolic import symbol
    from luminal.kernels.plan import KernelPlan

    outputs = []
    for dt in (DType.F32, DType.BF16, DType.F64):  # f16 renders as bf16 does, other types
        for m in (8, symbol("m")):
            for kc, k in ((True, 136), (True, 1040), (False, 136)):  # a warp or a block per column
                tag = f"{dt.short}{m}{int(kc)}{k}"
                x = Node(Op.INPUT, dt, (m, k), (), f"x{tag}")
                if kc:
                    w = Node(Op.INPUT, dt, (45, k), (), f"w{tag}")
                    b = Node(Op.VIEW, dt, (k, 45), (w,), ShapeTracker((k, 45), (1, k)))
                else:
                    b = Node(Op.INPUT, dt, (136, 48), (), f"w{tag}")
                outputs.append(Node(Op.MAT_MUL, dt, (m, b.shape[1]), (x, b)))
    g = lm.Graph()
    x, h = g.input("x", ("n", 64)), g.input("h", ("n", 64), lm.bf16)
    for out in ((x * 2 + 1).exp(), h * 2, x.sum(-1), h.max(-1), x.softmax(-1), x.permute(1, 0).contiguous()):
        g.output(out)
    plan = KernelPlan.build(outputs + g.output_nodes)
    names = {v.name for k in plan.launches for v in (k, *k.variants)}
    assert len(names) > len({k.name for k in plan.launches})  # symbolic dims: two builds
    assert "*(uint4*)" in plan.source and "int idx" in plan.source and "long long idx" in plan.source
    for arch in ("sm_80", "sm_90"):
        binary = compile_cuda(plan.source, arch)
        assert names <= set(binary.kernels)
        spills = {k: r for k, r in binary.kernels.items() if r.spill_stores or r.spill_loads or r.stack}
        assert not spills, spills


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_signed_overflow_wraps_in_the_cuda_dialect(dtype):
    """NVRTC has no -fwrapv: integer + and * are rendered in unsigned arithmetic, so NVVM may not
    fold `x < x + 1` to true (it did: the PTX stored a constant); the PTX tests x != max. The
    integer kernels the wrapping touches (fused regions, reductions, matmul, cumsum) compile."""
    import numpy as np

    import luminal as lm
    from luminal.kernels.plan import KernelPlan

    dt = getattr(lm, dtype)
    g = lm.Graph()
    x = g.input("x", (4,), dt)
    g.output(x < x + 1)
    ptx = compile_cuda(KernelPlan.build(g.compile(device="cuda-emulator").outputs).source, "compute_90").binary.decode()
    assert f"setp.ne.s{np.dtype(dt.numpy).itemsize * 8}" in ptx and str(np.iinfo(dt.numpy).max) in ptx, ptx
    h = lm.Graph()
    y = h.input("y", (5, 40), dt)
    for out in ((y * 3 - 7).maximum(y), y.sum(-1), y.cumsum(-1), y @ y.transpose(0, 1), y[:1] @ y.transpose(0, 1)):
        h.output(out)
    source = KernelPlan.build(h.compile(device="cuda-emulator").outputs).source
    assert "unsigned" in source
    compile_cuda(source, "sm_90")


def test_a_cache_folder_that_cannot_be_written_warns_and_the_compile_goes_on(tmp_path, monkeypatch):
    """The disk cache is an optimization: a full or read-only cache folder (a write raising ENOSPC)
    warns once (CacheWarning), the kernel compiles, and its entry goes to the private folder."""
    import warnings

    from failing_folders import failing_under

    import luminal
    from luminal.kernels import nvrtc

    root = tmp_path / "cache"
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(root))
    monkeypatch.setattr(nvrtc, "write_atomic", failing_under(root, nvrtc.write_atomic))
    source = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = NVRTCCompiler().compile(source, "sm_90")
        NVRTCCompiler().compile(source.replace("2.0f", "3.0f"), "sm_90")
    assert result.binary[:4] == b"\x7fELF"
    said = [str(w.message) for w in caught if issubclass(w.category, luminal.CacheWarning)]
    assert len(said) == 1 and str(root) in said[0] and "ENOSPC" in said[0]
    fresh = NVRTCCompiler()  # the private folder serves the rest of the process
    fresh.compile(source, "sm_90")
    assert (fresh.compiles, fresh.disk_hits) == (0, 1)
