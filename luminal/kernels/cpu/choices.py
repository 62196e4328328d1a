"""Whole-program strategy choices of the `cpu` device: each set of choices is a different program
for one optimized graph, passed down explicitly (`Device.runtime(outputs, choices=...)` ->
`runtime.make` -> `CpuRuntime`), never through the environment or module globals.
`luminal.search` times them; a field left None is today's default.

To add a knob: a field here (None meaning the behavior without it), its reading where the
program is made, and its variants in `variants()`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

GEMMS = ("blas", "avx512")  # the BLAS's own SGEMM, or luminal's AVX-512 SGEMM in front of it (gemm_avx512.py)


@dataclass(frozen=True)
class Choices:
    threads: int | None = None  # the OpenMP/BLAS team per call; None: `runtime.threads()`
    gemm: str | None = None  # who serves f32 GEMMs (`GEMMS`); None: `LUMINAL_GEMM`'s choice (auto)

    def label(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) is not None]
        return ", ".join(parts) or "default"

    def as_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @staticmethod
    def from_json(data) -> Choices:
        """The choices `as_json` wrote; ValueError for anything else (a bad cache entry)."""
        if not isinstance(data, dict) or set(data) - {f.name for f in fields(Choices)}:
            raise ValueError(f"not a set of choices: {data!r}")
        threads, gemm = data.get("threads"), data.get("gemm")
        if threads is not None and (type(threads) is not int or threads < 1):
            raise ValueError(f"threads={threads!r}")
        if gemm is not None and gemm not in GEMMS:
            raise ValueError(f"gemm={gemm!r}")
        return Choices(threads=threads, gemm=gemm)


DEFAULT = Choices()


def variants(team: int, avx512: bool, default_gemm: str) -> list[Choices]:
    """The candidates on this machine, the default first: a team of one beside `team` threads
    (small graphs lose to the team's fork/join), and the other GEMM where the CPU has AVX-512
    (`default_gemm`: the one the default binds)."""
    threads = [None, 1] if team > 1 else [None]
    gemms = [None, next(g for g in GEMMS if g != default_gemm)] if avx512 else [None]
    return [Choices(threads=t, gemm=g) for g in gemms for t in threads]
