"""Runtimes that execute an HLIR graph: the NumPy reference runtime is the specification."""

from luminal.runtime.binding import bind_inputs
from luminal.runtime.numpy_runtime import NumpyRuntime

__all__ = ["NumpyRuntime", "bind_inputs"]
