"""The C is built for AVX-512 where the CPU has it and LUMINAL_ISA does not mask it (build.machine_flags)."""

from luminal.kernels.cpu import build

FLAGS = frozenset({"avx2", "fma", "f16c", "avx512f", "avx512vl", "avx512bw", "avx512dq", "sse4_2"})


def _flags(monkeypatch, isa, cpu=FLAGS):
    monkeypatch.setattr(build, "_proc_cpuinfo", lambda: (cpu, "GenuineIntel"))
    monkeypatch.setattr(build.platform, "machine", lambda: "x86_64")
    monkeypatch.setenv("LUMINAL_ISA", isa)
    build._machine_flags.cache_clear()
    try:
        return build.machine_flags()
    finally:
        build._machine_flags.cache_clear()


def test_native_avx512_builds_for_it_with_256_bit_loops(monkeypatch):
    flags = _flags(monkeypatch, "native")
    assert {"-mavx2", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mprefer-vector-width=256"} <= set(flags)


def test_avx2_and_partial_avx512_do_not(monkeypatch):
    assert not any("512" in f for f in _flags(monkeypatch, "avx2"))
    assert not any("512" in f for f in _flags(monkeypatch, "native", FLAGS - {"avx512dq"}))
