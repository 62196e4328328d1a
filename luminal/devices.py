"""The device registry: every device luminal runs on is one entry of `DEVICES`.

    entry = devices.get("cuda")        # DeviceError for an unknown name, listing the known ones
    entry.require()                    # DeviceError saying what is missing here and how to get it
    device = devices.resolve("cuda", precision="float64")  # an entry point's: required, at a precision
    runtime = device.runtime(outputs)  # the runtime that executes the optimized graph

An entry knows its runtime factory, its I/O protocol (`io`: "numpy" — NumPy arrays in and out,
the frontends convert torch tensors — or "dlpack" — the runtime takes torch/CuPy tensors itself,
zero-copy on a GPU, and hands torch tensors back to a torch caller), whether this machine can run
it (and why not), the compiler that builds its code, its launcher (kernel devices) and its
`arithmetic` (`luminal.precision`: its default precision, and a compile's own). An entry point
(`compile_graph`, `luminal.compile`, the Dynamo backend, `luminal.onnx.compile`, `load`) resolves
its `device` argument once (`resolve`) and passes the `Device` down; code above the runtimes asks
the entry, and no other module compares device strings.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace

from luminal.errors import DeviceError
from luminal.precision import KERNELS, REFERENCE, Arithmetic, C


@dataclass(frozen=True)
class Device:
    name: str
    doc: str
    io: str  # "numpy" or "dlpack" (see the module docstring)
    compiler: str  # what builds the code this device runs
    phase: str  # the report's name for building the runtime
    factory: Callable  # (device, outputs, *, plan, binaries, schedule, graphs) -> runtime
    missing: Callable[[], str | None]  # why this machine cannot run the device (and the fix), or None
    arithmetic: Arithmetic = REFERENCE  # its default precision, a compile's own, its rounding
    launcher: Callable | None = None  # (source, *, schedule, binaries) -> launcher, for kernel-plan devices
    before_compile: Callable[[], None] | None = None  # starts what its build needs that needs no graph
    variants: Callable[[], list] | None = None  # its programs' strategy choices on this machine (`luminal.search`)

    def prepare(self) -> None:
        """A compile is about to start: what this device's build needs and can build without the
        graph (the cpu backend's per-machine C objects) starts building in the background while
        the graph is lowered and optimized."""
        if self.before_compile is not None:
            self.before_compile()

    @property
    def runs_kernels(self) -> bool:
        """Whether the device executes the kernel plan (`luminal.kernels.plan`)."""
        return self.launcher is not None

    @property
    def runs_compiled_code(self) -> bool:
        """Whether the device runs code built for the graph (C, CUDA), whose kernels known sizes
        make faster; the NumPy reference runs the same array calls at any size."""
        return self.name != "numpy"

    @property
    def default_precision(self) -> str:
        return self.arithmetic.default

    @property
    def precision(self) -> str:
        """The precision a call starting now computes at: the compile's, else `set_precision`'s,
        else this device's default."""
        return self.arithmetic.precision

    def at_precision(self, precision: str | None) -> Device:
        """This device with its calls fixed at `precision` (OptionError for an unknown one); None:
        this device as it is (following `set_precision`)."""
        arithmetic = self.arithmetic.fixing(precision)
        return self if arithmetic is self.arithmetic else replace(self, arithmetic=arithmetic)

    @property
    def available(self) -> bool:
        return self.missing() is None

    def require(self) -> Device:
        """This entry, or DeviceError naming what this machine lacks for it."""
        why = self.missing()
        if why is not None:
            raise DeviceError(f"device {self.name!r} is not available here: {why}")
        return self

    def runtime(self, outputs, **options):
        """A runtime executing `outputs` (optimized HLIR). `options`: `plan`/`binaries` (a loaded
        model's kernel plan and prebuilt cubins), `schedule`, `graphs` (kernel runtimes only)."""
        self.require()
        return self.factory(self, outputs, **options)


def _numpy_runtime(device, outputs, **_options):
    from luminal.runtime import NumpyRuntime

    return NumpyRuntime(outputs, arithmetic=device.arithmetic)


def _cpu_runtime(device, outputs, artifacts=None, choices=None, tiered=True, **_options):
    from luminal.kernels.cpu.choices import DEFAULT
    from luminal.kernels.cpu.runtime import make

    return make(outputs, artifacts=artifacts, arithmetic=device.arithmetic, choices=choices or DEFAULT, tiered=tiered)


def _cpu_variants() -> list:
    """The `cpu` device's candidate choices here, the default first (`kernels/cpu/choices.py`)."""
    from luminal.kernels.cpu.blas_libs import blas, threads
    from luminal.kernels.cpu.choices import conv_path, variants

    bound = blas()
    return variants(threads(), bound.front_for("luminal") is not None, "luminal" if bound.front else "blas", conv_path(None))


def _cpu_prepare() -> None:
    from luminal.kernels import cpu

    cpu.prepare()


def _kernel_runtime(device, outputs, **options):
    from luminal.kernels.runtime import KernelRuntime

    return KernelRuntime(outputs, device, **options)


def _launcher(cls: str):
    def make(source: str, **options):
        from luminal.kernels import launchers

        return getattr(launchers, cls)(source, **options)

    return make


def _always() -> None:
    return None


def _emulator_missing() -> str | None:
    if shutil.which("g++") is None:
        return "the CUDA emulator builds kernels with g++, which is not on PATH (apt-get install g++)"
    return None


def _cuda_missing() -> str | None:
    try:
        import cupy
    except ImportError:
        return "it needs CuPy: pip install 'luminal[cuda]' (cupy-cuda13x) on a machine with an NVIDIA GPU"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, or a driver too old for this CuPy
        return f"CuPy finds no usable CUDA driver ({type(exc).__name__}: {exc}); install the NVIDIA driver"
    if count < 1:
        return "CuPy sees no CUDA GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)"
    from luminal.kernels.nvrtc import nvrtc_available

    if not nvrtc_available():  # CuPy's own kernels need it too
        return "NVRTC is not installed: pip install nvidia-cuda-nvrtc cuda-bindings (or a CUDA toolkit)"
    return None


DEVICES: dict[str, Device] = {d.name: d for d in (
    Device("numpy", "The NumPy reference runtime: the executable specification every other device is tested against.",
           "numpy", "none (one NumPy expression per op)", "plan", _numpy_runtime, _always),
    Device("cpu", "The default device: the kernel plan in a C dialect (`luminal.kernels.cpu`), OpenMP loops and "
                  "BLAS GEMMs, built by the system C compiler into one shared library per graph, run by one native "
                  "call; without a C compiler it warns once and runs the NumPy reference runtime.",
           "numpy", "the system C compiler (luminal.kernels.cpu.build: cc -O2 -fopenmp -shared)", "build",
           _cpu_runtime, _always, C, before_compile=_cpu_prepare, variants=_cpu_variants),
    Device("cuda", "Generated CUDA C compiled by NVRTC (`luminal.kernels.nvrtc`, cached), loaded and launched "
                   "with CuPy; torch CUDA tensors in and out by DLPack.",
           "dlpack", "NVRTC (luminal.kernels.nvrtc) -> cubin, loaded by cupy.RawModule", "codegen",
           _kernel_runtime, _cuda_missing, KERNELS, _launcher("CupyLauncher")),
    Device("cuda-emulator", "The same generated CUDA C compiled by g++ against the emulation header and run "
                            "on the CPU (CUDA threads as fibers): how CI proves the CUDA path without a GPU.",
           "dlpack", "g++ with luminal/kernels/emulator/cuda_emu.h", "codegen",
           _kernel_runtime, _emulator_missing, KERNELS, _launcher("EmulatorLauncher")),
)}


def get(name: str | Device) -> Device:
    """The registry entry of `name` (a `Device` is itself); DeviceError listing the known devices otherwise."""
    if isinstance(name, Device):
        return name
    entry = DEVICES.get(name) if isinstance(name, str) else None
    if entry is None:
        raise DeviceError(f"unknown device {name!r}; luminal knows {', '.join(repr(d) for d in DEVICES)}")
    return entry


def require(name: str | Device) -> Device:
    """`get(name).require()`: the entry of a device this machine can run, else DeviceError."""
    return get(name).require()


def resolve(device: str | Device, precision: str | None = None) -> Device:
    """What an entry point does once with its `device` argument (a name or a `Device`): the entry,
    runnable here (DeviceError otherwise), at the compile's `precision` (None: following
    `set_precision`; OptionError for an unknown one). Below the entry point, the `Device` travels."""
    entry = device if isinstance(device, Device) else require(device)  # a Device: resolved already
    return entry.at_precision(precision)


def get_precision(device: str | Device = "numpy") -> str:
    """The precision `device`'s calls compute at now: a compile's (a `Device` carries it), else
    `set_precision`'s setting, else the device's default."""
    return get(device).precision
