"""Runtimes that execute an HLIR graph: the NumPy reference runtime is the specification."""

from luminal.runtime import fused_ops  # noqa: E402,F401 - registers the fused ops' NumPy impls
from luminal.runtime.binding import bind_inputs
from luminal.runtime.numpy_runtime import NumpyRuntime

__all__ = ["NumpyRuntime", "bind_inputs"]
