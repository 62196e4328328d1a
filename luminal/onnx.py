"""`luminal.onnx`: the public face of the ONNX frontend (see `luminal/frontends/onnx/`)."""

from luminal.frontends.onnx import (  # noqa: F401
    Backend,
    BackendRep,
    ExternalDataError,
    InvalidModelError,
    IOInfo,
    OnnxError,
    OnnxImportError,
    OnnxInputError,
    OnnxModel,
    UnsupportedOpsError,
    UnsupportedOpsetError,
    compile,
    supported_ops,
)
from luminal.frontends.onnx.ops_rnn import MAX_STEPS, TooManySteps  # noqa: F401 - recurrence="unroll"'s limit

InputError = OnnxInputError

__all__ = [
    "MAX_STEPS", "Backend", "BackendRep", "ExternalDataError", "IOInfo", "InputError", "InvalidModelError", "OnnxError",
    "OnnxImportError", "OnnxInputError", "OnnxModel", "TooManySteps", "UnsupportedOpsError", "UnsupportedOpsetError",
    "compile", "supported_ops",
]
