"""The persistent compile cache: an optimized graph stored once, reused by every later process.

    optimized = compile_cache.lookup(key, outputs)   # None on a miss (or a bad entry)
    compile_cache.store(key, outputs, optimized, report)

Where: `<cache root>/graphs/<key>.lum` (`luminal.kernels.cache.cache_dir`: `$LUMINAL_CACHE_DIR`,
else `~/.cache/luminal`), bounded by `$LUMINAL_CACHE_MAX_MB` (1024 MB by default, megabytes,
fractions allowed), least recently used entries pruned first. `LUMINAL_COMPILE_CACHE=0` turns
it off.

The key (`Key.of`) is a sha256 over
- the lowered HLIR graph (every node in topological order: op, dtype, shape, operand
  positions, argument; an input by its name) with each weight (a `ConstantArray`) replaced by
  its *position* among the graph's weights (first use in that order) and its dtype and shape;
- luminal's version, a hash of the source of the code that decides the optimized graph
  (`luminal/egraph/`, `luminal/hlir/`, `saving.py`, this module), egglog's version, the
  device name.
Weight *values* are not part of the key: the egraph treats weights as opaque slots (the
partition abstracts them by dtype and shape, no rule reads their elements), so the optimized
graph is a function of the structure alone. An entry therefore holds no weight bytes: each
weight of the optimized graph is stored as a reference `w<i>` to the i-th weight of the
lowered graph, and a hit re-binds the caller's own `ConstantArray`s (the very objects, so the
result is the node-for-node graph a miss would produce, over the caller's live memory). A
weight a rewrite created (none does today) would be stored by value (`e<i>`). Two models of
one architecture share an entry; a model whose weights changed (values, or new tensors) hits
and runs its current weights: the cache can never serve stale weights.

An entry is a `.lum` file (`luminal.saving`'s format: meta.json, graph.json, an empty or small
weights.safetensors) with a `compile_cache` block in meta.json: the full key (so a foreign or
colliding file is refused), the sha256 of its graph.json and weights.safetensors, and the
miss's rules fired, e-graph size and notes for the report. It is read as untrusted data by
`archive.read_archive` (a regular file only, every member bounded before it is read, every node
verified, dims parsed by the grammar, nothing executed), then checked against the caller's graph
(outputs of the same dtype and shape, inputs that are the caller's own). Anything wrong
(truncated, flipped bytes, another format, another key) is logged at debug level and treated as
a miss, and the rebuilt entry replaces it; a member whose bytes are not the ones written (an
entry edited after the fact: `x*5` in place of `x*2`) warns too (`CacheEntryWarning`). Links
and device artifacts carry the sha256 of their own JSON. These sums catch corruption and edits
by tools that do not know the format, not a deliberate forger: the folder's owner is trusted
(it also holds the compiled C libraries, which are code), see the README's guarantees. Writes
go to a temporary file in the same folder and are renamed into place
(`os.replace`), so concurrent processes only ever see whole entries; the last writer wins
with an identical graph.

A frontend that keys one level up (`frontends/torch/fx_cache`: Dynamo's graph) stores its entry
as a link, `<key>.link.json`: its own key and block, the key of the lowered graph's entry, and
which of its references each of that entry's references is. Read, it is validated like an
entry, then the graph is read from the entry it names; with that one pruned or refused, the
link is a miss.

Not in the key, on purpose: the precision (`set_precision`, a compile's `precision=`: read by
the runtimes at each call, part of neither the optimized graph nor the C or CUDA source),
input/output names outside the graph (the caller
maps them), and weight values (above). Graphs whose rewriting failed or hit `MAX_SECONDS` (a
load-dependent result) are not stored.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from luminal.errors import CacheWarning
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Expr, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker
from luminal.threadflags import gc_paused

LOG = logging.getLogger("luminal")
FOLDER = "graphs"
FORMAT_TAG = 1  # of the compile_cache block; bump when what an entry means changes
CODE = ("egraph", "hlir", "saving.py", "compile_cache.py")  # the source the optimized graph depends on
_context: list[str] = []  # computed once per process


class Uncacheable(Exception):
    """A graph argument the key cannot spell: such a graph is compiled without the cache."""


def enabled() -> bool:
    return os.environ.get("LUMINAL_COMPILE_CACHE", "1") != "0"


def folder() -> Path:
    from luminal.kernels.cache import cache_dir

    return cache_dir(FOLDER)


def context() -> str:
    """luminal's version, the hash of the code that decides the optimized graph, egglog's version."""
    if not _context:
        from importlib.metadata import PackageNotFoundError, version

        from luminal.version import __version__

        try:
            egglog = version("egglog")
        except PackageNotFoundError:
            egglog = "none"
        _context.append(f"luminal {__version__}; code {code_hash(CODE)}; egglog {egglog}; cache {FORMAT_TAG}")
    return _context[0]


@functools.cache
def code_hash(names: tuple[str, ...]) -> str:
    """A hash of the source of these parts of the package (folders or files under luminal/):
    an entry made by other code than this process runs is never used."""
    import luminal

    root = Path(luminal.__file__).parent
    h = hashlib.sha256()
    for name in names:
        path = root / name
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []:
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@dataclass
class Key:
    digest: str  # sha256 hex: the entry's file name
    text: str  # the context line, stored in the entry and compared on read
    weights: list[ConstantArray]  # the lowered graph's weights, in reference order
    inputs: frozenset[int]  # ids of its INPUT nodes

    @staticmethod
    def of(outputs: list[Node], device: str) -> Key:
        """The key of the lowered graph computing `outputs`; Uncacheable if an argument has no spelling."""
        with gc_paused():
            return Key._of(outputs, device)

    @staticmethod
    def _of(outputs: list[Node], device: str) -> Key:
        order = toposort(outputs)
        index: dict[int, int] = {}
        weights: list[ConstantArray] = []
        weight_index: dict[int, int] = {}
        memo: dict = {}
        local: dict = {}  # (op, dtype, shape, arg) -> its spelling: repeated layers spell each once
        parts = []
        for i, n in enumerate(order):
            arg = n.arg
            if isinstance(arg, ConstantArray):
                j = weight_index.get(id(arg))
                if j is None:
                    j = weight_index[id(arg)] = len(weights)
                    weights.append(arg)
                spelled = repr((n.op.value, n.dtype.short, n.shape, "W", j, arg.dtype.str))
            else:
                k = (n.op, n.dtype, n.shape, n._key[4])  # the interning key holds `_key(arg)`
                spelled = local.get(k)
                if spelled is None:
                    spelled = local[k] = repr((n.op.value, n.dtype.short, tuple(_dim(d, memo) for d in n.shape),
                                               _spell(arg, memo)))
            parts.append(f"{spelled} {[index[id(s)] for s in n.src]}")
            index[id(n)] = i
        parts.append(repr([index[id(n)] for n in outputs]))
        from luminal.egraph import attention

        text = f"{context()}; device {device}" + ("" if attention.enabled() else "; fused attention off")
        h = hashlib.sha256(text.encode())
        h.update("\n".join(parts).encode())
        inputs = frozenset(id(n) for n in order if n.op is Op.INPUT)
        return Key(h.hexdigest(), text, weights, inputs)


def _dim(d, memo: dict):
    if type(d) is int:
        return d
    s = memo.get(d)
    if s is None:
        s = memo[d] = ("s", str(d))
    return s


def _spell(v, memo: dict):
    """A node argument as plain, repr-stable data (what `==` conflates kept apart, as `_key` does)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return ("f", v.hex())
    if isinstance(v, DType):
        return ("dtype", v.short)
    if isinstance(v, (tuple, list)):
        return tuple(_spell(x, memo) for x in v)
    if isinstance(v, ShapeTracker):
        mask = None if v.mask is None else tuple((_dim(lo, memo), _dim(hi, memo)) for lo, hi in v.mask)
        return ("view", tuple(_dim(d, memo) for d in v.shape), tuple(_dim(d, memo) for d in v.strides),
                _dim(v.offset, memo), mask)
    if isinstance(v, Expr):
        return ("expr", v.op.value, v.dtype.short, tuple(_spell(e, memo) for e in v.src), _spell(v.arg, memo))
    if hasattr(v, "free_symbols"):
        return _dim(v, memo)
    raise Uncacheable(f"a node argument of type {type(v).__name__}")


