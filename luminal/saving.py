"""Saving and loading compiled graphs: no torch.export and no egglog at load time.

A `.lum` file is a zip archive:
    meta.json            format name and version, input/output names, frontend metadata
    graph.json           the optimized HLIR, one entry per node in topological order
    weights.safetensors  every tensor constant, by name (bf16 stored as its uint16 bits)
    kernels.cu           the generated CUDA C, when the renderer is available
Loading needs NumPy, sympy and ml_dtypes (and CuPy for device="cuda"); saving needs safetensors.

`save(path, weights="seeded")` stores no weight bytes: each constant becomes a spec (shape,
dtype, seed, mean, std) in meta.json, and loading regenerates it deterministically (NumPy's
PCG64, the same bits on every machine) as uniform noise of that mean and std. For benchmarking
models too big to ship (a 1B-parameter Llama is 4 GB of f32): the graph and kernels are exact,
the weights are random but reproducible. Seeded are the float constants of at least `SEED_MIN`
elements (smaller ones, such as rope frequencies, are stored exactly), or exactly the constants
`weight_specs={name: {"mean": m, "std": s}}` names, with those statistics (the arrays are then
never read, so placeholders such as lazily allocated `np.zeros` do).

Version 2 added seeded weights; version 1 files still load. Reading a file (untrusted data) is
`luminal/archive.py`.
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
import zipfile
import zlib
from pathlib import Path

import numpy as np

from luminal.errors import LuminalError
from luminal.hlir import symbolic as sym
from luminal.hlir import verify
from luminal.hlir.dtypes import DType, is_bfloat16
from luminal.hlir.ops import POINTWISE, ConstantArray, Expr, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker

FORMAT = "luminal-compiled"
VERSION = 2
READABLE = (1, 2)
WEIGHT_MODES = ("embed", "seeded")
SEED_MIN = 4096  # elements: smaller float constants are stored exactly even with weights="seeded"
# What a file may make `load` allocate beyond its own bytes: the elements of all seeded weights
# together, and of any one node of static shape (LUMINAL_MAX_ELEMENTS overrides; 2**33 = 32 GiB
# of f32). The JSON members are bounded too (archive.py: a deflated member can inflate 1000-fold).
MAX_ELEMENTS = int(os.environ.get("LUMINAL_MAX_ELEMENTS", 2**33))
MAX_ARG_DEPTH = 900  # nesting of one node's argument in graph.json (a FusedElementwise expression)


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
        w = weights[v]
        return w if isinstance(w, ConstantArray) else ConstantArray(w, v)  # a bound weight: the caller's own
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
    """A dim (or stride, offset, mask bound: those may be negative) as graph.json writes it."""
    if not isinstance(text, str):
        raise SaveFormatError(f"a dim must be a string in graph.json, got {type(text).__name__}")
    if text.lstrip("-").isascii() and text.lstrip("-").isdigit() and len(text) < 20:
        value = int(text)
        if abs(value) >= sym.MAX_INT:
            raise SaveFormatError(f"dim {text} is beyond 2**63")
        return value
    try:
        return sym.parse_expr(text)
    except LuminalError as exc:
        raise SaveFormatError(str(exc)) from None


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
    """The output nodes of graph.json's `data`, every node held to its op's rules (`verify`)."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("outputs"), list):
        raise SaveFormatError("graph.json must hold a list of nodes and a list of outputs")
    built: list[Node] = []
    checked: set = set()  # what check_node reads of nodes already checked: repeated layers are checked once
    ops: dict[str, Op] = {}
    values: dict[str, tuple] = {}  # an argument's JSON text -> (its value,): repeated layers decode each once
    shapes: dict[tuple, tuple] = {}
    for i, entry in enumerate(data["nodes"]):
        what = f"graph.json node {i}"
        try:
            if not isinstance(entry, dict) or not isinstance(entry.get("src"), list) or not isinstance(entry.get("shape"), list):
                raise TypeError("not an object with a src and a shape list")
            what += f" ({entry['op']})"
            if not all(type(j) is int and 0 <= j < i for j in entry["src"]):
                raise ValueError(f"sources {entry['src']} must be indices of earlier nodes")
            src = tuple(built[j] for j in entry["src"])
            arg = entry["arg"]
            spelled = repr(arg)  # exact: the same text decodes to the same (immutable) value
            value = values.get(spelled)
            if value is None:
                nests = isinstance(arg, dict) and ("t" in arg or "expr" in arg)  # the tags decode_arg recurses into
                if nests and _depth(arg) > MAX_ARG_DEPTH:  # decoding and hashing recurse (in C, too)
                    raise ValueError(f"its argument is nested more than {MAX_ARG_DEPTH} deep")
                value = values[spelled] = (decode_arg(arg, weights),)
            shape_text = tuple(entry["shape"])
            shape = shapes.get(shape_text)
            if shape is None:
                shape = shapes[shape_text] = tuple(_dim(d) for d in shape_text)
            op = ops.get(entry["op"]) if isinstance(entry["op"], str) else None
            if op is None:
                op = ops[entry["op"]] = Op.from_name(entry["op"])
            node = Node(op, DType.of(entry["dtype"]), shape, src, value[0])
            # check_node reads the node (spelled exactly as the file does) and its sources' dtypes and
            # shapes (by value only: through sym.equal, len and slices)
            seen = (entry["op"], entry["dtype"], shape_text, spelled, tuple((s.dtype, s.shape) for s in src))
            if seen not in checked:
                verify.check_node(node)
                checked.add(seen)
            static = [d for d in node.shape if isinstance(d, int)]
            if len(static) == len(node.shape) and _numel(static) > MAX_ELEMENTS:
                raise ValueError(f"shape {node.shape} has more than {MAX_ELEMENTS} elements (LUMINAL_MAX_ELEMENTS)")
        except SaveFormatError as exc:
            raise SaveFormatError(f"{what}: {exc}") from None
        except (LuminalError, KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
            raise SaveFormatError(f"{what} is malformed: {type(exc).__name__}: {exc}") from None
        except RecursionError:
            raise SaveFormatError(f"{what} is nested too deeply") from None
        built.append(node)
    outs = data["outputs"]
    if not outs or not all(type(i) is int and 0 <= i < len(built) for i in outs):
        raise SaveFormatError(f"graph.json outputs {outs[:8]} must be indices of its {len(built)} nodes")
    return [built[i] for i in outs]


def _depth(value) -> int:
    """How deeply JSON lists and objects nest in `value` (iteratively)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


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
        values = np.asarray(array, np.float64) if array.dtype.kind in "fc" or is_bfloat16(array.dtype) else None
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


def check_spec(spec) -> int:
    """The element count of a seeded weight spec from a file, or ValueError if it is malformed."""
    if not isinstance(spec, dict) or set(spec) != {"shape", "dtype", "seed", "mean", "std"}:
        raise ValueError("a seeded weight spec has exactly the keys shape, dtype, seed, mean, std")
    shape, seed = spec["shape"], spec["seed"]
    if not isinstance(shape, list) or len(shape) > 64 or not all(type(d) is int and 0 <= d < sym.MAX_INT for d in shape):
        raise ValueError(f"shape {shape!r} must be a list of at most 64 dims >= 0")
    if type(seed) is not int or not 0 <= seed < 2**32:
        raise ValueError(f"seed {seed!r} must be an integer in [0, 2**32)")
    if not all(type(spec[k]) in (int, float) and np.isfinite(spec[k]) for k in ("mean", "std")) or spec["std"] < 0:
        raise ValueError("mean and std must be finite numbers, std >= 0")
    if not isinstance(spec["dtype"], str) or not DType.of(spec["dtype"]).is_float:
        raise ValueError(f"dtype {spec['dtype']!r} must name a float dtype")
    return _numel(shape)


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
    `load(device="cuda", trust_binaries=True)` on such a GPU compiles nothing. The file then
    carries machine code: `load` runs it only when its caller says it trusts the file."""
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
            seeded = {n for n, a in arrays.items() if a.size >= SEED_MIN and (a.dtype.kind == "f" or is_bfloat16(a.dtype))}
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
        header["kernels_sha256"] = hashlib.sha256(source.encode()).hexdigest()
        if archs:
            from luminal.kernels.nvrtc import compile_cuda

            cubins = {arch: compile_cuda(source, arch).binary for arch in archs}
    header["cubins"] = sorted(cubins)
    header["cubins_sha256"] = {arch: hashlib.sha256(binary).hexdigest() for arch, binary in sorted(cubins.items())}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        zf.writestr("meta.json", json.dumps(header, indent=1))
        zf.writestr("graph.json", json.dumps(graph))
        zf.writestr("weights.safetensors", blob, compress_type=zipfile.ZIP_STORED)
        if source:
            zf.writestr("kernels.cu", source)
        for arch, binary in cubins.items():
            zf.writestr(f"kernels.{arch}.cubin", binary)
    return path
