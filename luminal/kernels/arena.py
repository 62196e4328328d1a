"""One memory arena for a plan's intermediate buffers, laid out by liveness.

A buffer lives from the launch that writes it to the last that reads it; buffers whose lifetimes
do not overlap may share bytes. Greedy best-fit by decreasing size, once per binding of the dims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALIGN = 256  # bytes: what cudaMalloc guarantees, so every buffer keeps the alignment of a fresh allocation


@dataclass(frozen=True)
class ArenaLayout:
    offsets: tuple[int, ...]  # byte offset of each buffer
    total: int  # arena size in bytes

    def check(self, sizes, intervals) -> None:
        """Raise if two buffers that are alive at the same time overlap (a planner bug)."""
        n = len(sizes)
        for i in range(n):
            for j in range(i + 1, n):
                live = intervals[i][0] <= intervals[j][1] and intervals[j][0] <= intervals[i][1]
                apart = self.offsets[i] + sizes[i] <= self.offsets[j] or self.offsets[j] + sizes[j] <= self.offsets[i]
                if live and not apart and sizes[i] and sizes[j]:
                    raise AssertionError(f"buffers {i} and {j} overlap while both are alive")


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_arena(sizes: list[int], intervals: list[tuple[int, int]]) -> ArenaLayout:
    """Offsets for buffers of `sizes` bytes alive over inclusive launch `intervals`."""
    n = len(sizes)
    order = sorted(range(n), key=lambda i: (-sizes[i], intervals[i][0], i))
    # the buffers placed so far (offset, end, first and last launch): the ones alive with the next
    # are found by one vectorized test, not a Python loop (quadratic in a large model's intermediates)
    starts = np.fromiter((iv[0] for iv in intervals), np.int64, n)
    stops = np.fromiter((iv[1] for iv in intervals), np.int64, n)
    placed_off, placed_end = np.empty(n, np.int64), np.empty(n, np.int64)
    placed_lo, placed_hi = np.empty(n, np.int64), np.empty(n, np.int64)
    offsets = [0] * n
    total = 0
    for k, i in enumerate(order):
        size = _round_up(max(sizes[i], 1))
        lo, hi = int(starts[i]), int(stops[i])
        live = (placed_lo[:k] <= hi) & (placed_hi[:k] >= lo)
        busy_off, busy_end = placed_off[:k][live], placed_end[:k][live]
        best, cursor = None, 0
        for j in np.lexsort((busy_end, busy_off)).tolist():  # by offset, then end: best fit, the smallest gap that holds it
            o, e = int(busy_off[j]), int(busy_end[j])
            gap = o - cursor
            if gap >= size and (best is None or gap < best[1]):
                best = (cursor, gap)
            cursor = max(cursor, e)
        offset = best[0] if best is not None else cursor
        offsets[i] = offset
        placed_off[k], placed_end[k], placed_lo[k], placed_hi[k] = offset, offset + size, lo, hi
        total = max(total, offset + size)
    return ArenaLayout(tuple(offsets), total)