# --- reading -------------------------------------------------------------------------------
def read(digest: str, text: str, bound: dict[str, ConstantArray],
         follow: bool = True) -> tuple[dict, list[Node], dict[str, Node]] | None:
    """(meta.json's compile_cache block, optimized outputs, inputs by name) of the entry `digest`
    whose key reads `text`, its references bound to `bound`; None: absent, or refused. Where
    the entry is a link (`write_link`), the graph is read from the entry it names (`follow`)."""
    try:
        path = folder() / f"{digest}.lum"
    except OSError as exc:  # no cache folder can be made (a read-only home): compile without
        LOG.debug("compile cache: unavailable: %s", exc)
        return None
    if not os.path.lexists(path):
        return _read_link(digest, text, bound) if follow else None
    from luminal.archive import read_archive
    from luminal.kernels.cache import touch

    digests: dict[str, str] = {}
    try:
        with gc_paused():
            meta, optimized, inputs = read_archive(path, bound=bound, digests=digests)
        block = _checked_block(meta.get("compile_cache"), text, digest)
        _check_content(block, digests, path)
    except Exception as exc:  # noqa: BLE001 - any bad entry is a miss, rebuilt and replaced
        LOG.debug("compile cache: ignoring %s: %s: %s", path, type(exc).__name__, exc)
        return None
    touch(path)  # the most recently used now
    return block, optimized, inputs


