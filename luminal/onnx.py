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

InputError = OnnxInputError

__all__ = [
    "Backend", "BackendRep", "ExternalDataError", "IOInfo", "InputError", "InvalidModelError", "OnnxError",
    "OnnxImportError", "OnnxInputError", "OnnxModel", "UnsupportedOpsError", "UnsupportedOpsetError", "compile",
    "supported_ops",
]
