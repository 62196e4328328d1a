"""`luminal.onnx`: the public face of the ONNX frontend (see `luminal/frontends/onnx/`)."""

from luminal.frontends.onnx import (  # noqa: F401
    Backend,
    BackendRep,
    InvalidModelError,
    IOInfo,
    OnnxError,
    OnnxImportError,
    OnnxInputError,
    OnnxModel,
    UnsupportedOpsError,
    compile,
    supported_ops,
)

InputError = OnnxInputError

__all__ = [
    "Backend", "BackendRep", "IOInfo", "InputError", "InvalidModelError", "OnnxError", "OnnxImportError",
    "OnnxInputError", "OnnxModel", "UnsupportedOpsError", "compile", "supported_ops",
]
