"""One memory arena for a plan's intermediate buffers, laid out by liveness.

Each intermediate buffer lives from the launch that first writes it to the last launch that
reads it. Buffers whose lifetimes do not overlap may share bytes. The layout is a greedy
best-fit by decreasing size (the standard offset-assignment heuristic for DNN memory planning),
recomputed once per binding of the symbolic dims (sizes depend on them) and cached.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], intervals[i][0], i))
    placed: list[tuple[int, int, int]] = []  # (offset, end, buffer)
    offsets = [0] * len(sizes)
    total = 0
    for i in order:
        size = _round_up(max(sizes[i], 1))
        lo, hi = intervals[i]
        busy = sorted((o, e) for o, e, j in placed if intervals[j][0] <= hi and lo <= intervals[j][1])
        best, cursor = None, 0
        for o, e in busy:  # best fit: the smallest gap that holds the buffer
            gap = o - cursor
            if gap >= size and (best is None or gap < best[1]):
                best = (cursor, gap)
            cursor = max(cursor, e)
        offset = best[0] if best is not None else cursor
        offsets[i] = offset
        placed.append((offset, offset + size, i))
        total = max(total, offset + size)
    return ArenaLayout(tuple(offsets), total)
