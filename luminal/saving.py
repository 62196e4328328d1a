"""Saving and loading compiled graphs: no torch.export and no egglog at load time.

A `.lum` file is a zip archive:
    meta.json            format name and version, input/output names, frontend metadata
    graph.json           the optimized HLIR, one entry per node in topological order
    weights.safetensors  every tensor constant, by name (bf16 stored as its uint16 bits)
    kernels.cu           the generated CUDA C, when the renderer is available
Loading needs NumPy, sympy, ml_dtypes and safetensors (and CuPy for device="cuda").

`save(path, weights="seeded")` stores no weight bytes: each constant becomes a spec (shape,
dtype, seed, mean, std) in meta.json, and loading regenerates it deterministically (NumPy's
PCG64, the same bits on every machine) as uniform noise of that mean and std. For benchmarking
models too big to ship (a 1B-parameter Llama is 4 GB of f32): the graph and kernels are exact,
the weights are random but reproducible. Seeded are the float constants of at least `SEED_MIN`
elements (smaller ones, such as rope frequencies, are stored exactly), or exactly the constants
`weight_specs={name: {"mean": m, "std": s}}` names, with those statistics (the arrays are then
never read, so placeholders such as lazily allocated `np.zeros` do).

Version 2 added seeded weights; version 1 files still load.
"""

from __future__ import annotations

import hashlib
import json
import weakref
import zipfile
import zlib
from pathlib import Path

import numpy as np

from luminal.errors import LuminalError
from luminal.hlir import symbolic as sym
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import POINTWISE, ConstantArray, Expr, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker

FORMAT = "luminal-compiled"
VERSION = 2
READABLE = (1, 2)
WEIGHT_MODES = ("embed", "seeded")
SEED_MIN = 4096  # elements: smaller float constants are stored exactly even with weights="seeded"


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
    if isinstance(value, Expr):  # a FusedElementwise expression: [op, dtype, operands, arg]
        return {"expr": [value.op.title, value.dtype.short, [encode_arg(e, weights) for e in value.src],
                         encode_arg(value.arg, weights)]}
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
        items = tuple(decode_arg(x, weights) for x in v)
        return _legacy_expr(items) if items[1:2] and isinstance(items[1], DType) else items
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
    if tag == "expr":
        op, dtype, src, arg = v
        if op not in _EXPR_OPS:
            raise SaveFormatError(f"unknown op {op!r} in a FusedElementwise expression")
        return Expr(_EXPR_OPS[op], DType.of(dtype), tuple(decode_arg(e, weights) for e in src), decode_arg(arg, weights))
    raise SaveFormatError(f"unknown argument tag {tag!r} in graph.json")


_EXPR_OPS = {op.title: op for op in POINTWISE | {Op.INPUT, Op.CONSTANT}}


def _legacy_expr(items: tuple) -> Expr:
    """A FusedElementwise expression as files before `Expr` wrote it (operands already decoded):
    ("in", dtype, slot), ("const", dtype, value), (op name, dtype, *operands)."""
    kind, dtype, *rest = items
    if kind in ("in", "const"):
        return Expr(Op.INPUT if kind == "in" else Op.CONSTANT, dtype, (), rest[0])
    op = Op.__members__.get(kind)
    if op not in POINTWISE or not all(isinstance(e, Expr) for e in rest):
        raise SaveFormatError(f"malformed FusedElementwise expression {items!r}")
    return Expr(op, dtype, tuple(rest))


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


def weight_spec(name: str, array: np.ndarray, stats: dict | None = None, seed: int = 0) -> dict:
    """What `weights="seeded"` stores for one constant: shape, dtype, seed, mean and std."""
    if stats is None:
        values = np.asarray(array, np.float64) if array.dtype.kind in "fc" or array.dtype == DType.BF16.numpy else None
        if values is None:
            raise LuminalError(f"weight {name!r} ({array.dtype}) cannot be seeded: only float constants can")
        stats = {"mean": float(values.mean()) if values.size else 0.0, "std": float(values.std()) if values.size else 0.0}
    return {"shape": list(array.shape), "dtype": DType.of(array.dtype).short, "seed": (zlib.crc32(name.encode()) + seed) % 2**32,
            "mean": float(stats["mean"]), "std": float(stats["std"])}


_SEEDED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # spec -> array, while someone holds it


def seeded_weight(spec: dict) -> np.ndarray:
    """The array a seeded weight spec stands for: uniform noise with the spec's mean and std.
    Models loaded side by side (a prefill and a decode graph) share one array per spec."""
    key = json.dumps(spec, sort_keys=True)
    cached = _SEEDED.get(key)
    if cached is not None:
        return cached
    array = _generate(spec)
    array.flags.writeable = False
    _SEEDED[key] = array
    return array


def _generate(spec: dict) -> np.ndarray:
    rng = np.random.default_rng(spec["seed"])
    shape = tuple(spec["shape"])
    half_width = np.float32(spec["std"] * np.sqrt(3.0))  # the std of U(-a, a) is a / sqrt(3)
    values = rng.random(shape, dtype=np.float32)
    values *= 2 * half_width
    values += np.float32(spec["mean"]) - half_width
    return values.astype(DType.of(spec["dtype"]).numpy, copy=False)


