"""Random numbers: Philox 4x32-10 in NumPy (the specification of `Op.PHILOX`) and the per-call seed.

Philox (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
the Random123 library) is counter-based: the random words are a pure function of a 128-bit
counter and a 64-bit key, so every element of a tensor is computed independently, on any device,
in any order, with the same bits. It is the generator torch uses on CUDA. The C version every
kernel dialect uses is `luminal.kernels.render.cstyle.PHILOX_C`; both are checked against
Random123's known-answer vectors (`tests/core/test_random.py`).
"""

from __future__ import annotations

import sys

import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # round multipliers
W0, W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)  # key bumps (golden ratio, sqrt(3) - 1)
LO32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)
ROUNDS = 10


def philox4x32(ctr, key, rounds: int = ROUNDS) -> tuple:
    """Philox 4x32-`rounds` of 4 counter words and 2 key words (arrays or ints holding unsigned
    32-bit values; they broadcast): the 4 output words, as uint64 arrays holding 32-bit values."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in ctr)
    k0, k1 = (np.asarray(k, np.uint64) for k in key)
    for r in range(rounds):
        if r:  # the key is bumped before every round but the first
            k0, k1 = (k0 + W0) & LO32, (k1 + W1) & LO32
        p0, p1 = M0 * c0, M1 * c2  # 32 x 32 -> 64-bit products: exact in uint64
        c0, c1, c2, c3 = (p1 >> SHIFT32) ^ c1 ^ k0, p1 & LO32, (p0 >> SHIFT32) ^ c3 ^ k1, p0 & LO32
    return c0, c1, c2, c3


def philox_uniform(seed, counter) -> np.ndarray:
    """`Op.PHILOX`: f32 uniform in [0, 1) of int64 `seed` and `counter` (broadcast together):
    key (lo32(seed), hi32(seed)), counter (lo32(counter), hi32(counter), 0, 0), both read as
    unsigned; the first output word x gives (x >> 8) * 2**-24 (24 random bits, exact in f32)."""
    s = np.asarray(seed).astype(np.int64, copy=False).view(np.uint64)
    c = np.asarray(counter).astype(np.int64, copy=False).view(np.uint64)
    x = philox4x32((c & LO32, c >> SHIFT32, 0, 0), (s & LO32, s >> SHIFT32))[0]
    out = (x >> np.uint64(8)).astype(np.float32) * np.float32(2.0**-24)
    return np.broadcast_to(out, np.broadcast_shapes(s.shape, c.shape))


def draw_seed() -> np.ndarray:
    """A fresh seed for one call of a graph with random ops: a 63-bit integer drawn from torch's
    default generator when torch is loaded (so `torch.manual_seed(s)` makes runs repeat and
    torch's random stream advances, as an eager random op would advance it), else from NumPy's
    global generator (`np.random.seed(s)`)."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "randint"):
        value = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
    else:
        value = int(np.random.randint(0, 2**63 - 1, dtype=np.int64))
    return np.array(value, np.int64)
