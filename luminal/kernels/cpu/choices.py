"""Whole-program strategy choices of the `cpu` device: each set of choices is a different program
for one optimized graph, passed down explicitly (`Device.runtime(outputs, choices=...)` ->
`runtime.make` -> `CpuRuntime`), never through the environment or module globals.
`luminal.search` times them; a field left None is today's default.

To add a knob: a field here (None meaning the behavior without it), its reading where the
program is made, and its variants in `variants()`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, fields

LOG = logging.getLogger("luminal.cpu")
GEMMS = ("blas", "luminal")  # the BLAS's own SGEMM, or luminal's (AVX-512 or AVX2) in front of it (sgemm.py)
# how convolutions render (`conv_direct.py`): the direct micro-kernel (phase planes, the 1x1
# convs' tiles too), or im2col tiles and the BLAS
CONVS = ("direct", "im2col")
CONV_MODES = ("auto", *CONVS)


@dataclass(frozen=True)
class Choices:
    threads: int | None = None  # the OpenMP/BLAS team per call; None: `blas_libs.threads()`
    gemm: str | None = None  # who serves f32 GEMMs (`GEMMS`); None: `LUMINAL_GEMM`'s choice (auto)
    conv: str | None = None  # the convolutions' path (`CONVS`, `conv_path`); None: `LUMINAL_CONV`'s (auto)

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
        threads, gemm, conv = data.get("threads"), data.get("gemm"), data.get("conv")
        gemm = "luminal" if gemm == "avx512" else gemm  # its name in caches written before the AVX2 build
        if threads is not None and (type(threads) is not int or threads < 1):
            raise ValueError(f"threads={threads!r}")
        if gemm is not None and gemm not in GEMMS:
            raise ValueError(f"gemm={gemm!r}")
        if conv is not None and conv not in CONVS:
            raise ValueError(f"conv={conv!r}")
        return Choices(threads=threads, gemm=gemm, conv=conv)


DEFAULT = Choices()


def variants(team: int, own_gemm: bool, default_gemm: str, default_conv: str) -> list[Choices]:
    """The candidates on this machine, the default first: a team of one beside `team` threads
    (small graphs lose to the team's fork/join), the other GEMM where luminal's own can stand in front
    of the BLAS (`own_gemm`; `default_gemm`: the one the default binds), and the other convolution path (`default_conv`:
    the default's, `conv_path(None)`): its library is another build, so only with the default's
    team and GEMM. A graph without convolutions renders the same library for it (a build cache
    hit) and times the same."""
    threads = [None, 1] if team > 1 else [None]
    gemms = [None, next(g for g in GEMMS if g != default_gemm)] if own_gemm else [None]
    found = [Choices(threads=t, gemm=g) for g in gemms for t in threads]
    return found + [Choices(conv=next(c for c in CONVS if c != default_conv))]


def conv_mode() -> str:
    """`LUMINAL_CONV` ("auto" when unset; a value not in CONV_MODES is warned about and means auto)."""
    value = os.environ.get("LUMINAL_CONV", "auto").strip().lower() or "auto"
    if value not in CONV_MODES:
        LOG.warning("LUMINAL_CONV=%r is not one of %s; using 'auto'", value, ", ".join(map(repr, CONV_MODES)))
        return "auto"
    return value


def conv_choice(choice: str | None) -> str | None:
    """The path a program's convolutions are rendered with as a choice that takes every shape it
    can (`conv_direct.takes`): the program's `choice`, else `LUMINAL_CONV`'s; None under auto,
    where each convolution takes the direct path by auto's rules (a shallow stem, a strided 1x1
    convolution stay on the im2col tiles)."""
    if choice is not None:
        return choice
    mode = conv_mode()
    return None if mode == "auto" else mode


def conv_key(choice: str | None) -> str:
    """What a runtime's stored artifacts record of its convolutions' rendering (`conv_choice`'s
    path, or "auto:" and the path auto resolves to): a library rendered one way is not restored
    for the other."""
    chosen = conv_choice(choice)
    return chosen if chosen is not None else f"auto:{conv_path(None)}"


def conv_path(choice: str | None) -> str:
    """The convolution path a program renders with (`CONVS`): the program's `choice`
    (`Choices.conv`), else `LUMINAL_CONV`'s, else auto: "direct" on x86 with AVX2 and FMA (its
    micro-tiles as wide as the build's vectors: AVX-512's where the CPU has it), where it was
    measured faster, "im2col" (the BLAS's tiles) elsewhere."""
    if choice is not None:
        return choice
    mode = conv_mode()
    if mode != "auto":
        return mode
    from luminal.kernels.cpu import build

    flags = build.machine_flags()
    return "direct" if "-mavx2" in flags and "-DLUM_FMA" in flags else "im2col"
