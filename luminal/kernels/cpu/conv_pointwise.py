"""1x1 convolutions on the direct convolution's micro-kernel (`c/direct_conv.h`), with their
epilogue: the C of `conv_gemm.gemm_epilogue_kernel`'s units, AVX2's tiles only.

A 1x1 convolution is a GEMM of the weight (A: output channels x input channels, stored in the
graph) and the input's channel planes (B: channels x positions, read in place: off[k] = k *
b_ld). Its depth is short (16 to 320 channels) and its output wide (a 64 x 12544 plane at
112 x 112), so the BLAS's packing of every tile of B and its output written, then read again
by the region (BatchNorm, ReLU6, hardswish, a residual), cost more than the products. Here a
unit of work is the rows of C (all, or a block of them where there are few units) times T
columns chosen so that B's block (K x T) and the unit's outputs (M x T) stay in the core's
caches together (`UNIT_FLOATS`): the micro-kernel writes the unit into the output and the region
rereads it from L1/L2 at once. Each output is one chain of FMAs in k order whoever computes it,
so the bits depend neither on the units nor on the team; the columns past the last multiple of
the micro-tile's go through one BLAS GEMM of all the rows first.

Grouped 1x1 convolutions (ShuffleNet's) run a group per thread (their units: tiles of the plain
GEMM's epilogue tile, blocks of rows across the team where there are few).
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.kernels.cpu.steps import DC_KERNELS

# floats of B's block and the unit's outputs together (K x T + M x T: 64 KiB, twice L1, an eighth
# of L2)
UNIT_FLOATS = 16384
# an ungrouped 1x1 convolution takes the micro-kernel from this many outputs (past what L2 holds:
# below it the BLAS's tile and the region's pass over it stay in L2, as fast or faster) and up to
# this depth (deeper, the BLAS's packed GEMM is compute-bound at its own rate); the figures:
# README, "Direct convolutions"
OUTPUTS_MIN = 131072
DEPTH_MAX = 128
# units per thread at least: fewer, and the rows split into blocks too (a 7x7 image's 49 columns)
UNITS_PER_THREAD = 2


def takes(m, n, k) -> bool:
    """Whether an ungrouped 1x1 convolution of m output channels, n positions and depth k runs on
    the micro-kernel (static sizes only: the rule is the sizes')."""
    if not all(sym.is_static(d) for d in (m, n, k)):
        return False
    return int(m) * int(n) >= OUTPUTS_MIN and int(k) <= DEPTH_MAX


def micro_tile(m) -> tuple[int, int]:
    """(rows, columns) of the AVX2 micro-tile (`steps.DC_KERNELS`) with the fewest rows computed
    for nothing on m output channels; 4 x 24 on a tie or a symbolic m (one load fewer per 12
    FMAs)."""
    if not sym.is_static(m):
        return DC_KERNELS[24], 24
    return min(((mr, nr) for nr, mr in DC_KERNELS.items()), key=lambda t: (-(-int(m) // t[0]) * t[0], t[0]))


def units(m, grouped: bool, pragma: str, g: str, epilogue: str) -> str:
    """C for batch element bz (`out`, `a_ptr`, `a_ld`, `b_ptr`, `b_ld`, `offs`, M, N, K, T in
    scope; T: the plain GEMM's epilogue tile): the micro-kernel's units, each then through
    `epilogue` (the region on rows m0 .. m0 + mn, columns p0 .. p0 + nt). `pragma`: the units
    across the team ("": this thread runs them all, a batch element per thread). `g`: the BLAS's
    suffix for the tail's GEMM."""
    mr, nr = micro_tile(m) if not grouped else (DC_KERNELS[16], 16)
    if grouped:
        cut = f"""const long long Tu = T, n_t = (N + Tu - 1) / Tu, per = {"(16 + n_t - 1) / n_t" if pragma else "1"};"""
    else:
        cut = f"""/* units of T columns: B's block and the unit's outputs in cache together */
        long long Tu = lum_max({nr}, {UNIT_FLOATS}LL / (K + M) / {nr} * {nr});
        const long long n_t = (N + Tu - 1) / Tu, per = {f"lum_max(1, ({UNITS_PER_THREAD} * lum_threads + n_t - 1) / n_t)" if pragma else "1"};"""
    return f"""const long long N16 = N / {nr} * {nr};  /* the columns past it: one GEMM of all the rows, before the units' epilogues */
        if (N16 < N) lum_gemm_{g}(0, 0, M, N - N16, K, a_ptr, a_ld, b_ptr + N16, b_ld, out + bz * M * N + N16, N);
        {cut}
        const long long MB = {mr} * (((M + {mr - 1}) / {mr} + per - 1) / per), n_units = n_t * ((M + MB - 1) / MB);
        {pragma}
        for (long long u = 0; u < n_units; ++u) {{
          const long long p0 = u % n_t * Tu, nt = lum_min(Tu, N - p0), n16 = nt / {nr} * {nr};
          const long long m0 = u / n_t * MB, mn = lum_min(MB, M - m0);
          float* const c = out + (bz * M + m0) * N + p0;
          if (n16 > 0) lum_dconv_{mr}x{nr}(mn, K, a_ptr + m0 * a_ld, a_ld, b_ptr + p0, offs, c, N, n16);
          {epilogue}
        }}"""
