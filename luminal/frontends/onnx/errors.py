"""Errors of the ONNX frontend: every one derives from `OnnxError` (a `LuminalError`)."""

from __future__ import annotations

from luminal.errors import InputError, LuminalError, UnsupportedError


class OnnxError(LuminalError):
    """Base class of the errors `luminal.onnx` raises on purpose."""


class InvalidModelError(OnnxError, ValueError):
    """Not an ONNX model: unreadable, truncated, or rejected by `onnx.checker`."""


class ExternalDataError(InvalidModelError):
    """An initializer's external data file is missing, unreadable, too short, or outside the
    model's folder; names the tensor and the path."""


class UnsupportedOpsetError(OnnxError, UnsupportedError):
    """The model declares an opset newer than the installed onnx knows: what its ops mean
    there is unknown, so luminal refuses it rather than guess."""


class UnsupportedOpsError(OnnxError, UnsupportedError):
    """The model uses ops (or op versions) luminal does not implement; lists every one."""

    def __init__(self, missing: list[tuple[str, str, str, int]]):
        self.missing = missing  # (op_type, domain, node name, opset)
        lines = [f"  {op} (domain {dom or 'ai.onnx'!r}, opset {ver}) at node {name!r}" for op, dom, name, ver in missing]
        kinds = sorted({op for op, *_ in missing})
        super().__init__(f"unsupported ONNX op(s) {kinds} in {len(missing)} node(s):\n" + "\n".join(lines))


class OnnxImportError(OnnxError, UnsupportedError):
    """A supported op used in a way luminal cannot lower (e.g. a data-dependent output shape)."""


class NeedsValue(OnnxImportError):
    """A node needs, at compile time, a value computed from graph inputs (raised internally)."""

    def __init__(self, msg: str, value_name: str):
        super().__init__(msg)
        self.value_name = value_name


class IfNotConvertible(NeedsValue):
    """An If on a run-time condition whose branches turned out not to select element by element
    (different shapes or dtypes, sequences): it runs on the host instead (raised internally).
    `node_key`: the If's first output name (the model hosts the top-level node that is or holds it)."""

    def __init__(self, msg: str, value_name: str, node_key: str):
        super().__init__(msg, value_name)
        self.node_key = node_key


class NeedsShape(NeedsValue):
    """A node needs, at compile time, the static shape of a value computed from graph inputs:
    the model compiles per shape of those inputs (raised internally)."""


class OnnxInputError(OnnxError, InputError):
    """Wrong input names, count, shapes or dtypes at call time."""
