"""Reading a model: a path, bytes or a `ModelProto` -> a checked `ModelProto` at opset >= 13.

External data files are resolved relative to the model's folder (pass a path for that).
Models older than opset 13 go through `onnx.version_converter` first; when the converter
cannot upgrade one, the original is imported with the op versions it declares.
"""

from __future__ import annotations

import os

import onnx

from luminal.frontends.onnx.errors import ExternalDataError, InvalidModelError, UnsupportedOpsetError

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
            load_external_data(proto, base_dir, path)
    else:
        raise InvalidModelError(
            f"luminal.onnx.compile takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}"
        )
    if _has_external_data(proto):
        raise InvalidModelError("the model keeps weights in external data files; pass its path so they can be found")
    check_opset(proto)
    if check:
        check_model(proto)
    return proto, base_dir


def check_opset(proto: onnx.ModelProto) -> None:
    """Refuse a default-domain opset newer than the installed onnx knows (its ops may mean
    something else there; luminal does not guess). Older opsets are upgraded or imported as is."""
    known = onnx.defs.onnx_opset_version()
    version = default_opset(proto)
    if version > known:
        raise UnsupportedOpsetError(
            f"the model declares opset {version} of the default ONNX domain; the installed onnx "
            f"{onnx.__version__} knows opsets up to {known}, and what an op means in a newer opset is "
            f"unknown here: export the model at opset <= {known}, or upgrade onnx and luminal")


def load_external_data(proto: onnx.ModelProto, base_dir: str, path: str) -> None:
    """Read the initializers' external data into `proto`: only regular files inside the model's
    folder (symlinks resolved), each long enough for its tensor; ExternalDataError otherwise."""
    root = os.path.realpath(base_dir)
    for tensor in proto.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        where = f"initializer {tensor.name!r} of {path!r}: external data {location!r}"
        target = os.path.realpath(os.path.join(root, location))
        if not location or os.path.isabs(location) or os.path.commonpath([root, target]) != root:
            raise ExternalDataError(f"{where} is outside the model's folder {root!r}")
        if not os.path.isfile(target):
            raise ExternalDataError(f"{where} is missing (no file {target!r})")
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        except ValueError:
            raise ExternalDataError(f"{where} has a malformed offset or length") from None
        size = os.path.getsize(target)
        if offset < 0 or offset > size or (length >= 0 and offset + length > size):
            raise ExternalDataError(f"{where}: bytes [{offset}, {offset + length}) lie outside its {size} bytes")
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError, OSError, ValueError
        raise ExternalDataError(f"{path!r}: cannot read its external data: {type(exc).__name__}: {exc}") from None


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
