"""What a C library runs: its steps (`CStep`), the program (`CProgram`) and the launch table the
driver interprets. Apart from the renderer, which a runtime restored from artifacts never imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import Node, Op
from luminal.hlir.shape import ShapeTracker, contiguous_strides
from luminal.kernels.cpu.sgemm import A_IN_PLACE_COLS

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


def through(window: ShapeTracker, shape) -> list | None:
    """Per dim of a contiguous buffer of the static `shape`, ([(dim of window, coefficient)],
    offset) such that window's element [i] is that buffer's element [sum(coef * i) + offset per
    dim], every index in range; None when `window` (no mask) does not read it that way."""
    if window.mask is not None or not all(sym.is_static(d) for d in (*shape, *window.shape, *window.strides,
                                                                      window.offset)):
        return None
    strides = contiguous_strides(shape)
    off = int(window.offset)
    if off < 0 or (shape and off >= int(np.prod(shape))):
        return None
    terms = [([], (off // w) % d if j else off // w) for j, (w, d) in enumerate(zip(strides, shape))]
    for i, (d, s) in enumerate(zip(window.shape, window.strides)):
        if d == 1 or s == 0:
            continue
        j = next((j for j, w in enumerate(strides) if 0 < w <= s), None)
        if s < 0 or j is None or s % strides[j]:
            return None
        terms[j][0].append((i, s // strides[j]))
    for (coefs, base), d in zip(terms, shape):
        if base + sum(c * (window.shape[i] - 1) for i, c in coefs) > d - 1:
            return None
    return terms


def column_split(shape, cols) -> int | None:
    """The first of `shape`'s trailing dims whose product is `cols` (a GEMM's columns as dims of
    its B operand's copy), or None."""
    split, prod = len(shape), 1
    while split > 0 and not sym.equal(prod, cols):
        split -= 1
        prod = sym.norm(prod * shape[split])
    return split if sym.equal(prod, cols) and split < len(shape) else None


# --- direct convolution (`conv_direct.py`) ----------------------------------------------------
# output positions per micro-tile -> output channels, by the micro-kernel's vector width
# (`c/direct_conv.h`): 8 floats (AVX2, 16 registers), 16 where the library is built for AVX-512
DC_KERNELS = {16: 6, 24: 4}
DC_KERNELS_AVX512 = {32: 12, 48: 8}
_DC_ROWS = {**DC_KERNELS, **DC_KERNELS_AVX512}  # any micro-tile's output channels by its positions
# a micro-tile's measured multiply-adds per second against the widest's, where lower (README,
# "Direct convolutions"): the choice weighs wasted work by it
DC_RATE = {32: 0.88}
DC_SLACK = 64  # floats past the planes: the last micro-tile's lanes past the output read there


def dc_kernels() -> dict[int, int]:
    """The micro-tiles the library being built has: its flags' vector width (`build.machine_flags`,
    so `LUMINAL_ISA=avx2` gives AVX2's on any machine)."""
    from luminal.kernels.cpu import build

    return DC_KERNELS_AVX512 if "-mavx512f" in build.machine_flags() else DC_KERNELS


DC_TILE_CHUNKS = 8  # micro-tiles of positions per tile (a thread's unit of work) at most
# a small image's convolution (at most this many micro-tiles of positions: 7x7, 14x14) splits its
# output channels across the team instead (`DirectConv.block_rows`)
DC_ROW_SPLIT_CHUNKS = 16
# a weight gradient's direct GEMM for at most this many output channels: past it each thread's
# transposed columns of C outgrow L2 and the K-tiled im2col GEMM measured faster (README, "Direct
# convolutions")
DC_WGRAD_MAX_ROWS = 128


