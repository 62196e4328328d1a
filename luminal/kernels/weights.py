"""Weights on a device once per process, shared by every compiled graph and recompile (README:
"Weights once").

`DEVICE_WEIGHTS.get(launcher, weight)`: a torch CUDA tensor (or the host copy of one) is taken by
DLPack, keyed by the tensor's identity and version; any other weight is uploaded once, keyed by the
memory its array views, so arrays over the same memory share one copy. An entry lives while some
array registered under its key does: that array keeps the memory from reuse, so a key never names
other data. A weight changed in place after compiling is not seen (a torch tensor gets a new version).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from luminal.runtime.torch_arrays import bits_of, torch_source


class DeviceWeights:
    def __init__(self):
        self._entries: dict[tuple, list] = {}  # key -> [device array, registered arrays alive]
        self._lock = threading.RLock()  # reentrant: a finalizer may run inside `get` (gc)
        self.uploads = 0  # host-to-device copies made
        self.shared = 0  # device arrays taken from torch CUDA tensors by DLPack (no copy)

    def key(self, launcher, array: np.ndarray, tensor=None) -> tuple:
        if tensor is None and launcher.resident:
            tensor = torch_source(array)
        if tensor is not None and tensor.device.type == "cuda":
            return (launcher.weights_key, "torch", tensor.untyped_storage().data_ptr(), tensor.storage_offset(),
                    tuple(tensor.shape), tuple(tensor.stride()), str(tensor.dtype), tensor._version)
        return (launcher.weights_key, array.__array_interface__["data"][0], array.shape, array.strides, array.dtype.str)

    def get(self, launcher, weight):
        """The device array of `weight` (a `ConstantArray` or a host array), registered while it lives."""
        source = getattr(weight, "source", None)
        tensor = source.tensor if source is not None and launcher.resident else None
        tensor = tensor if tensor is not None and tensor.device.type == "cuda" else None
        array = None if tensor is not None else getattr(weight, "array", weight)  # a host trip only if needed
        key = self.key(launcher, array, tensor)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = [self._place(launcher, array, key, tensor), 0]
            entry[1] += 1
        weakref.finalize(weight, self._release, key)
        return entry[0]

    def _place(self, launcher, array, key: tuple, tensor=None):
        if key[1] == "torch":  # the torch CUDA tensor itself, by DLPack
            bits, bf16 = bits_of((tensor if tensor is not None else torch_source(array)).detach())
            with launcher.on_stream():
                dev = launcher.xp.from_dlpack(bits)
            self.shared += 1
            return dev.view(np.uint16) if bf16 else dev
        self.uploads += 1
        return launcher.upload(array)

    def _release(self, key) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)

    def nbytes(self) -> int:
        """Bytes of the device copies held (DLPack views of torch tensors included)."""
        with self._lock:
            return sum(int(e[0].nbytes) for e in self._entries.values())


DEVICE_WEIGHTS = DeviceWeights()