def present(digest: str) -> bool:
    """Whether entry `digest` is in the cache (as a graph or a link): a miss is known without
    binding the caller's weights first."""
    try:
        base = folder()
    except OSError:
        return False
    return (base / f"{digest}.lum").exists() or (base / f"{digest}.link.json").exists()


def _checked_block(block, text: str, digest: str) -> dict:
    """An entry's (or a link's) `compile_cache` block, if it is this key's and well formed; else
    ValueError (the entry is then a miss)."""
    if not isinstance(block, dict) or block.get("key") != text or block.get("digest") != digest:
        raise ValueError("a foreign entry (another key)")
    if not isinstance(block.get("rules_fired", {}), dict) or not isinstance(block.get("notes", []), list):
        raise ValueError("a malformed compile_cache block")
    return block


class CacheEntryWarning(CacheWarning):
    """A compile-cache entry that was changed after it was written (its members do not match
    the sha256s it was stored with): it is ignored, compiled afresh and replaced."""


CONTENT = ("graph.json", "weights.safetensors")  # the members an entry's block holds the sha256 of


def _check_content(block: dict, digests: dict[str, str], path: Path) -> None:
    """ValueError, after a CacheEntryWarning naming the entry, when a member's bytes are not the
    ones written (`_entry`). This catches corruption and edits by tools that do not know the
    block; the cache folder's owner, who can write anything there, is trusted (README)."""
    stored = block.get("content")
    if not isinstance(stored, dict):
        raise ValueError("no sha256s of its members")
    changed = [name for name in CONTENT if stored.get(name) != digests.get(name)]
    if changed:
        import warnings

        warnings.warn(f"luminal compile cache: entry {path} was changed after it was written ({changed[0]} does not "
                      f"match its sha256): ignored, compiled afresh and replaced", CacheEntryWarning, stacklevel=2)
        raise ValueError(f"{changed[0]} was changed after the entry was written")


