"""Large output buffers kept for reuse, as a caching allocator keeps them.

A compiled graph's outputs are new arrays every call. In training, the forward's outputs are
the activations saved for the backward, all freed together when the backward ends; glibc then
returns the top of its heap to the kernel (it trims), and the next forward takes the same
amount back as fresh pages, each a page fault and a page zeroed (eager frees its activations
one by one through the backward, each reused before the heap's top is free; the README's
"Training" gives the figures). So an output of at least `MIN_BYTES` is carved from a block of
this pool, and its block comes back to the pool when the array is gone (not before: a view or a
torch tensor of the array keeps the array, so the block, alive).

How an array tells its block it is gone: the array is a view of a flat array made over a
memoryview of the block, so NumPy's views of either name the flat array (not the block) as their
base, and `weakref.finalize` on the flat array gives the block back when its last reference
goes. The pool keeps at most `LUMINAL_OUTPUT_POOL_MB` (default 512) of free blocks, dropping the
oldest first; 0 turns it off.
"""
from __future__ import annotations

import collections
import math
import os
import threading
import weakref

import numpy as np

MIN_BYTES = 1 << 20  # smaller outputs come from malloc's free lists without faulting
GRAIN = 1 << 16  # block sizes are multiples of this, so a repeated shape finds its block


def _limit() -> int:
    try:
        return max(0, int(os.environ.get("LUMINAL_OUTPUT_POOL_MB", "512"))) << 20
    except ValueError:
        raise ValueError(f"LUMINAL_OUTPUT_POOL_MB={os.environ['LUMINAL_OUTPUT_POOL_MB']!r} is not a whole number "
                         "of MiB") from None


class OutputPool:
    def __init__(self, limit: int):
        self.limit = limit
        self._free: collections.OrderedDict[int, list[np.ndarray]] = collections.OrderedDict()  # size -> blocks
        self._free_bytes = 0
        self._lock = threading.Lock()
        self.reused = 0  # blocks handed out again (tests read these)
        self.made = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialized C-contiguous array, from a pooled block when it is large."""
        dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize  # (not np.prod, several times slower: every call runs this)
        if nbytes < MIN_BYTES or not self.limit:
            return np.empty(shape, dtype)
        size = -(-nbytes // GRAIN) * GRAIN
        with self._lock:
            blocks = self._free.get(size)
            block = blocks.pop() if blocks else None
            if block is not None:
                self._free_bytes -= size
                if not blocks:
                    del self._free[size]
                self.reused += 1
            else:
                self.made += 1
        if block is None:
            block = np.empty(size, np.uint8)
        # the flat array's base is the memoryview, not an array, so NumPy names the flat array (not
        # the block) as the base of every view of it, the reshaped result's included
        flat = np.frombuffer(memoryview(block)[:nbytes], dtype)
        weakref.finalize(flat, self._give_back, block).atexit = False
        return flat.reshape(shape)

    def _give_back(self, block: np.ndarray) -> None:
        size = block.nbytes
        if size > self.limit:
            return
        with self._lock:
            self._free.setdefault(size, []).append(block)
            self._free.move_to_end(size)
            self._free_bytes += size
            while self._free_bytes > self.limit:  # the sizes given back longest ago go first
                old, blocks = next(iter(self._free.items()))
                blocks.pop(0)
                self._free_bytes -= old
                if not blocks:
                    del self._free[old]

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._free_bytes = 0

    @property
    def free_bytes(self) -> int:
        return self._free_bytes


POOL = OutputPool(_limit())
