"""Reading a model: a path, bytes or a `ModelProto` -> a checked `ModelProto` at opset >= 13.

External data files are resolved relative to the model's folder (pass a path for that).
Models older than opset 13 go through `onnx.version_converter` first; when the converter
cannot upgrade one, the original is imported with the op versions it declares.
"""

from __future__ import annotations

import os

import onnx

from luminal.frontends.onnx.errors import InvalidModelError

MIN_NATIVE_OPSET = 13


def load_model(model, *, check: bool = True) -> tuple[onnx.ModelProto, str | None]:
    """The `ModelProto` of `model` and the folder its external data lives in (or None)."""
    base_dir = None
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "the given bytes")
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise InvalidModelError(f"no ONNX model file at {path!r}")
        with open(path, "rb") as f:
            proto = _parse(f.read(), repr(path))
        base_dir = os.path.dirname(os.path.abspath(path))
        if _has_external_data(proto):
            try:
                onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
            except (OSError, ValueError) as exc:
                raise InvalidModelError(f"{path!r}: cannot read its external data next to the model: {exc}") from None
    else:
        raise InvalidModelError(
            f"luminal.onnx.compile takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}"
        )
    if _has_external_data(proto):
        raise InvalidModelError("the model keeps weights in external data files; pass its path so they can be found")
    if check:
        check_model(proto)
    return proto, base_dir


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    if not data:
        raise InvalidModelError(f"{what} is empty, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InvalidModelError(f"{what} is not an ONNX model (or is truncated): {exc}") from None
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.opset_import:
        raise InvalidModelError(f"{what} is not an ONNX model (or is truncated): no IR version, graph or opset")
    return proto


def _has_external_data(proto: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


def check_model(proto: onnx.ModelProto) -> None:
    try:
        if proto.ByteSize() < 2**31 - 1:
            onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise InvalidModelError(f"the model fails onnx.checker: {str(exc).strip()}") from None
    except Exception as exc:  # noqa: BLE001 - the checker raises bare C++ errors too
        raise InvalidModelError(f"the model fails onnx.checker: {exc}") from None


def default_opset(proto: onnx.ModelProto) -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 0


def upgrade(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    """Convert a model older than opset 13 up to 13; returns (model, note on failure)."""
    version = default_opset(proto)
    if not version or version >= MIN_NATIVE_OPSET:
        return proto, None
    try:
        return onnx.version_converter.convert_version(proto, MIN_NATIVE_OPSET), None
    except Exception as exc:  # noqa: BLE001 - the converter raises bare C++ errors
        return proto, f"onnx.version_converter could not upgrade opset {version} to {MIN_NATIVE_OPSET} ({exc}); imported as is"
