"""Donated inputs: a caller that gives up an input's memory for a call (aot_autograd's donated
buffers: the activations a backward graph reads and nothing else holds) lets the call write
outputs and intermediates into it once the input is read for the last time, instead of into new
memory. A training step's backward then writes its gradients, and most of what its arena held,
where dead activations were, and its peak no longer holds both.

What may go where is static per program (`Liveness`): a buffer into input `j` only when every
step reading `j` comes before the step writing the buffer (the kernels read and write only the
buffers their launch passes them, `steps.launch_table`). Per call (`safe_donors`), a donor whose
memory overlaps another input's (two saved tensors that are views of one storage, the same tensor
passed twice) or is not aligned as NumPy aligns its arrays is dropped. `place` then packs the
outputs, each into the fullest donor it fits (64-byte aligned; those that fit nowhere take the
output pool), and the intermediates, largest first, each into the first gap of a host free over
the intermediate's lifetime (`arena.py`'s rule): a dead donor (an output's room taken from its
step on), or an output of its own not yet written. The rest keep the arena, laid out again
without them.

Outputs host intermediates without donors too: a call whose outputs can take at least
`HOSTED_MIN` of its arena (a training forward's saved activations, written layer by layer, hold
the earlier layers' intermediates) runs with that placement (`hosted`), so its thread's arena
stays small.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from luminal.kernels.arena import plan_arena

ALIGN = 64  # bytes: an output's offset in its donor
DONOR_ALIGN = 16  # bytes: a donor's address, as NumPy aligns the arrays it allocates (outputs of the pool too)
MIN_BYTES = 1 << 16  # smaller outputs take the output pool: a donor's room goes to the large ones
HOSTED_MIN = 1 << 20  # bytes of arena a call without donors must save to be placed in its outputs


@dataclass(frozen=True)
class Liveness:
    """Per output, the step writing it (-1: none a donation may precede); per input, the last step
    reading it (-1: none)."""

    writes: tuple[int, ...]
    last_read: tuple[int, ...]

    @staticmethod
    def of(steps, inputs, outputs) -> Liveness:
        written: dict[int, int] = {}
        for i, st in enumerate(steps):  # the first step writing the node's buffer
            if not st.absorbed:
                written.setdefault(id(st.output), i)
        read: dict[int, int] = {}
        for i, st in enumerate(steps):
            for b in st.inputs:
                read[id(b)] = i
        return Liveness(tuple(written.get(id(n), -1) for n in outputs), tuple(read.get(id(n), -1) for n in inputs))


def plan(live: Liveness, donor_bytes: dict[int, int], out_bytes: list[int]) -> dict[int, tuple[int, int]]:
    """{output: (donated input, byte offset)} for outputs of `out_bytes` into the donors of
    `donor_bytes` (input -> its size): each output into the donor with the least room that holds
    it among those read for the last time before the output is written. Two orders are tried and
    the one placing more bytes kept: the earliest written first (a backward writes its last
    layer's gradients when few activations are dead: they get those few), and the largest first
    (the sizes packed when time does not constrain them)."""
    orders = (sorted(range(len(out_bytes)), key=lambda i: (live.writes[i], -out_bytes[i], i)),
              sorted(range(len(out_bytes)), key=lambda i: (-out_bytes[i], i)))
    best: dict[int, tuple[int, int]] = {}
    for order in orders:
        placed = _packed(live, donor_bytes, out_bytes, order)
        if sum(out_bytes[i] for i in placed) > sum(out_bytes[i] for i in best):
            best = placed
    return best


def _packed(live: Liveness, donor_bytes: dict[int, int], out_bytes: list[int], order) -> dict[int, tuple[int, int]]:
    used = dict.fromkeys(donor_bytes, 0)
    placed: dict[int, tuple[int, int]] = {}
    for i in order:
        size, step = out_bytes[i], live.writes[i]
        if size < MIN_BYTES or step < 0:
            continue
        fits = [(donor_bytes[j] - used[j], j) for j in donor_bytes
                if live.last_read[j] < step and donor_bytes[j] - used[j] >= size]
        if fits:
            _, j = min(fits)
            placed[i] = (j, used[j])
            used[j] += _rounded(size)
    return placed


@dataclass(frozen=True)
class Placement:
    """Where a call's buffers go: outputs in donors ({output: (input, byte offset)}),
    intermediates in hosts ({intermediate: (input j, or -1 - i for output i; byte offset)}), the
    other intermediates at `offsets` in an arena of `total` bytes."""

    outputs: dict
    intermediates: dict
    offsets: np.ndarray  # int64, one per intermediate (the hosted ones' unused)
    total: int


FOREVER = 1 << 62  # an output's last step: it outlives the call


def place(live: Liveness, donor_bytes: dict[int, int], out_bytes: list[int], sizes: list[int],
          intervals: list[tuple[int, int]], movable) -> Placement:
    """The outputs as `plan` puts them, then the intermediates of `sizes` bytes alive over the
    inclusive step `intervals` (those in `movable`), largest first, each into the smallest host
    with a gap free over the intermediate's lifetime. The hosts: the donors, from the step after
    their last read on; and the outputs that are no donor's (arrays of their own), up to the step
    writing them (host -1 - i: output i). Before that step an output's memory holds nothing: the
    step writes all of it (nothing reads an output before its step: `Schedule` gives each one a
    buffer of its own, and a kernel reading its output's old contents would read garbage from the
    pool as it is). With no donors, a forward's intermediates go where its saved activations
    will be."""
    outputs = plan(live, donor_bytes, out_bytes)
    hosts = {j: (donor_bytes[j], live.last_read[j], FOREVER) for j in donor_bytes}  # (bytes, dead up to, free before)
    for i, b in enumerate(out_bytes):
        if i not in outputs and b >= MIN_BYTES and live.writes[i] > 0:
            hosts[-1 - i] = (b, -1, live.writes[i])
    taken: dict[int, list[tuple[int, int, int, int]]] = {h: [] for h in hosts}  # (start, end, first, last)
    for i, (j, off) in outputs.items():
        taken[j].append((off, off + _rounded(out_bytes[i]), live.writes[i], FOREVER))
    inside: dict[int, tuple[int, int]] = {}
    by_room = sorted(hosts, key=lambda h: (hosts[h][0], h))
    for k in sorted(movable, key=lambda k: (-sizes[k], k)):
        size, (lo, hi) = _rounded(sizes[k]), intervals[k]
        if sizes[k] < MIN_BYTES:
            continue
        for h in by_room:
            room, dead_to, free_before = hosts[h]
            if dead_to >= lo or hi >= free_before or room < size:
                continue
            off = _first_gap(taken[h], size, lo, hi, room)
            if off is not None:
                taken[h].append((off, off + size, lo, hi))
                inside[k] = (h, off)
                break
    rest = [k for k in range(len(sizes)) if k not in inside]
    layout = plan_arena([sizes[k] for k in rest], [intervals[k] for k in rest])
    offsets = np.zeros(max(1, len(sizes)), np.int64)
    for k, o in zip(rest, layout.offsets):
        offsets[k] = o
    return Placement(outputs, inside, offsets, max(layout.total, 1))


def hosted(live: Liveness, out_bytes: list[int], sizes: list[int], intervals: list[tuple[int, int]],
           movable, arena_total: int) -> Placement | None:
    """The placement of a call without donors whose outputs host some intermediates, if it takes
    at least `HOSTED_MIN` off the arena's `arena_total` bytes; else None (the arena as laid out)."""
    placed = place(live, {}, out_bytes, sizes, intervals, movable)
    return placed if placed.intermediates and arena_total - placed.total >= HOSTED_MIN else None


def _rounded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _first_gap(taken, size: int, lo: int, hi: int, capacity: int) -> int | None:
    """The lowest offset where `size` bytes are free over steps lo..hi among `taken`, within
    `capacity`; None if there is none."""
    cursor = 0
    for start, end, _, _ in sorted(t for t in taken if t[2] <= hi and t[3] >= lo):
        if start - cursor >= size:
            break
        cursor = max(cursor, end)
    return cursor if cursor + size <= capacity else None


def safe_donors(ins: list[np.ndarray], donated, addresses: list[int]) -> list[int]:
    """The donated inputs whose memory is theirs alone among `ins` (at `addresses`) and aligned."""
    starts = np.array(addresses, np.int64)
    ends = starts + np.array([a.nbytes for a in ins], np.int64)
    out = []
    for j in donated:
        if ins[j].nbytes and starts[j] % DONOR_ALIGN == 0 and ins[j].flags.c_contiguous and ins[j].flags.writeable \
                and int(np.count_nonzero((starts < ends[j]) & (ends > starts[j]))) == 1:
            out.append(j)
    return out


def carve(donor: np.ndarray, offset: int, shape: tuple, dtype) -> np.ndarray:
    """The output array of `shape` and `dtype` at `offset` bytes into `donor`'s memory (a view:
    it keeps the donor's memory alive)."""
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return donor.reshape(-1).view(np.uint8)[offset:offset + n].view(dtype).reshape(shape)
