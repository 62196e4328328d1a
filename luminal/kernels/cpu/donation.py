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
outputs, largest first, each into the fullest donor it fits (64-byte aligned; those that fit
nowhere take the output pool), and the intermediates, largest first, each into the first gap of a
dead donor that is free over the intermediate's lifetime (`arena.py`'s rule, an output's room
taken from its step on); the rest keep the arena, laid out again without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from luminal.kernels.arena import plan_arena

ALIGN = 64  # bytes: an output's offset in its donor
DONOR_ALIGN = 16  # bytes: a donor's address, as NumPy aligns the arrays it allocates (outputs of the pool too)
MIN_BYTES = 1 << 16  # smaller outputs take the output pool: a donor's room goes to the large ones


@dataclass(frozen=True)
class Liveness:
    """Per output, the step writing it (-1: none a donation may precede); per input, the last step
    reading it (-1: none)."""

    writes: tuple[int, ...]
    last_read: tuple[int, ...]

    @staticmethod
    def of(steps, inputs, outputs) -> Liveness:
        written = {id(st.output): i for i, st in enumerate(steps) if not st.absorbed}
        read: dict[int, int] = {}
        for i, st in enumerate(steps):
            for b in st.inputs:
                read[id(b)] = i
        return Liveness(tuple(written.get(id(n), -1) for n in outputs), tuple(read.get(id(n), -1) for n in inputs))


def plan(live: Liveness, donor_bytes: dict[int, int], out_bytes: list[int]) -> dict[int, tuple[int, int]]:
    """{output: (donated input, byte offset)} for outputs of `out_bytes` into the donors of
    `donor_bytes` (input -> its size): each output, largest first, into the donor with the least
    room that holds it among those read for the last time before the output is written."""
    used = dict.fromkeys(donor_bytes, 0)
    placed: dict[int, tuple[int, int]] = {}
    for i in sorted(range(len(out_bytes)), key=lambda i: -out_bytes[i]):
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
    """Where a call's buffers go: outputs and intermediates in donors ({index: (input, byte
    offset)}), the other intermediates at `offsets` in an arena of `total` bytes."""

    outputs: dict
    intermediates: dict
    offsets: np.ndarray  # int64, one per intermediate (the donors' ones unused)
    total: int


FOREVER = 1 << 62  # an output's last step: it outlives the call


def place(live: Liveness, donor_bytes: dict[int, int], out_bytes: list[int], sizes: list[int],
          intervals: list[tuple[int, int]], movable) -> Placement:
    """The outputs as `plan` puts them, then the intermediates of `sizes` bytes alive over the
    inclusive step `intervals` (those in `movable`), largest first, into the smallest donor read
    for the last time before the intermediate is written with a gap free over its lifetime."""
    outputs = plan(live, donor_bytes, out_bytes)
    taken: dict[int, list[tuple[int, int, int, int]]] = {j: [] for j in donor_bytes}  # (start, end, first, last)
    for i, (j, off) in outputs.items():
        taken[j].append((off, off + _rounded(out_bytes[i]), live.writes[i], FOREVER))
    inside: dict[int, tuple[int, int]] = {}
    by_room = sorted(donor_bytes, key=lambda j: (donor_bytes[j], j))
    for k in sorted(movable, key=lambda k: (-sizes[k], k)):
        size, (lo, hi) = _rounded(sizes[k]), intervals[k]
        if sizes[k] < MIN_BYTES:
            continue
        for j in by_room:
            if live.last_read[j] >= lo or donor_bytes[j] < size:
                continue
            off = _first_gap(taken[j], size, lo, hi, donor_bytes[j])
            if off is not None:
                taken[j].append((off, off + size, lo, hi))
                inside[k] = (j, off)
                break
    rest = [k for k in range(len(sizes)) if k not in inside]
    layout = plan_arena([sizes[k] for k in rest], [intervals[k] for k in rest])
    offsets = np.zeros(max(1, len(sizes)), np.int64)
    for k, o in zip(rest, layout.offsets):
        offsets[k] = o
    return Placement(outputs, inside, offsets, max(layout.total, 1))


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