@dataclass(frozen=True)
class DirectConv:
    """A convolution's im2col copy (rows: batch and the depth (c, kh, kw); columns: output
    positions (oh, ow)) read as what it is: element (row, oh, ow) of the copy is element
    (.., y0 + sh * oh, x0 + sw * ow) of its source X (the padded input), with (.., y0, x0)
    depending on the row alone. X is rewritten once per call as "phase planes": per index of its
    other dims (batch, channel), sh x sw planes of hq x wq, plane (y % sh, x % sw) holding
    X[.., y, x] at (y // sh, x // sw). Then the copy's row r at position e = oh * wq + ow of the
    "extended" grid (rows wq wide, the columns past ow computed and dropped) is
    planes[offset(r) + e]: every row of B is a contiguous run of the planes, read in place by the
    micro-kernel, and the im2col matrix is never written. A weight gradient's copy is the same
    matrix transposed (rows: the positions (batch, oh, ow), the last dim ow; columns: (c, kh,
    kw)): each column of B is then a run of the planes per row of positions, and its GEMM a dot
    product per weight over those runs (`columns` False)."""

    space: tuple  # X's shape
    terms: tuple  # `through`'s: per dim of X, ((copy dim, coefficient)..., offset)
    split: int  # copy dims before it are rows, from it columns
    h: int | None  # X's dim that the output rows move (None: one output row)
    w: int  # X's dim that the output columns move
    sh: int
    sw: int
    oh: int
    ow: int
    nr: int  # output positions per micro-tile (`DC_KERNELS`)
    columns: bool = True  # the positions are the GEMM's columns (a convolution), else its depth (a weight gradient)

    @property
    def mr(self) -> int:
        return _DC_ROWS[self.nr]

    @property
    def hq(self) -> int:
        return 1 if self.h is None else -(-self.space[self.h] // self.sh)

    @property
    def wq(self) -> int:
        return -(-self.space[self.w] // self.sw)

    @property
    def others(self) -> list[int]:
        return [j for j in range(len(self.space)) if j not in (self.h, self.w)]

    @property
    def plane(self) -> int:
        return self.hq * self.wq

    @property
    def planes_floats(self) -> int:
        return int(np.prod([self.space[j] for j in self.others], dtype=np.int64)) * self.sh * self.sw * self.plane

    @property
    def ext(self) -> int:
        """Positions of the extended grid the kernel computes."""
        return (self.oh - 1) * self.wq + self.ow

    @property
    def chunks(self) -> int:
        return -(-self.ext // self.nr)

    def block_rows(self, m: int) -> int:
        """Output channels per unit of work (a multiple of the micro-tile's rows, or m). Tiles of
        positions each pass the whole weight (m x depth) over their positions; on a small image
        (few positions, a deep weight: 256 x 2304 at 7x7, 2.3 MB past L2) that is the weight read
        once per tile for a few positions each. There every unit takes all positions and a block
        of channels (at least 16 blocks where there are channels for them): the weight is read
        once in all, the planes (in L2) once per block. Each output is one chain in k order
        either way, so the split changes no bits."""
        micro = -(-m // self.mr)
        if not self.columns or self.chunks > DC_ROW_SPLIT_CHUNKS or micro < 4:
            return m
        return -(-micro // 16) * self.mr

    def tile_chunks(self, m: int) -> int:
        """Micro-tiles of positions per tile at most: all of them when the channels are split
        (`block_rows`), else at least 16 tiles where there are positions for them. Each call
        takes between half of it and it, whichever balances its team best (`lum_dc_per` in
        c/direct_conv.h; no bits change)."""
        if self.block_rows(m) < m:
            return self.chunks
        return min(DC_TILE_CHUNKS, max(1, -(-self.chunks // 16)))

    def work(self, m: int) -> int:
        """Units of work at most: blocks of channels (all positions each), or tiles of positions
        as narrow as `lum_dc_per` takes them."""
        if self.block_rows(m) < m:
            return -(-m // self.block_rows(m))
        return -(-self.chunks // -(-self.tile_chunks(m) // 2))

    def scratch(self, m: int, team: int) -> int:
        """Floats: the planes, their slack, and (a convolution) a tile of a unit's channels x
        positions per thread."""
        if not self.columns:
            return self.planes_floats + DC_SLACK
        return (self.planes_floats + DC_SLACK
                + min(team, self.work(m)) * self.block_rows(m) * self.tile_chunks(m) * self.nr)


def _moving(terms, shape, candidates: list[int]) -> dict | None:
    """{copy dim: (X dim, coefficient)} when each of `candidates` moves exactly one dim of X
    (coefficient >= 1) and that dim of X no other candidate; else None."""
    found = {}
    for j, (coefs, _) in enumerate(terms):
        mine = [(i, c) for i, c in coefs if i in candidates]
        if len(mine) > 1 or (mine and (mine[0][0] in found or mine[0][1] < 1)):
            return None
        if mine:
            found[mine[0][0]] = (j, mine[0][1])
    return found if set(found) == set(candidates) else None


def direct_conv(copy: Node, cols, m, batch=1, kernels: dict[int, int] | None = None) -> DirectConv | None:
    """The direct form of the f32 im2col copy `copy` whose trailing dims make up `cols` columns,
    multiplied by `m` rows (a GEMM batch of `batch`), when it reads its source as `DirectConv`
    describes (static shapes), else None: a convolution's (the output positions are the columns),
    or, with a batch of 1, a weight gradient's (the positions are the depth, `columns` False).
    `kernels`: the micro-tiles to choose from (None: `dc_kernels()`, the library's)."""
    if copy.op is not Op.CONTIGUOUS or copy.dtype is not DType.F32 or copy.src[0].op is not Op.VIEW:
        return None
    src = copy.src[0].src[0]
    split = column_split(copy.shape, cols)
    terms = None if split is None else through(copy.src[0].arg, src.shape)
    if terms is None or not all(sym.is_static(d) for d in (*copy.shape, *src.shape, m, batch)) or int(m) < 1:
        return None
    shape = [int(d) for d in copy.shape]
    columns = True
    moving = [i for i in range(split, len(shape)) if shape[i] != 1]
    found = _moving(terms, shape, moving) if 1 <= len(moving) <= 2 else None
    if found is None and int(batch) == 1 and int(m) <= DC_WGRAD_MAX_ROWS and shape[split - 1] != 1:  # positions in the depth
        columns = False
        moving = [i for i in range(split) if shape[i] != 1][-2:]
        found = _moving(terms, shape, moving)  # (ow the last: position k = row of positions x ow + ow)
    if found is None:
        return None
    w, sw = found[moving[-1]]
    h, sh = found[moving[0]] if len(moving) == 2 else (None, 1)
    oh = shape[moving[0]] if len(moving) == 2 else 1
    ow = shape[moving[-1]]
    wq = -(-int(src.shape[w]) // sw)
    ext = (oh - 1) * wq + ow

    kernels = dc_kernels() if kernels is None else kernels

    def work(nr: int) -> float:  # multiply-adds per k with the wasted rows and positions, over the tile's rate
        mr = kernels[nr]
        return -(-int(m) // mr) * mr * -(-ext // nr) * nr / DC_RATE.get(nr, 1.0)

    nr = min(sorted(kernels, reverse=True), key=work)  # the wider kernel on a tie
    return DirectConv(tuple(int(d) for d in src.shape), tuple((tuple(c), o) for c, o in terms), split, h, w, sh, sw,
                      oh, ow, nr, columns)


def written_in_place(outputs: list) -> list:
    """The outputs the program computes: an output that is a reshape of a node a kernel computes,
    a bare view or a copy of one (training's saved activations: a (8, 128, 512) region's result
    returned as (1024, 512)), is that node, written straight into the returned array (the same
    elements in the same order: its shape is the declared one), not computed into the arena and
    copied. Not a node that is an input, a weight or another output (two outputs never share a
    buffer)."""
    taken = {id(o) for o in outputs}
    result = []
    for o in outputs:
        p = _reshaped_producer(o)
        if p is not None and id(p) not in taken:
            taken.add(id(p))
            o = p
        result.append(o)
    return result


def _reshaped_producer(o):
    # a bare view (aot_autograd's saved `view` of an activation) or an explicit copy of one (an FX
    # graph's clone); the node then launches as an output, which shrank training's arenas (the
    # view's copy had held both buffers at once)
    if o.op is Op.VIEW:
        view, p = o.arg, o.src[0]
    elif o.op is Op.CONTIGUOUS and o.src[0].op is Op.VIEW:
        view, p = o.src[0].arg, o.src[0].src[0]
    else:
        return None
    if p.op in (Op.INPUT, Op.CONSTANT, Op.VIEW) or p.dtype is not o.dtype or view.mask is not None:
        return None
    dense = [(d, st) for d, st in zip(view.shape, view.strides) if not sym.equal(d, 1)]
    if not sym.equal(view.offset, 0) or not sym.equal(sym.product(view.shape), sym.product(p.shape)):
        return None
    size = 1
    for d, st in reversed(dense):  # row-major strides over the dims past 1: the buffer read in order
        if not sym.equal(st, size):
            return None
        size = sym.norm(size * d)
    return p


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
