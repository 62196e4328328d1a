"""Concatenations without a copy: the operands are computed where the result holds them.

A CONCAT along a dim with nothing but ones before it (a batch-1 image's channels: SqueezeNet's
fire modules, Inception's branches, DenseNet's growth) holds each operand as one contiguous run
of its buffer. When every operand is an intermediate buffer of its own (computed by a step, read
as it lies: itself, or a view that only renames its dims), each operand's buffer is placed inside the result's, at its run (`aliases`, `placements`),
the result's lifetime stretched over the operands' (`merged_intervals`), and the CONCAT's step
does nothing (`program.render_program` renders it as a no-op). A chain of binary CONCATs (three
or more operands) nests: an inner result placed inside the outer one. The bytes are the same
bytes the copy would have written, so are the bits.

Not for a result or an operand the graph returns (each output has its own array), one read through
a view that moves its elements, a node a fused kernel absorbs (no buffer of its own), an operand read twice by the same
CONCAT, or an offset that is not a multiple of the arena's alignment (a kernel may rely on it).
Symbolic shapes keep the copy.
"""

from __future__ import annotations

from luminal.hlir import symbolic as sym
from luminal.hlir.ops import Node, Op
from luminal.kernels.arena import ALIGN
from luminal.kernels.render.cstyle import view_of


def aliases(schedule, absorbed: set[int]) -> dict[int, tuple[Node, int]]:
    """{id(operand): (the CONCAT whose buffer holds it, its byte offset there)}."""
    outputs = {id(n) for n in schedule.outputs}
    computed = {id(n) for n in schedule.nodes}
    found: dict[int, tuple[Node, int]] = {}
    for n in schedule.nodes:
        if n.op is not Op.CONCAT or id(n) in outputs or id(n) in absorbed or not _static(n):
            continue
        axis = int(n.arg)
        bases = [_buffer(s) for s in n.src]
        if any(int(d) != 1 for d in n.shape[:axis]) or None in bases or len({id(b) for b in bases}) != len(bases):
            continue
        ok, offset, runs = True, 0, []
        for s in bases:
            if (id(s) not in computed or id(s) in outputs or id(s) in absorbed or id(s) in found
                    or s.dtype is not n.dtype or not _static(s) or offset % ALIGN):
                ok = False
                break
            runs.append((s, offset))
            offset += _count(s) * s.dtype.itemsize
        if ok and offset == _count(n) * n.dtype.itemsize:
            for s, at in runs:
                found[id(s)] = (n, at)
    return found


def _buffer(s: Node) -> Node | None:
    """The buffer operand `s` is, read as it lies (itself, or under a view that only renames its
    dims: a GEMM's (1, 1, C, H*W) result read as (1, C, H, W)), else None."""
    if s.op is not Op.VIEW:
        return s
    base, st = view_of(s)
    if not (_static(base) and _static(s)) or _count(base) != _count(s) or not st.is_contiguous():
        return None
    return base


def _static(n: Node) -> bool:
    return all(sym.is_static(d) for d in n.shape)


def _count(n: Node) -> int:
    return int(sym.product(n.shape))


def placements(schedule, absorbed: set[int], intermediates: list[Node]) -> list[tuple[int, int, int]]:
    """(operand, outermost result, byte offset there), as indices into `intermediates`: a nested
    CONCAT's operand is inside the inner result, which is inside the outer one."""
    found = aliases(schedule, absorbed)
    index = {id(n): k for k, n in enumerate(intermediates)}
    out = []
    for k, (holder, at) in found.items():
        while id(holder) in found:
            holder, extra = found[id(holder)]
            at += extra
        if k in index and id(holder) in index:
            out.append((index[k], index[id(holder)], at))
    return out


def merged_intervals(intervals: list[tuple[int, int]], placed) -> list[tuple[int, int]]:
    """`intervals` with each outermost result alive from the first of its operands' steps to the
    last read of any of them (an operand may be read after the CONCAT too)."""
    merged = list(intervals)
    for k, h, _ in placed:
        merged[h] = (min(merged[h][0], intervals[k][0]), max(merged[h][1], intervals[k][1]))
    return merged
