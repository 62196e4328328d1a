"""NumPy <-> torch, bf16 included: the one place the two meet, importable without torch.

NumPy has no bfloat16 of its own (luminal's is ml_dtypes'), and torch's `.numpy()` refuses
bf16: a bf16 tensor crosses as its int16 bits, viewed as bfloat16 on the other side. torch is
imported only when a torch tensor is at hand, never at luminal import time.

A torch tensor on a GPU that becomes a weight is held as a `DeviceTensorHost` (shape and dtype
now, values later): the kernel runtime on "cuda" takes the tensor itself by DLPack
(`luminal.kernels.weights`), and the values cross to the host only if a host runtime reads them.
A GPU tensor crosses to the host at most once per process, not once per compile: its host copy
is kept (keyed by the tensor's storage, offset, shape, strides, dtype and version) while that
copy is alive, and `torch_source(copy)` names the tensor it came from.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from luminal.hlir.dtypes import DType, is_bfloat16


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
    """A torch tensor as a NumPy array (sharing memory when it is on the CPU; bf16 as ml_dtypes').
    A GPU tensor's host copy is made once and reused while it lives (see the module docstring)."""
    t = t.detach()
    if t.device.type != "cpu":
        return _host_copy(t)
    bits, bf16 = bits_of(t)
    arr = bits.numpy()
    return arr.view(DType.BF16.numpy) if bf16 else arr


class _Borrowed:
    """A CPU tensor's memory by the array interface: NumPy keeps this object, and the tensor, alive."""

    def __init__(self, t, dtype: np.dtype):
        self.tensor = t
        self.__array_interface__ = {"shape": tuple(t.shape), "typestr": dtype.str, "data": (t.data_ptr(), False),
                                    "strides": None, "version": 3}


_NUMPY_OF: dict = {}  # torch dtype -> NumPy dtype


def borrow(t) -> np.ndarray:
    """A CPU tensor as a NumPy array for the length of one call (a copy if it is not contiguous):
    `torch_to_numpy` without `Tensor.numpy()`'s lasting side effect, which marks the tensor's
    storage non-resizable for good (FSDP2 frees and re-allocates its gathered parameters by
    resizing their storage, and fails on a parameter a compiled graph once read). Nothing that
    outlives the call aliases the array but outputs the C runtime writes into a donated input
    (a backward's saved activation, `kernels/cpu/donation.py`), which keep it alive."""
    import torch

    t = t.detach()
    if t.device.type != "cpu" or t.numel() == 0 or t.is_conj() or t.is_neg():
        return torch_to_numpy(t)
    if not t.is_contiguous():
        t = t.contiguous()  # a copy of its own: no one else's storage is marked
    bits, bf16 = bits_of(t)
    dtype = _NUMPY_OF.get(bits.dtype)
    if dtype is None:
        dtype = _NUMPY_OF[bits.dtype] = torch.empty(0, dtype=bits.dtype).numpy().dtype
    arr = np.asarray(_Borrowed(bits, dtype))
    return arr.view(DType.BF16.numpy) if bf16 else arr


class _HostCopies:
    """Host copies of device tensors: key -> [tensor (held: its memory is not reused meanwhile),
    weak reference to the host copy]; an entry goes with its host copy."""

    def __init__(self):
        self.by_key: dict[tuple, list] = {}
        self.by_address: dict[int, tuple] = {}  # host copy's data address -> key
        self.lock = threading.Lock()
        self.copies = 0  # device-to-host copies made

    def key(self, t) -> tuple:
        return (str(t.device), t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()),
                str(t.dtype), t._version)

    def get(self, t) -> np.ndarray:
        key = self.key(t)
        with self.lock:
            entry = self.by_key.get(key)
            host = entry[1]() if entry is not None else None
            if host is not None:
                return host
        bits, bf16 = bits_of(t)
        host = bits.cpu().numpy()
        host = host.view(DType.BF16.numpy) if bf16 else host
        host.flags.writeable = False  # shared by every caller until the tensor changes
        address = host.__array_interface__["data"][0]
        with self.lock:
            self.copies += 1
            self.by_key[key] = [t, weakref.ref(host)]
            self.by_address[address] = key
        weakref.finalize(host, self._drop, key, address)
        return host

    def _drop(self, key, address) -> None:
        with self.lock:
            entry = self.by_key.get(key)
            if entry is not None and entry[1]() is None:
                del self.by_key[key]
            if self.by_address.get(address) == key:
                del self.by_address[address]

    def source(self, array: np.ndarray):
        """The device tensor `array` (or a view of all of it) is the host copy of, else None."""
        address = array.__array_interface__["data"][0]
        with self.lock:
            key = self.by_address.get(address)
            entry = self.by_key.get(key) if key is not None else None
        if entry is None or tuple(entry[0].shape) != array.shape:
            return None
        return entry[0]


HOST_COPIES = _HostCopies()


def _host_copy(t) -> np.ndarray:
    return HOST_COPIES.get(t)


class DeviceTensorHost:
    """The host side of a torch tensor on a GPU, as a weight (`ConstantArray`) holds it: shape and
    dtype at once, the values copied to the host (once per process and version: `HOST_COPIES`)
    only when something on the host reads them. A GPU runtime takes `tensor` itself (DLPack)."""

    def __init__(self, t):
        self.tensor = t
        self.shape = tuple(int(d) for d in t.shape)
        self.dtype = DType.BF16.numpy if str(t.dtype) == "torch.bfloat16" else np.dtype(str(t.dtype).split(".")[-1])

    def materialize(self) -> np.ndarray:
        return HOST_COPIES.get(self.tensor)

    def __array__(self, dtype=None, copy=None):
        a = self.materialize()
        return a if dtype is None else a.astype(dtype)


def device_host(t) -> DeviceTensorHost | None:
    """A tensor's `DeviceTensorHost` if it lives on a GPU (any non-CPU device), else None."""
    t = t.detach()
    if t.device.type == "cpu":
        return None
    try:
        return DeviceTensorHost(t)
    except TypeError:  # a dtype NumPy does not know: the host conversion says what is wrong
        return None


def torch_source(array: np.ndarray):
    """The torch device tensor whose host copy `array` is (see the module docstring), else None."""
    return HOST_COPIES.source(array)


def numpy_to_torch(a: np.ndarray):
    """A NumPy array as a CPU torch tensor (sharing memory unless `a` is read-only)."""
    import torch

    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a)  # torch tensors are writable; 0-d stays 0-d (np.ascontiguousarray would not)
    if is_bfloat16(a.dtype):
        return bf16_of_bits(torch.from_numpy(a.view(np.int16)))
    return torch.from_numpy(a)
