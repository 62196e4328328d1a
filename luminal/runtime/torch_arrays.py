"""NumPy <-> torch, bf16 included: the one place the two meet, importable without torch.

NumPy has no bfloat16 of its own (luminal's is ml_dtypes'), and torch's `.numpy()` refuses
bf16: a bf16 tensor crosses as its int16 bits, viewed as bfloat16 on the other side. torch is
imported only when a torch tensor is at hand, never at luminal import time.
"""

from __future__ import annotations

import numpy as np

from luminal.hlir.dtypes import DType


def is_torch(value) -> bool:
    """Whether `value` is a torch tensor (checked without importing torch)."""
    return type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "dtype")


def bits_of(t):
    """(`t` as a dtype NumPy and DLPack take, whether it was bf16): bf16 viewed as int16 bits."""
    if str(t.dtype) != "torch.bfloat16":
        return t, False
    import torch

    return t.view(torch.int16), True


def bf16_of_bits(t):
    """The torch bf16 tensor whose bits are the int16 tensor `t` (no copy)."""
    import torch

    return t.view(torch.bfloat16)


def torch_to_numpy(t) -> np.ndarray:
    """A torch tensor as a NumPy array (sharing memory when it is on the CPU; bf16 as ml_dtypes')."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    bits, bf16 = bits_of(t)
    arr = bits.numpy()
    return arr.view(DType.BF16.numpy) if bf16 else arr


def numpy_to_torch(a: np.ndarray):
    """A NumPy array as a CPU torch tensor (sharing memory unless `a` is read-only)."""
    import torch

    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a)  # torch tensors are writable; 0-d stays 0-d (np.ascontiguousarray would not)
    if a.dtype == DType.BF16.numpy:
        return bf16_of_bits(torch.from_numpy(a.view(np.int16)))
    return torch.from_numpy(a)
