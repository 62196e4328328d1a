"""Reading a `.lum` archive (`luminal/saving.py` defines the format): the file is untrusted data.

`luminal.load` and the compile cache's entries read through `read_archive`. Only a regular file
is opened (`open_regular`: a FIFO would block forever, /dev/zero never ends), each zip member is
held to what it may inflate to before a byte of it is allocated (`read_member`, `_bound`), the
weights are parsed by hand into read-only views of their one buffer (`_safetensors`: every offset
and size checked; the safetensors library would copy each tensor again), and every node is
verified as it is decoded (`saving.decode_graph`). Cubins, machine code, are read only for a
caller who trusts the file (`saved_cubins`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
import zlib
from pathlib import Path

import numpy as np

from luminal.errors import LuminalError
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Node, Op, toposort
from luminal.saving import (
    FORMAT,
    MAX_ELEMENTS,
    READABLE,
    VERSION,
    SaveFormatError,
    _numel,
    check_spec,
    decode_graph,
    seeded_weight,
)

# A deflated member may inflate this much (real ones: 10-25x; a zip bomb ~1000x), or to MIN_BOUND;
# weights.safetensors only to what its weights' nodes declare (stored, it is the file's own bytes).
MAX_RATIO = 100
MAX_JSON_BYTES = 1 << 28
MIN_BOUND = 1 << 20
MAX_CUBIN_BYTES = 1 << 28
CHUNK = 1 << 20


def read_archive(path, bound: dict[str, ConstantArray] | None = None,
                 digests: dict[str, str] | None = None) -> tuple[dict, list[Node], dict[str, Node]]:
    """(meta, outputs, inputs by name) of a `.lum` file, with clear errors for bad files.
    `bound`: weights the file references by name without storing them (the compile cache's
    references to the caller's weights); each is held to its node's shape and dtype like any other.
    `digests`, when given, receives the sha256 of each member read (the compile cache checks them).

    A file is data, never code: only a regular file is opened (a FIFO or a device would block or
    never end), dims are read by `symbolic.parse_expr`'s grammar, every node is held to its op's
    rules, every weight must have its node's shape and dtype, and what loading allocates is
    bounded by the file's bytes (each member by what it may inflate to, see `_bound`), plus
    `MAX_ELEMENTS` for seeded weights and static shapes."""
    path = Path(path)
    try:
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            meta = _read_json(zf, "meta.json", digests)
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                fmt = meta.get("format") if isinstance(meta, dict) else None
                raise SaveFormatError(f"{path} is not a luminal compiled model (format {fmt!r})")
            if meta.get("version") not in READABLE:
                raise SaveFormatError(
                    f"{path} was written in format version {meta.get('version')}; this luminal reads version "
                    f"{VERSION} (and older: {', '.join(map(str, READABLE[:-1]))})"
                )
            graph = _read_json(zf, "graph.json", digests)
            info = zf.getinfo("weights.safetensors")
            declared = _declared_weight_bytes(meta, graph)
            limit = declared + (info.compress_size if info.compress_type == zipfile.ZIP_STORED else 0)
            blob = read_member(zf, info, limit, digests, f"the {declared} bytes its weights' nodes declare")
    except SaveFormatError as exc:
        raise SaveFormatError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    except RecursionError:
        raise SaveFormatError(f"{path} has a corrupt header: JSON nested too deeply") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise SaveFormatError(f"{path} is not a luminal compiled model (not a zip archive, or truncated: {exc})") from None
    except KeyError as exc:
        raise SaveFormatError(f"{path} is incomplete: {exc.args[0]}") from None
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise SaveFormatError(f"{path} has a corrupt header: {type(exc).__name__}: {exc}") from None
    except OSError as exc:
        raise SaveFormatError(f"{path}: cannot read it: {exc}") from None
    try:
        _check_meta(meta)
        weights = _read_weights(meta, blob, graph)
        clash = sorted(set(weights) & set(bound or {}))
        if clash:
            raise SaveFormatError(f"weight {clash[0]!r} is both stored and bound by the caller")
        weights.update(bound or {})
        outputs = decode_graph(graph, weights)
        if len(meta["output_names"]) != len(outputs):
            raise SaveFormatError(f"meta.json names {len(meta['output_names'])} outputs, graph.json has {len(outputs)}")
    except SaveFormatError as exc:
        raise SaveFormatError(f"{path}: {exc}") from None
    declared = [n for n in toposort(outputs) if n.op is Op.INPUT]
    inputs = {n.arg: n for n in declared}
    if len(inputs) != len(declared):
        raise SaveFormatError(f"{path}: graph.json declares an input name twice (with different shapes or dtypes)")
    return meta, outputs, inputs


def open_regular(path):
    """`path` opened for reading (binary), or SaveFormatError naming it when it is not a regular
    file: a FIFO would block the open or the read forever, /dev/zero never ends, a directory
    or a device is no archive. Checked before opening (opening some devices does something) and
    on the open file (the path may have changed in between); the open never blocks."""
    try:
        kind = _kind(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
            kind = _kind(os.fstat(fd).st_mode)
            if kind is not None:
                os.close(fd)
    except FileNotFoundError:
        raise SaveFormatError(f"{path}: no such file") from None
    except OSError as exc:
        raise SaveFormatError(f"{path}: cannot read it: {exc}") from None
    if kind is not None:
        raise SaveFormatError(f"{path} is not a regular file (it is {kind}): refusing to read it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _kind(mode: int) -> str | None:
    """None for a regular file, else what `mode` says the path is."""
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo | str, limit: int, digests: dict | None = None,
                justified: str = "") -> bytearray:
    """The bytes of member `info`, refused (SaveFormatError naming it) before anything is
    allocated when it claims more than `limit` bytes, and as soon as more come than it claims;
    read in chunks into one buffer of the claimed size (`ZipFile.read` holds twice that)."""
    if isinstance(info, str):
        info = zf.getinfo(info)
    if info.file_size > limit:
        raise SaveFormatError(f"{info.filename} claims {info.file_size} bytes (at most {limit}"
                              f"{': ' + justified if justified else ''})")
    data = bytearray(info.file_size)
    view, got = memoryview(data), 0
    with zf.open(info) as f:
        while chunk := f.read(min(CHUNK, info.file_size - got + 1)):
            if got + len(chunk) > info.file_size:
                raise SaveFormatError(f"{info.filename} holds more than the {info.file_size} bytes it claims")
            view[got:got + len(chunk)] = chunk
            got += len(chunk)
    view.release()
    if got != info.file_size:
        raise SaveFormatError(f"{info.filename} holds {got} bytes, it claims {info.file_size}")
    if digests is not None:
        digests[info.filename] = hashlib.sha256(data).hexdigest()
    return data


def _bound(info: zipfile.ZipInfo, most: int) -> int:
    """What a member may inflate to: its own bytes stored, else `MAX_RATIO` times them (at
    least `MIN_BOUND`); never more than `most`."""
    if info.compress_type == zipfile.ZIP_STORED:
        return min(info.compress_size, most)
    return min(max(MIN_BOUND, MAX_RATIO * info.compress_size), most)


def _read_json(zf: zipfile.ZipFile, name: str, digests: dict | None = None):
    info = zf.getinfo(name)
    return json.loads(read_member(zf, info, _bound(info, MAX_JSON_BYTES), digests))


def _weight_holders(graph) -> dict[str, tuple]:
    """Weight name -> (shape, dtype) of the graph.json node holding it, as the file spells them."""
    holders = {}
    for entry in graph.get("nodes", []) if isinstance(graph, dict) and isinstance(graph.get("nodes"), list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("arg"), dict) and isinstance(entry["arg"].get("weight"), str):
            holders[entry["arg"]["weight"]] = (entry.get("shape"), entry.get("dtype"))
    return holders


def _declared_weight_bytes(meta, graph) -> int:
    """The most bytes weights.safetensors may hold: each stored weight at its node's shape and
    its dtype (a node over `MAX_ELEMENTS`, or spelled wrong, justifies nothing; it is refused
    later), plus its safetensors header."""
    stored = meta.get("weight_dtypes") if isinstance(meta, dict) else None
    if not isinstance(stored, dict) or not stored:
        return 0
    holders = _weight_holders(graph)
    total = 8 + 4096  # the header's length, its padding and metadata
    for name, dtype in stored.items():
        shape = holders.get(name, (None,))[0]
        try:
            dims = [int(d) for d in shape if isinstance(d, str) and d.isascii() and d.isdigit() and len(d) < 20]
            if len(dims) != len(shape) or _numel(dims) > MAX_ELEMENTS:
                dims = [0]
            total += _numel(dims) * DType.of(dtype).numpy.itemsize + 2 * len(str(name)) + 128 + 24 * len(dims)
        except (LuminalError, TypeError, ValueError):
            total += 2 * len(str(name)) + 128
    return total


def _check_meta(meta: dict) -> None:
    """The fields of meta.json that loading reads, with their types; the output spec (torch's
    pytree) may name no type that deserializing would import (a defaultdict's factory)."""
    kinds = {"inputs": list, "output_names": list, "weight_dtypes": dict, "weight_specs": dict, "frontend": dict,
             "cubins": list, "cubins_sha256": dict}
    for key, kind in kinds.items():
        if key in meta and not isinstance(meta[key], kind):
            raise SaveFormatError(f"meta.json {key!r} must be a {kind.__name__}")
    if "output_names" not in meta or not all(isinstance(n, str) for n in meta["output_names"]):
        raise SaveFormatError("meta.json needs output_names, a list of strings")
    if "inputs" not in meta:
        raise SaveFormatError("meta.json needs inputs")
    for entry in meta["inputs"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise SaveFormatError(f"meta.json inputs entry {str(entry)[:80]} needs a name")
    spec = meta.get("frontend", {}).get("out_spec")
    if spec is not None:
        _check_pytree_spec(spec)


def _check_pytree_spec(spec) -> None:
    """A torch pytree spec (`treespec_dumps`) whose loading imports nothing: torch's
    `treespec_loads` imports the module a defaultdict's factory or an enum (`__enum__`) names."""
    def walk(value):
        if isinstance(value, dict):
            if "__enum__" in value or "default_factory_module" in value or value.get("type") == "collections.defaultdict":
                raise SaveFormatError("meta.json frontend out_spec names a defaultdict or an enum, whose loading "
                                      "would import a module named in the file")
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and value[:1] in "[{":  # a node's context is JSON inside the JSON
            try:
                walk(json.loads(value))
            except ValueError:
                pass  # not JSON: a plain string

    if not isinstance(spec, str):
        raise SaveFormatError("meta.json frontend out_spec must be a string")
    try:
        walk(json.loads(spec))
    except ValueError as exc:
        raise SaveFormatError(f"meta.json frontend out_spec is not JSON: {exc}") from None
    except RecursionError:
        raise SaveFormatError("meta.json frontend out_spec is nested too deeply") from None


def _read_weights(meta: dict, blob: bytes, graph) -> dict[str, np.ndarray]:
    """The weights of a file: stored ones exactly as meta.json's weight_dtypes says they were
    stored (bf16 as uint16 bits); seeded ones within MAX_ELEMENTS, generated only when a node of
    graph.json holds them with the spec's very shape and dtype."""
    weights: dict[str, np.ndarray] = {}
    stored_dtypes = meta.get("weight_dtypes", {})
    if blob:
        for name, arr in _safetensors(blob).items():
            stored_as = stored_dtypes.get(name)
            if stored_as == DType.BF16.short and arr.dtype == np.uint16:
                arr = arr.view(DType.BF16.numpy)
            elif stored_as is None or arr.dtype.str != _numpy_str(stored_as):
                raise SaveFormatError(f"weight {name!r} is stored as {arr.dtype}, meta.json says {stored_as!r}")
            weights[name] = arr
    missing = sorted(set(stored_dtypes) - set(weights))
    if missing:
        raise SaveFormatError(f"weight(s) {missing[:5]} are listed in meta.json but missing from weights.safetensors")
    total = 0
    for name, spec in meta.get("weight_specs", {}).items():
        try:
            total += check_spec(spec)
        except (LuminalError, TypeError, ValueError) as exc:
            raise SaveFormatError(f"the seeded weight spec of {name!r} is malformed: {exc}") from None
        if total > MAX_ELEMENTS:
            raise SaveFormatError(f"the seeded weights up to {name!r} hold {total} elements, more than this machine "
                                  f"allows (LUMINAL_MAX_ELEMENTS={MAX_ELEMENTS})")
        if name in weights:
            raise SaveFormatError(f"weight {name!r} is both stored and seeded")
    holders = _weight_holders(graph)
    for name, spec in meta.get("weight_specs", {}).items():
        if name not in holders:
            continue  # no node holds it: never generated
        if holders[name] != ([str(d) for d in spec["shape"]], spec["dtype"]):
            raise SaveFormatError(f"the seeded weight {name!r} is {spec['dtype']}{spec['shape']}, "
                                  f"its node {holders[name][1]}{holders[name][0]}")
        weights[name] = seeded_weight(spec)
    return weights


_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
                       "I8": "i1", "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}


def _safetensors(blob: bytearray) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file, read-only views of `blob` (safetensors' own reader
    copies each tensor once more); every offset held to the blob, every size to its shape."""
    def corrupt(why):
        return SaveFormatError(f"weights.safetensors is corrupt: {why}")

    if len(blob) < 8:
        raise corrupt("shorter than its header's length")
    n = int.from_bytes(blob[:8], "little")
    if n > len(blob) - 8 or n > MAX_JSON_BYTES:
        raise corrupt(f"a header of {n} bytes in {len(blob)}")
    try:
        header = json.loads(bytes(blob[8:8 + n]))
    except (ValueError, RecursionError) as exc:
        raise corrupt(f"its header is not JSON: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise corrupt("its header is not an object")
    base, size = 8 + n, len(blob) - 8 - n
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(_SAFETENSORS_DTYPES[spec["dtype"]])
            shape, (begin, end) = spec["shape"], spec["data_offsets"]
            if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                    and type(begin) is int and type(end) is int):
                raise TypeError("shape and data_offsets must be integers >= 0")
        except (KeyError, TypeError, ValueError) as exc:
            raise corrupt(f"tensor {name!r} has a malformed entry ({type(exc).__name__}: {exc})") from None
        count = _numel(shape)
        if not 0 <= begin <= end <= size or end - begin != count * dtype.itemsize:
            raise corrupt(f"tensor {name!r} ({spec['dtype']}{shape}) has bytes [{begin}, {end}) of {size}")
        arr = np.frombuffer(blob, dtype, count, base + begin) if count else np.empty(0, dtype)
        if count and arr.ctypes.data % dtype.itemsize:  # kernels read aligned elements
            arr = arr.copy()
        arr = arr.reshape(shape)
        arr.flags.writeable = False
        out[name] = arr
    return out


def _numpy_str(short: str) -> str | None:
    try:
        return DType.of(short).numpy.str
    except (LuminalError, TypeError, ValueError):
        return None


def saved_cubins(path, meta: dict, source: str) -> dict[str, bytes] | None:
    """The cubins stored in `path` when they were built from exactly `source` (the CUDA source
    rendered here) and each one's bytes match the sha256 meta.json holds for it; else None.
    Cubins are code: `luminal.load` reads them only when its caller trusts the file's binaries."""
    hashes = meta.get("cubins_sha256")
    if not meta.get("cubins") or not isinstance(hashes, dict) or meta.get("kernels_sha256") != hashlib.sha256(source.encode()).hexdigest():
        return None  # files without sha256s (format 2 before it) compile from source
    binaries = {}
    try:
        with open_regular(path) as f, zipfile.ZipFile(f) as zf:
            for arch in meta["cubins"]:
                info = zf.getinfo(f"kernels.{arch}.cubin")
                binary = bytes(read_member(zf, info, _bound(info, MAX_CUBIN_BYTES)))
                if hashes.get(arch) != hashlib.sha256(binary).hexdigest():
                    raise SaveFormatError(f"{path}: kernels.{arch}.cubin does not match its sha256 in meta.json")
                binaries[arch] = binary
    except SaveFormatError as exc:
        raise SaveFormatError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, zlib.error) as exc:
        raise SaveFormatError(f"{path}: cannot read its cubins: {exc}") from None
    return binaries
