"""Saving and loading compiled graphs: no torch.export and no egglog at load time.

A `.lum` file is a zip archive:
    meta.json            format name and version, input/output names, frontend metadata
    graph.json           the optimized HLIR, one entry per node in topological order
    weights.safetensors  every tensor constant, by name (bf16 stored as its uint16 bits)
    kernels.cu           the generated CUDA C, when the renderer is available
Loading needs NumPy, sympy, ml_dtypes and safetensors (and CuPy for device="cuda").
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from luminal.errors import LuminalError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker

FORMAT = "luminal-compiled"
VERSION = 1


class SaveFormatError(LuminalError):
    """A .lum file that is corrupt, truncated, or of another format version."""


# --- node args as JSON ---------------------------------------------------------------------
def encode_arg(value, weights: dict[str, np.ndarray]):
    if value is None:
        return None
    if isinstance(value, bool):
        return {"b": value}
    if isinstance(value, int):
        return {"i": value}
    if isinstance(value, float):
        return {"f": value.hex()}
    if isinstance(value, str):
        return {"s": value}
    if isinstance(value, DType):
        return {"dtype": value.short}
    if isinstance(value, (tuple, list)):
        return {"t": [encode_arg(v, weights) for v in value]}
    if isinstance(value, ConstantArray):
        weights[value.name] = value.array
        return {"weight": value.name}
    if isinstance(value, ShapeTracker):
        return {"view": {
            "shape": [str(d) for d in value.shape],
            "strides": [str(d) for d in value.strides],
            "offset": str(value.offset),
            "mask": None if value.mask is None else [[str(lo), str(hi)] for lo, hi in value.mask],
        }}
    if hasattr(value, "free_symbols"):
        return {"dim": str(value)}
    raise LuminalError(f"cannot save a node argument of type {type(value).__name__}: {value!r}")


def decode_arg(value, weights):
    if value is None:
        return None
    (tag, v), = value.items()
    if tag == "b":
        return bool(v)
    if tag == "i":
        return int(v)
    if tag == "f":
        return float.fromhex(v)
    if tag == "s":
        return v
    if tag == "dtype":
        return DType.of(v)
    if tag == "t":
        return tuple(decode_arg(x, weights) for x in v)
    if tag == "weight":
        if v not in weights:
            raise SaveFormatError(f"weight {v!r} is missing from weights.safetensors")
        return ConstantArray(weights[v], v)
    if tag == "view":
        dims = lambda xs: tuple(_dim(x) for x in xs)  # noqa: E731
        mask = None if v["mask"] is None else tuple((_dim(lo), _dim(hi)) for lo, hi in v["mask"])
        return ShapeTracker(dims(v["shape"]), dims(v["strides"]), _dim(v["offset"]), mask)
    if tag == "dim":
        return _dim(v)
    raise SaveFormatError(f"unknown argument tag {tag!r} in graph.json")


def _dim(text: str):
    return int(text) if text.lstrip("-").isdigit() else sym.parse(text)  # strides may be negative


# --- whole graphs ----------------------------------------------------------------------------
def encode_graph(outputs: list[Node]) -> tuple[dict, dict[str, np.ndarray]]:
    order = toposort(outputs)
    index = {id(n): i for i, n in enumerate(order)}
    weights: dict[str, np.ndarray] = {}
    nodes = [
        {
            "op": n.op.title,
            "dtype": n.dtype.short,
            "shape": [str(d) for d in n.shape],
            "src": [index[id(s)] for s in n.src],
            "arg": encode_arg(n.arg, weights),
        }
        for n in order
    ]
    return {"nodes": nodes, "outputs": [index[id(n)] for n in outputs]}, weights


def decode_graph(data: dict, weights) -> list[Node]:
    built: list[Node] = []
    for i, entry in enumerate(data["nodes"]):
        try:
            src = tuple(built[j] for j in entry["src"])
            node = Node(Op.from_name(entry["op"]), DType.of(entry["dtype"]),
                        tuple(_dim(d) for d in entry["shape"]), src, decode_arg(entry["arg"], weights))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise SaveFormatError(f"graph.json node {i} is malformed: {exc}") from None
        built.append(node)
    return [built[i] for i in data["outputs"]]


def _weights_bytes(weights: dict[str, np.ndarray]) -> tuple[bytes, dict[str, str]]:
    from safetensors.numpy import save

    stored, dtypes = {}, {}
    for name, arr in weights.items():
        dt = DType.of(arr.dtype)
        dtypes[name] = dt.short
        stored[name] = np.ascontiguousarray(arr.view(np.uint16) if dt is DType.BF16 else arr)
    return (save(stored) if stored else b""), dtypes


def save_compiled(compiled, path, meta: dict | None = None) -> Path:
    """Write `compiled` (a CompiledGraph) to `path` (conventionally `*.lum`)."""
    path = Path(path)
    graph, weights = encode_graph(compiled.outputs)
    blob, weight_dtypes = _weights_bytes(weights)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "name": compiled.name,
        "inputs": [{"name": n.arg, "dtype": n.dtype.short, "shape": [str(d) for d in n.shape]} for n in compiled.inputs],
        "output_names": list(compiled.output_names),
        "weight_dtypes": weight_dtypes,
        "frontend": meta or {},
    }
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("meta.json", json.dumps(header, indent=1))
        zf.writestr("graph.json", json.dumps(graph))
        zf.writestr("weights.safetensors", blob)
        try:
            source = compiled.cuda_source()
        except LuminalError:
            source = None
        if source:
            zf.writestr("kernels.cu", source)
    return path


def read_archive(path) -> tuple[dict, list[Node], dict[str, Node]]:
    """(meta, outputs, inputs by name) of a `.lum` file, with clear errors for bad files."""
    path = Path(path)
    if not path.exists():
        raise SaveFormatError(f"{path}: no such file")
    try:
        with zipfile.ZipFile(path) as zf:
            meta = json.loads(zf.read("meta.json"))
            if meta.get("format") != FORMAT:
                raise SaveFormatError(f"{path} is not a luminal compiled model (format {meta.get('format')!r})")
            if meta.get("version") != VERSION:
                raise SaveFormatError(
                    f"{path} was written in format version {meta.get('version')}; this luminal reads version {VERSION}"
                )
            graph = json.loads(zf.read("graph.json"))
            blob = zf.read("weights.safetensors")
    except zipfile.BadZipFile:
        raise SaveFormatError(f"{path} is not a luminal compiled model (not a zip archive, or truncated)") from None
    except KeyError as exc:
        raise SaveFormatError(f"{path} is incomplete: {exc.args[0]}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SaveFormatError(f"{path} has a corrupt header: {exc}") from None
    weights = {}
    if blob:
        from safetensors.numpy import load

        try:
            raw = load(blob)
        except Exception as exc:  # safetensors raises its own error types
            raise SaveFormatError(f"{path}: weights.safetensors is corrupt: {exc}") from None
        for name, arr in raw.items():
            stored_as = meta.get("weight_dtypes", {}).get(name)
            weights[name] = arr.view(DType.BF16.numpy) if stored_as == DType.BF16.short else arr
    outputs = decode_graph(graph, weights)
    inputs = {n.arg: n for n in toposort(outputs) if n.op is Op.INPUT}
    return meta, outputs, inputs


def load(path, device: str = "cpu"):
    """Load a compiled model saved with `.save()`; runs with NumPy (CuPy on a GPU) only."""
    from luminal.compiler import CompiledGraph, Report, make_runtime

    meta, outputs, by_name = read_archive(path)
    inputs = [by_name[i["name"]] for i in meta["inputs"] if i["name"] in by_name]
    report = Report(name=meta.get("name", "graph"), notes=[f"loaded from {path}"])
    compiled = CompiledGraph(inputs, outputs, meta["output_names"], make_runtime(outputs, device), report)
    compiled.frontend_meta = meta.get("frontend", {})
    return compiled