def _sealed(data: dict) -> dict:
    """`data` (a link's or artifacts' JSON) with the sha256 of its canonical text (sans that field)."""
    import json

    body = {k: v for k, v in data.items() if k != "sha256"}
    return {**body, "sha256": hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()}


def _read_json_file(path: Path, limit: int):
    """The JSON of a cache file: a regular file (a FIFO would block) of at most `limit` bytes."""
    import json

    from luminal.archive import open_regular

    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    return json.loads(data)


MAX_LINK_BYTES = 1 << 24


def _read_link(digest: str, text: str, bound: dict[str, ConstantArray]):
    """`read` of an entry stored as a link: its own block, the graph of the entry it names."""
    import re

    from luminal.kernels.cache import touch

    path = folder() / f"{digest}.link.json"
    if not os.path.lexists(path):
        return None
    try:
        data = _read_json_file(path, MAX_LINK_BYTES)
        if not isinstance(data, dict) or _sealed(data) != data:
            raise ValueError("its sha256 does not match")
        block, target, target_key, bind = (data["compile_cache"], data["target"], data["target_key"], data["bind"])
        _checked_block(block, text, digest)
        if not (isinstance(target, str) and re.fullmatch(r"[0-9a-f]{64}", target) and isinstance(target_key, str)):
            raise ValueError("a malformed target")
        if not isinstance(bind, dict) or not all(isinstance(k, str) and v in bound for k, v in bind.items()):
            raise ValueError("a malformed binding (a reference the caller does not bind)")
    except Exception as exc:  # noqa: BLE001 - any bad entry is a miss, rebuilt and replaced
        LOG.debug("compile cache: ignoring %s: %s: %s", path, type(exc).__name__, exc)
        return None
    found = read(target, target_key, {k: bound[v] for k, v in bind.items()}, follow=False)
    if found is None:  # the graph's entry was pruned or refused: a miss
        return None
    touch(path)
    return block, found[1], found[2]


def lookup(key: Key, outputs: list[Node]) -> tuple[list[Node], dict] | None:
    """(the optimized graph, the miss's report fields) of `key`, or None: absent, or refused."""
    found = read(key.digest, key.text, {f"w{i}": w for i, w in enumerate(key.weights)})
    if found is None:
        return None
    block, optimized, inputs = found
    if len(optimized) != len(outputs) or any(
            o.dtype is not n.dtype or o.shape != n.shape for o, n in zip(optimized, outputs)):
        return refused(key.digest, "its outputs differ from the graph's in dtype or shape")
    stray = [n for n in inputs.values() if id(n) not in key.inputs]
    if stray:
        return refused(key.digest, f"it reads input {stray[0]!r}, which the graph does not have")
    return optimized, {k: block[k] for k in ("rules_fired", "egraph_size", "notes") if k in block}


def refused(digest: str, why: str) -> None:
    LOG.debug("compile cache: ignoring entry %s: %s", digest, why)
    return None


# --- writing -------------------------------------------------------------------------------
def store(key: Key, outputs: list[Node], optimized: list[Node], report) -> Path | None:
    """Write the entry of `key` (atomically) and prune the folder; None when not stored."""
    refs = {id(w): f"w{i}" for i, w in enumerate(key.weights)}
    path = write(key.digest, key.text, refs, optimized, report)
    if path:
        report.stored_key = key  # a frontend's own entry can link to it (`write_link`) instead of repeating the graph
    return path


def write_link(digest: str, text: str, target: Key, bind: dict[str, str], report, extra: dict) -> Path | None:
    """Write an entry whose graph is the stored entry `target`'s: `<digest>.link.json`, its
    block plus the target's key and `bind` (each of the target's references -> one of this
    entry's). A frontend keyed one level up (Dynamo's graph) saves writing the graph twice."""
    import json

    if not storable(report):
        return None
    try:
        from luminal.kernels.cache import prune, size_bound, write_atomic

        block = {"key": text, "digest": digest, "rules_fired": report.rules_fired, "egraph_size": report.egraph_size,
                 "ops_before": report.ops_before, "ops_after": report.ops_after, "notes": list(report.notes), **extra}
        data = {"format": "luminal compile cache link", "compile_cache": block, "target": target.digest,
                "target_key": target.text, "bind": bind}
        directory = folder()
        path = directory / f"{digest}.link.json"
        write_atomic(path, json.dumps(_sealed(data)).encode())
        prune(directory, size_bound(), recent_s=0.0)
        return path
    except Exception as exc:  # noqa: BLE001 - a cache that cannot write is only slower
        LOG.debug("compile cache: link not stored: %s: %s", type(exc).__name__, exc)
        return None


