"""What a C library runs: its steps (`CStep`), the program (`CProgram`) and the launch table the
driver interprets. Apart from the renderer, which a runtime restored from artifacts never imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from luminal.hlir.ops import Node
from luminal.kernels.cpu.gemm_avx512 import A_IN_PLACE_COLS

if TYPE_CHECKING:
    from luminal.kernels.plan import Schedule


@dataclass
class CStep:
    """One step of the entry point: `name(out, inputs..., [err], dims...)`."""

    name: str
    output: Node
    inputs: list[Node]
    symbols: list[str]
    err: bool
    # a node a fused kernel computes (a convolution's im2col copy or its padded input, a GEMM its
    # epilogue region runs): its step does nothing; the copy's buffer is that kernel's tile scratch
    # (`im2col_scratch`), the pad's and the GEMM's unused
    absorbed: bool = False


@dataclass
class CProgram:
    """A graph's C library (its distinct kernels and the driver `lum_run`) and the steps its launch
    table runs, in order."""

    sources: list[str] | None  # its translation units (None: restored from artifacts, not rendered)
    identity: str | None  # the library as one unit: what its cache key hashes
    steps: list[CStep]
    schedule: Schedule
    symbols: list[str]  # the order of the `dims` argument
    kernels: list[str]  # the library's kernels, in the order of its `lum_kernels` table


# The tiles of a convolution's fused im2col + GEMM (`conv_gemm.Im2colGemm`): here, not in the renderer,
# because a runtime restored from artifacts sizes their scratch without rendering
TILE_FLOATS = 262144  # a tile of the im2col matrix (K rows x T columns) holds about this many values (1 MiB of f32)
TILE_MIN = 256  # columns per tile at least (the GEMM's N: BLAS wants it wide)
TILE_PAR = A_IN_PLACE_COLS  # columns per tile at most when the team's threads take tiles of their own


def k_tile_rows(n: int) -> int:
    """Rows of the copy per tile when the fused GEMM tiles its depth (`k_tiled`): about
    TILE_FLOATS values, a multiple of 16. C: `K_TILE_ROWS_C`."""
    return max(16, TILE_FLOATS // n) // 16 * 16


def k_tiled(k: int, n: int, m: int) -> bool:
    """The fused GEMM tiles its depth, not its columns: deep and narrow (a weight's gradient, k =
    batch x positions), where a tile of columns would hold much of the copy, and the partial m x n
    products (one per tile) take no more than the copy. C: `K_TILED_C`."""
    return (k >= 8 * n and k * min(n, max(TILE_MIN, TILE_FLOATS // k)) > 2 * TILE_FLOATS
            and -(-k // k_tile_rows(n)) * m <= k)


K_TILE_ROWS_C = f"(lum_max(16, {TILE_FLOATS}LL / N) / 16 * 16)"
K_TILED_C = (f"(K >= 8 * N && K * lum_min(N, lum_max({TILE_MIN}LL, {TILE_FLOATS}LL / K)) > {2 * TILE_FLOATS}LL"
             f" && (K + {K_TILE_ROWS_C} - 1) / {K_TILE_ROWS_C} * M <= K)")


def im2col_scratch(k: int, n: int, m: int, team: int, f64: bool) -> int:
    """Elements of the fused im2col GEMM's scratch (`conv_gemm.im2col_gemm_kernel`) when it runs on
    at most `team` threads (the driver's team shrinks on a busy machine, never grows), for a
    GEMM of m rows, depth k and n columns. Tiles of the depth (`k_tiled`, not at precision
    "float64"): the partial products and a tile per thread (no more threads than tiles). Else tiles of T columns: one, or one
    per thread of a team of t <= team when t tiles of at most TILE_PAR columns fit in n (at most
    k x n, one batch's copy)."""
    if k <= 0 or n <= 0 or m <= 0:
        return 0
    if not f64 and k_tiled(k, n, m):
        rows = k_tile_rows(n)
        tiles = -(-k // rows)
        return tiles * m * n + min(team, tiles) * rows * n
    cols = min(n, max(TILE_MIN, TILE_FLOATS // k))  # the kernel's T, before it rounds it down
    return k * max(cols, min(team * min(cols, TILE_PAR), n))


def launch_table(program: CProgram, slot_of) -> list[int]:
    """The launch table `lum_run` interprets: per step its kernel (index into `program.kernels`),
    pointer codes and dim codes. `slot_of(node)` is ("buf", i) for weights, inputs and outputs
    (`bufs[i]`) or ("tmp", j) (`arena + offsets[j]`)."""
    index = {name: i for i, name in enumerate(program.kernels)}
    dim = {s: i for i, s in enumerate(program.symbols)}
    table: list[int] = []
    for st in program.steps:
        ptrs = []
        for n in (st.output, *st.inputs):
            kind, i = slot_of(n)
            ptrs.append(i if kind == "buf" else -1 - i)
        table += [index[st.name], len(ptrs), len(st.symbols), *ptrs, *(dim[s] for s in st.symbols)]
    return table