def save_compiled(compiled, path, meta: dict | None = None, weights: str = "embed",
                  weight_specs: dict | None = None, archs: tuple[str, ...] = ()) -> Path:
    """Write `compiled` (a CompiledGraph) to `path` (conventionally `*.lum`).

    `weights`: "embed" (safetensors) or "seeded" (specs only; see the module docstring).
    `archs`: e.g. ("sm_90",): also store the kernels as cubins built here with NVRTC, so that
    `load(device="cuda")` on such a GPU compiles nothing."""
    if weights not in WEIGHT_MODES:
        raise LuminalError(f"weights={weights!r}: choose one of {WEIGHT_MODES}")
    path = Path(path)
    graph, arrays = encode_graph(compiled.outputs)
    specs = {}
    if weights == "seeded":
        if weight_specs is not None:
            unknown = sorted(set(weight_specs) - set(arrays))
            if unknown:
                raise LuminalError(f"weight_specs names constants the graph does not have: {unknown[:5]}")
            seeded = set(weight_specs)
        else:  # big float constants; small ones (rope frequencies, masks, ...) stay exact
            seeded = {n for n, a in arrays.items() if a.size >= SEED_MIN and (a.dtype.kind == "f" or a.dtype == DType.BF16.numpy)}
        specs = {n: weight_spec(n, arrays[n], (weight_specs or {}).get(n)) for n in sorted(seeded)}
        arrays = {n: a for n, a in arrays.items() if n not in specs}
    blob, weight_dtypes = _weights_bytes(arrays)
    header = {
        "format": FORMAT,
        "version": VERSION,
        "name": compiled.name,
        "inputs": [{"name": n.arg, "dtype": n.dtype.short, "shape": [str(d) for d in n.shape]} for n in compiled.inputs],
        "output_names": list(compiled.output_names),
        "weight_dtypes": weight_dtypes,
        "weight_specs": specs,
        "frontend": meta or {},
    }
    try:
        source = compiled.cuda_source()
    except LuminalError:
        source = None
    cubins = {}
    if source:
        header["kernels_sha1"] = hashlib.sha1(source.encode()).hexdigest()
        if archs:
            from luminal.kernels.nvrtc import compile_cuda

            cubins = {arch: compile_cuda(source, arch).binary for arch in archs}
    header["cubins"] = sorted(cubins)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        zf.writestr("meta.json", json.dumps(header, indent=1))
        zf.writestr("graph.json", json.dumps(graph))
        zf.writestr("weights.safetensors", blob, compress_type=zipfile.ZIP_STORED)
        if source:
            zf.writestr("kernels.cu", source)
        for arch, binary in cubins.items():
            zf.writestr(f"kernels.{arch}.cubin", binary)
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
            if meta.get("version") not in READABLE:
                raise SaveFormatError(
                    f"{path} was written in format version {meta.get('version')}; this luminal reads version "
                    f"{VERSION} (and older: {', '.join(map(str, READABLE[:-1]))})"
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
    for name, spec in meta.get("weight_specs", {}).items():
        try:
            weights[name] = seeded_weight(spec)
        except (KeyError, TypeError, ValueError) as exc:
            raise SaveFormatError(f"{path}: the seeded weight spec of {name!r} is malformed: {exc}") from None
    outputs = decode_graph(graph, weights)
    inputs = {n.arg: n for n in toposort(outputs) if n.op is Op.INPUT}
    return meta, outputs, inputs


def load(path, device: str = "cpu"):
    """Load a compiled model saved with `.save()`; runs with NumPy (CuPy on a GPU) only.
    An unknown `device`, or one this machine cannot run, raises DeviceError before any reading."""
    from luminal import devices
    from luminal.compiler import CompiledGraph, Report

    entry = devices.require(device)
    meta, outputs, by_name = read_archive(path)
    inputs = [by_name[i["name"]] for i in meta["inputs"] if i["name"] in by_name]
    report = Report(name=meta.get("name", "graph"), notes=[f"loaded from {path}"])
    options = {}
    if entry.runs_kernels:
        from luminal.kernels.plan import KernelPlan

        plan = KernelPlan.build(outputs)
        same = meta.get("kernels_sha1") == hashlib.sha1(plan.source.encode()).hexdigest()
        if meta.get("kernels_sha1") and not same:
            report.notes.append("the CUDA source rendered here differs from the saved kernels.cu (another luminal version)")
        options = {"plan": plan}
        if same and meta.get("cubins"):
            with zipfile.ZipFile(path) as zf:  # cubins of exactly this source only
                options["binaries"] = {a: zf.read(f"kernels.{a}.cubin") for a in meta["cubins"]}
    runtime = entry.runtime(outputs, **options)
    return CompiledGraph(inputs, outputs, meta["output_names"], runtime, report, device=device,
                         frontend_meta=meta.get("frontend", {}),
                         weight_mode="seeded" if meta.get("weight_specs") else "embed")


def user_outputs(compiled, results: list) -> list:
    """The user outputs of a loaded `CompiledModel` (torch frontend), flat, from `compiled`'s results."""
    meta = getattr(compiled, "frontend_meta", {}) or {}
    if meta.get("frontend") != "torch.export":
        return list(results)
    by_name = dict(zip(compiled.output_names, results))
    flat = []
    for kind, value in meta["user_outputs"]:
        flat.append(value if kind == "value" else by_name[value] if kind == "tensor" else int(by_name[value]))
    return flat


def structured_outputs(compiled, results: list):
    """The user outputs in the model's own structure (a `CausalLMOutputWithPast`, a tuple, ...)
    as torch tensors; needs torch (and the output's container type importable)."""
    import torch
    from torch.utils._pytree import tree_unflatten, treespec_loads

    spec = (getattr(compiled, "frontend_meta", {}) or {}).get("out_spec")
    flat = [torch.from_numpy(np.array(r)) if isinstance(r, np.ndarray) else r for r in user_outputs(compiled, results)]
    return flat if spec is None else tree_unflatten(flat, treespec_loads(spec))
