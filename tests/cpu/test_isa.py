"""LUMINAL_ISA: the suite and the benchmarks as on a CPU without AVX-512 (isa.py), on any x86-64."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from luminal.kernels.cpu import build, isa, sgemm

AVX512_FLAGS = frozenset({"avx2", "fma", "f16c", "avx512f", "avx512vl", "avx512bw", "amx_tile", "sse4_2"})


def test_avx2_masks_every_avx512_flag(monkeypatch):
    monkeypatch.setattr(build, "_proc_cpuinfo", lambda: (AVX512_FLAGS, "AuthenticAMD"))
    monkeypatch.setenv("LUMINAL_ISA", "native")
    assert build.cpu_info()[0] == AVX512_FLAGS and sgemm.isa() == "avx512"
    monkeypatch.setenv("LUMINAL_ISA", "avx2")
    assert build.cpu_info() == (frozenset({"avx2", "fma", "f16c", "sse4_2"}), "AuthenticAMD")
    # luminal's SGEMM is its AVX2 build, as on a CPU without AVX-512
    assert sgemm.isa() == "avx2"


def test_the_compiler_flags_keep_avx2(monkeypatch):
    """AVX2 and F16C stay (an AVX2 CPU has them), so the C is the same code as before."""
    monkeypatch.setattr(build, "_proc_cpuinfo", lambda: (AVX512_FLAGS, "GenuineIntel"))
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    build._machine_flags.cache_clear()
    try:
        monkeypatch.setenv("LUMINAL_ISA", "avx2")
        flags = build.machine_flags()
        assert "-mavx2" in flags and "-mf16c" in flags and not any("512" in f for f in flags)
    finally:
        build._machine_flags.cache_clear()


def test_an_unknown_isa_warns_once_and_runs_native(monkeypatch, caplog):
    monkeypatch.setenv("LUMINAL_ISA", "avx1024")
    isa._warned.discard("avx1024")
    with caplog.at_level(logging.WARNING, logger="luminal.cpu"):
        assert isa.name() == isa.name() == "native"
    assert [r.getMessage() for r in caplog.records].count(
        "LUMINAL_ISA='avx1024' is not one of 'native', 'avx2'; using 'native'") == 1


def test_the_libraries_get_their_variables_unless_set(monkeypatch):
    monkeypatch.setenv("LUMINAL_ISA", "avx2")
    for key in isa.library_environment():
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")  # the user's own choice stays
    applied = isa.apply_to_libraries()
    assert applied == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert os.environ["OPENBLAS_CORETYPE"] == "Zen"
    monkeypatch.setenv("LUMINAL_ISA", "native")
    assert isa.library_environment() == {} and isa.apply_to_libraries() == {}


def test_an_openblas_with_avx512_kernels_is_named(monkeypatch):
    monkeypatch.setenv("LUMINAL_ISA", "avx2")
    assert isa.mismatched_blas("SkylakeX") and not isa.mismatched_blas("Haswell") and not isa.mismatched_blas(None)
    monkeypatch.setenv("LUMINAL_ISA", "native")
    assert not isa.mismatched_blas("SkylakeX")


def test_this_run_is_the_isa_it_says():
    """The suite's own switch took effect (tests/conftest.py): under LUMINAL_ISA=avx2 torch's
    kernels are AVX2 ones and luminal's SGEMM is its AVX2 build."""
    if isa.name() != "avx2":
        assert "ATEN_CPU_CAPABILITY" not in isa.library_environment()
        return
    assert torch.backends.cpu.get_cpu_capability() in ("AVX2", "DEFAULT")
    assert sgemm.isa() != "avx512"
    from luminal.kernels.cpu import blas_libs

    assert blas_libs.blas().gemm in ("blas", "luminal-avx2")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/cpuinfo")
def test_a_process_started_with_the_switch_runs_as_avx2(tmp_path):
    """What a user runs (`LUMINAL_ISA=avx2 python -m benchmarks`): a compiled model agrees with the
    native run and no AVX-512 flag reaches luminal."""
    script = textwrap.dedent("""
        import numpy as np, luminal
        from luminal.kernels.cpu import build, isa
        g = luminal.Graph(); x = g.input("x", (16, 32)); w = g.input("w", (32, 8))
        g.output((x @ w).gelu().sum(-1))
        rng = np.random.default_rng(0)
        xs = {"x": rng.standard_normal((16, 32), dtype=np.float32), "w": rng.standard_normal((32, 8), dtype=np.float32)}
        (y,) = g.compile(device="cpu")(xs)
        print(isa.name(), any(f.startswith("avx512") for f in build.cpu_info()[0]), repr(y.tobytes().hex()))
    """)
    outs = []
    for name in ("native", "avx2"):
        env = {**os.environ, "LUMINAL_ISA": name, "LUMINAL_CACHE_DIR": str(tmp_path / name), "LUMINAL_TIERED": "0"}
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.split())
    assert outs[1][:2] == ["avx2", "False"]
    assert outs[0][0] == "native"
    native, avx2 = (bytes.fromhex(o[2].strip("'")) for o in outs)
    import numpy as np

    np.testing.assert_allclose(np.frombuffer(avx2, np.float32), np.frombuffer(native, np.float32), rtol=1e-5)
