"""Running a kernel plan: the CPU emulator (`cuda-emulator`) or CuPy (`cuda`).

`KernelRuntime` walks the plan's launches: binds symbolic dims from the inputs, allocates each
node's buffer when its first launch runs, passes dims as `long long`, frees buffers after their
last reader, and raises `IndexOutOfRange` if a gather/scatter kernel set the error flag.
"""

from __future__ import annotations

import numpy as np

from luminal.errors import IndexOutOfRange, LuminalError
from luminal.hlir import symbolic as sym
from luminal.kernels.arena import plan_arena
from luminal.kernels.plan import KernelPlan
from luminal.runtime.binding import bind_inputs


class EmulatorLauncher:
    """Buffers are NumPy arrays; kernels run on the CPU through the emulation header."""

    def __init__(self, source: str, schedule: int | None = None):
        from luminal.kernels.emulator import build

        self.module = build(source)
        self.xp = np
        self.schedule = schedule  # thread order within a block: 0 forward, 1 reverse, 2 shuffled

    def upload(self, array: np.ndarray):
        return np.ascontiguousarray(array)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def launch(self, name, grid, block, args):
        self.module.launch(name, grid=(grid,), block=(block,), args=args, schedule=self.schedule)

    def download(self, buf) -> np.ndarray:
        return buf


class CupyLauncher:
    """Buffers are CuPy arrays on the current device; kernels compiled by NVRTC through CuPy."""

    def __init__(self, source: str):
        try:
            import cupy
        except ImportError:
            raise LuminalError("device 'cuda' needs CuPy: pip install 'luminal[cuda]'") from None
        self.xp = cupy
        arch = "".join(map(str, cupy.cuda.Device().compute_capability))
        self.module = cupy.RawModule(code=source, options=("-std=c++17", f"-arch=sm_{arch}", "-ftz=true",
                                                           "--device-as-default-execution-space"))
        self.functions = {}

    def upload(self, array):
        return self.xp.asarray(array)

    def empty(self, shape, dtype):
        return self.xp.empty(shape, dtype)

    def launch(self, name, grid, block, args):
        fn = self.functions.get(name) or self.functions.setdefault(name, self.module.get_function(name))
        fn((grid,), (block,), tuple(args))

    def download(self, buf) -> np.ndarray:
        return self.xp.asnumpy(buf)


class KernelRuntime:
    """Runs a kernel plan. Intermediates live in one arena laid out by liveness (per binding of
    the symbolic dims, cached); outputs get buffers of their own; weights are uploaded once."""

    def __init__(self, outputs, device: str, schedule: int | None = None):
        self.plan = KernelPlan.build(outputs)
        self.device = device
        if device == "cuda":
            self.launcher = CupyLauncher(self.plan.source)
        else:
            self.launcher = EmulatorLauncher(self.plan.source, schedule)
        self.inputs = self.plan.inputs
        self.weights = {id(w): self.launcher.upload(w.arg.array) for w in self.plan.weights}  # once
        keep = {id(n) for n in self.plan.outputs}
        self.intermediates, first = [], {}
        for i, k in enumerate(self.plan.launches):
            if id(k.output) not in keep and id(k.output) not in first:
                first[id(k.output)] = i
                self.intermediates.append(k.output)
        self.intervals = [(first[id(n)], self.plan.last_use.get(id(n), first[id(n)])) for n in self.intermediates]
        self.layouts: dict[tuple, tuple] = {}  # binding -> (layout, shapes)
        self.arena = None

    def _layout(self, bindings):
        key = tuple(sorted(bindings.items()))
        if key not in self.layouts:
            shapes = [tuple(sym.evaluate(d, bindings) for d in n.shape) for n in self.intermediates]
            sizes = [int(np.prod(s, dtype=np.int64)) * n.dtype.itemsize for s, n in zip(shapes, self.intermediates)]
            self.layouts[key] = (plan_arena(sizes, self.intervals), shapes)
        return self.layouts[key]

    def __call__(self, feeds: dict) -> list[np.ndarray]:
        arrays, bindings = bind_inputs(self.inputs, feeds)
        return self.run(arrays, bindings)

    def run(self, arrays, bindings) -> list[np.ndarray]:
        xp = self.launcher.xp
        buffers = dict(self.weights)
        for n in self.inputs:
            buffers[id(n)] = self.launcher.upload(arrays[n.arg])
        layout, shapes = self._layout(bindings)
        if self.arena is None or self.arena.size < layout.total:
            self.arena = self.launcher.empty((max(layout.total, 1),), np.uint8)
        for n, offset, shape in zip(self.intermediates, layout.offsets, shapes):
            nbytes = int(np.prod(shape, dtype=np.int64)) * n.dtype.itemsize
            buffers[id(n)] = self.arena[offset : offset + nbytes].view(n.dtype.numpy).reshape(shape)
        err = xp.zeros(1, np.int32)
        keep = {id(n) for n in self.plan.outputs}
        for i, k in enumerate(self.plan.launches):
            out = buffers.get(id(k.output))
            if out is None:  # a graph output: a buffer of its own, handed to the caller
                shape = tuple(sym.evaluate(d, bindings) for d in k.output.shape)
                out = buffers[id(k.output)] = self.launcher.empty(shape, k.output.dtype.numpy)
            grid = sym.evaluate(k.grid, bindings)
            if grid > 0 and out.size > 0:
                args = [out, *(buffers[id(b)] for b in k.inputs)]
                if k.uses_error_flag:
                    args.append(err)
                args += [np.int64(bindings[s]) for s in k.symbols]
                self.launcher.launch(k.name, grid, k.block, args)
            for b in k.inputs:
                if self.plan.last_use.get(id(b)) == i and id(b) not in keep and id(b) not in self.weights:
                    buffers.pop(id(b), None)
        if int(err[0]):
            raise IndexOutOfRange("a Gather/Scatter index was out of range (flagged by a kernel)")
        return [np.array(self.launcher.download(buffers[id(n)])) for n in self.plan.outputs]


def make_runtime(outputs, device: str) -> KernelRuntime:
    return KernelRuntime(outputs, device)