def storable(report) -> bool:
    """Not a fallback (rewriting failed) nor a load-dependent result (a time limit was hit)."""
    return not any(("failed" in n or "MAX_SECONDS" in n) for n in report.notes)


def write(digest: str, text: str, refs: dict[int, str], optimized: list[Node], report,
          extra: dict | None = None) -> Path | None:
    """Write an entry: `optimized` with each weight in `refs` (id of a ConstantArray -> name)
    stored as a reference, any other by value; `extra` joins the compile_cache block."""
    if not storable(report):
        return None
    try:
        with gc_paused():
            data, meta_json = _entry(digest, text, refs, optimized, report, extra or {})
        directory = folder()
        path = directory / f"{digest}.lum"
        fd, tmp = tempfile.mkstemp(prefix=f"{digest}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
                    zf.writestr("meta.json", meta_json)
                    zf.writestr("graph.json", data[0])
                    zf.writestr("weights.safetensors", data[1], compress_type=zipfile.ZIP_STORED)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        from luminal.kernels.cache import prune, size_bound

        prune(directory, size_bound(), recent_s=0.0)  # entries are read whole: pruning one in use is harmless
        return path
    except Exception as exc:  # noqa: BLE001 - a cache that cannot write is only slower
        LOG.debug("compile cache: not stored: %s: %s", type(exc).__name__, exc)
        return None


def _text(d, memo: dict) -> str:
    if type(d) is int:
        return str(d)
    s = memo.get(d)
    if s is None:
        s = memo[d] = str(d)
    return s


def _entry(digest: str, text: str, refs: dict[int, str], optimized: list[Node], report,
           extra: dict) -> tuple[tuple[str, bytes], str]:
    import json

    from luminal.saving import FORMAT, VERSION, _weights_bytes, encode_arg

    refs = dict(refs)
    embedded: dict[str, object] = {}
    order = toposort(optimized)
    index = {id(n): i for i, n in enumerate(order)}
    nodes, spelled, dims = [], {}, {}  # spellings of args and dims seen before (repeated layers)
    for n in order:
        if isinstance(n.arg, ConstantArray):
            name = refs.get(id(n.arg))
            if name is None:  # a weight a rewrite (or a frontend) made: stored by value
                name = refs[id(n.arg)] = f"e{len(embedded)}"
                embedded[name] = n.arg.array
            arg = {"weight": name}
        else:
            k = n._key[4]  # `_key(n.arg)`, computed when the node was interned
            arg = spelled.get(k)
            if arg is None:
                arg = spelled[k] = encode_arg(n.arg, {})
        nodes.append({"op": n.op.title, "dtype": n.dtype.short, "shape": [_text(d, dims) for d in n.shape],
                      "src": [index[id(s)] for s in n.src], "arg": arg})
    graph = {"nodes": nodes, "outputs": [index[id(n)] for n in optimized]}
    blob, dtypes = _weights_bytes(embedded)
    graph_json = json.dumps(graph)
    content = {"graph.json": hashlib.sha256(graph_json.encode()).hexdigest(),
               "weights.safetensors": hashlib.sha256(blob).hexdigest()}
    inputs = [n for n in order if n.op is Op.INPUT]
    meta = {"format": FORMAT, "version": VERSION, "name": report.name,
            "inputs": [{"name": n.arg, "dtype": n.dtype.short, "shape": [str(d) for d in n.shape]} for n in inputs],
            "output_names": [f"out{i}" for i in range(len(optimized))], "weight_dtypes": dtypes, "weight_specs": {},
            "frontend": {}, "cubins": [], "cubins_sha256": {},
            "compile_cache": {"key": text, "digest": digest, "references": sorted(set(refs.values()) - set(embedded)),
                              "rules_fired": report.rules_fired, "egraph_size": report.egraph_size,
                              "ops_before": report.ops_before, "ops_after": report.ops_after,
                              "notes": list(report.notes), "content": content, **extra}}
    return (graph_json, blob), json.dumps(meta)


# --- device artifacts: a runtime rebuilt without code generation -----------------------------
ARTIFACT_CODE = ("kernels",)  # the code that made them (plan, renderers, runtimes): hashed into the file
MAX_ARTIFACT_BYTES = 1 << 28
# A runtime may offer `artifacts()`: plain JSON data from which a later process rebuilds it
# without generating code (the `cpu` runtime: its library's cache key and its launch table). It
# is stored beside an entry as `<digest>.<device>.json` with the sha256 of its payload, read as
# untrusted data (parsed, checked against the digest and the sha256), and handed to the device's
# runtime factory as `artifacts=`, which validates it again and generates its code when it does
# not fit. Absent, corrupt or stale artifacts only cost the code generation.
def build_runtime(device, optimized: list[Node], digest: str | None, **options):
    """`device.runtime(optimized, **options)`, from the artifacts stored for entry `digest` when
    there are some (and storing the ones the runtime offers when there were none)."""
    found = device_artifacts(digest, device.name) if digest else None
    runtime = (device.runtime(optimized, artifacts=found, **options) if found is not None
               else device.runtime(optimized, **options))
    if digest and not runtime.restored:
        offer_artifacts(runtime, digest, device.name)
    return runtime


def offer_artifacts(runtime, digest: str, device: str) -> None:
    """Store the artifacts `runtime` offers beside entry `digest`: now, or, for a runtime still
    building its code in the background (`when_built`: the cpu device's first call), once built."""
    def store(built, _seconds=None):
        offered = built.artifacts()
        if offered is not None:
            store_device_artifacts(digest, device, offered)

    runtime.when_built(store)  # now, unless it builds in the background


def _artifacts_path(digest: str, device: str) -> Path:
    return folder() / f"{digest}.{device}.json"


def device_artifacts(digest: str, device: str) -> dict | None:
    """The artifacts stored for entry `digest` on `device`, or None: absent, or refused."""

    try:
        path = _artifacts_path(digest, device)
        if not os.path.lexists(path):
            return None
        data = _read_json_file(path, MAX_ARTIFACT_BYTES)
        payload = data["artifacts"]
        if data.get("digest") != digest or data.get("device") != device or not isinstance(payload, dict):
            raise ValueError("a foreign file")
        if data.get("code") != code_hash(ARTIFACT_CODE):
            raise ValueError("made by other kernel code")
        if _sealed(data) != data:
            raise ValueError("its sha256 does not match")
    except Exception as exc:  # noqa: BLE001 - a bad file is only a miss
        LOG.debug("compile cache: ignoring %s artifacts of %s: %s: %s", device, digest[:12], type(exc).__name__, exc)
        return None
    from luminal.kernels.cache import touch

    touch(path)
    return payload


def store_device_artifacts(digest: str, device: str, artifacts: dict | None) -> None:
    import json

    if not artifacts or not enabled():
        return
    try:
        from luminal.kernels.cache import write_atomic

        data = {"digest": digest, "device": device, "code": code_hash(ARTIFACT_CODE), "artifacts": artifacts}
        write_atomic(_artifacts_path(digest, device), json.dumps(_sealed(data)).encode())
    except Exception as exc:  # noqa: BLE001 - a cache that cannot write is only slower
        LOG.debug("compile cache: %s artifacts not stored: %s: %s", device, type(exc).__name__, exc)
