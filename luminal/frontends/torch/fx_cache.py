"""The compile cache one level up, for torch.compile: Dynamo's graph -> the optimized HLIR graph
and how to call it. A hit skips the lowering to ATen, the FX import and egglog.

`luminal.compile_cache` caches the optimized graph of a lowered HLIR graph; lowering Dynamo's
graph to core ATen and importing it cost more than that (seconds at 32 layers). So the Dynamo
backend first looks here, under a key over what determines both:
- Dynamo's graph, node by node (`spell_graph`: every node's kind, name, target by qualified
  name and arguments, in order; read from the graph itself, so no Python code is generated for
  it; an argument that is not plain data makes the graph uncacheable here);
- per placeholder: weight or input, and for a tensor its dtype, shape, strides, device and
  requires_grad (for a plain value, the value);
- torch's version, luminal's context (`compile_cache.context`) and the hash of the lowering's
  code (`FRONTEND_CODE`: the torch frontend and the builder), the device, optimize on/off,
  grad mode.
`luminal.compile` keys its exported program here too (`export.program_key`: the program's graph,
its signature and symbolic shapes), before its lowering.
Graphs with `get_attr` or `call_module` nodes (state the code does not spell), symbolic shapes
or fake example inputs are not cached here (the HLIR-level cache still serves them), nor are
those lowered by aot_autograd (mutation, gradients: their placeholders differ from Dynamo's).

An entry is a `compile_cache` entry (usually a link, `compile_cache.write_link`, to the entry of
the lowered graph this process just stored: the graph is written once) whose weight references
are `p<i>`, the weight placeholder
of position i (a hit re-binds the tensors Dynamo passes, exactly as the FX import would, so new
weight values are always seen), plus a `torch` block: per placeholder how it feeds the graph,
the output structure (kinds, names, and the pytree spec, checked to import nothing), all
validated before use.
"""

from __future__ import annotations

import hashlib
import time

import torch

from luminal import compile_cache
from luminal.compiler import Report
from luminal.errors import LuminalError
from luminal.hlir.constants import RNG_SEED_INPUT
from luminal.threadflags import gc_paused

# the code that lowers Dynamo's graph to HLIR (what an entry holds besides egglog's work, which
# `compile_cache.context` covers): an entry made by other code is never used
FRONTEND_CODE = ("frontends/torch", "frontends/torch_backend.py", "builder")


class Entry:
    """A readable entry: its key and the torch block (the graph is decoded per weight binding)."""

    def __init__(self, digest: str, text: str, weights: list[int], level: str = "dynamo graph"):
        self.digest, self.text, self.weights = digest, text, weights  # weights: placeholder positions
        self.level = level  # what was keyed, as the report's cache line names it
        self.key_s = 0.0  # seconds spent computing the key
        self.placeholders: list[str] = []  # of the lowered graph, in order: checked when stored


def key(gm, example_inputs, weight_ids: set[int], opts: dict, level: str = "dynamo graph",
        extra: str = "") -> Entry | None:
    """The key of Dynamo's graph with these inputs, or None where this cache does not apply
    (`opts["device"]`: the resolved `Device`; its precision is no part of the key).
    `luminal.compile` keys its exported program here too (`level`), `extra` spelling what its
    graph's nodes do not (the signature, symbolic shapes and their ranges)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if not compile_cache.enabled() or any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        return None
    from luminal.compiler import optimize_enabled

    spelled, weights = [], []
    for i, v in enumerate(example_inputs):
        if isinstance(v, torch.Tensor):
            if isinstance(v, FakeTensor) or not all(type(d) is int for d in (*v.shape, *v.stride())):
                return None
            kind = "w" if id(v) in weight_ids else "t"
            if kind == "w":
                weights.append(i)
            spelled.append((kind, str(v.dtype), tuple(v.shape), tuple(v.stride()), v.device.type, v.requires_grad))
        elif v is None or isinstance(v, (bool, int, float, str)):
            spelled.append(("v", repr(v)))
        else:
            return None
    t0 = time.perf_counter()
    graph = spell_graph(gm.graph)
    if graph is None:
        return None
    text = (f"{compile_cache.context()}; frontend {compile_cache.code_hash(FRONTEND_CODE)}; torch {torch.__version__}; "
            f"device {opts['device'].name}; "
            f"optimize {optimize_enabled(opts['optimize'])}; grad {torch.is_grad_enabled()}; {level}")
    h = hashlib.sha256(text.encode())
    h.update(graph.encode())
    h.update(repr(spelled).encode())
    h.update(extra.encode())
    entry = Entry(h.hexdigest(), text, weights, level)
    entry.placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    entry.key_s = time.perf_counter() - t0
    return entry


class _Unspellable(Exception):
    pass


def spell_graph(graph) -> str | None:
    """Dynamo's graph as text, every node in order (None: something in it is not plain data)."""
    from collections.abc import Hashable

    from torch.fx.node import _get_qualified_name

    lines, names = [], {}  # names: each target's qualified name, looked up once
    try:
        for n in graph.nodes:
            target = n.target
            if n.op == "call_function":
                hashable = isinstance(target, Hashable)
                name = names.get(target) if hashable else None
                if name is None:
                    try:
                        name = _get_qualified_name(target)
                    except Exception as exc:  # noqa: BLE001 - a lambda or a local function: no stable name
                        raise _Unspellable from exc
                    if hashable:
                        names[target] = name
                target = name
            elif not isinstance(target, str):
                raise _Unspellable
            lines.append(f"{n.op} {n.name} {target} {_spell(n.args)} {_spell(n.kwargs)}")
    except _Unspellable:
        return None
    return "\n".join(lines)


_REPR = {type(None), bool, int, float, complex, str, type(Ellipsis)}  # 1, 1.0, True and -0.0 stay distinct


def _spell(a) -> str:
    kind = type(a)  # the common exact types first (a graph's arguments are mostly these)
    if kind is torch.fx.Node:
        return f"%{a.name}"
    if kind in _REPR:
        return repr(a)
    if kind is tuple:
        return f"({', '.join(map(_spell, a))},)"
    if isinstance(a, torch.fx.Node):
        return f"%{a.name}"
    if a is None or a is Ellipsis or isinstance(a, (bool, int, float, complex, str)):
        return repr(a)  # 1, 1.0, True and -0.0 stay distinct
    if isinstance(a, (tuple, list)):
        inner = ", ".join(_spell(x) for x in a)
        return f"({inner},)" if isinstance(a, tuple) else f"[{inner}]"
    if isinstance(a, dict) and all(isinstance(k, str) for k in a):
        return "{" + ", ".join(f"{k!r}: {_spell(v)}" for k, v in a.items()) + "}"
    if isinstance(a, slice):
        return f"slice({_spell(a.start)}, {_spell(a.stop)}, {_spell(a.step)})"
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return f"{type(a).__name__}({a})"
    raise _Unspellable


def store(entry: Entry, imported, weight_arrays: dict[int, object]) -> None:
    """Store the miss: `imported` (fx_import.Imported, compiled), `weight_arrays` the
    ConstantArray the import made of each weight placeholder. Now, or after the first call
    where the runtime builds in the background (`compiler.after_first_call`: its time joins the
    report's `cache` phase, or its `background`)."""
    def write():
        with gc_paused():
            _store(entry, imported, weight_arrays)

    imported.compiled.after_first_call(write)


def _store(entry: Entry, imported, weight_arrays: dict[int, object]) -> None:
    from torch.utils._pytree import treespec_dumps

    if [n.name for n in imported.placeholders] != entry.placeholders:
        return  # the lowering renumbered the placeholders: the references would not be Dynamo's positions
    kinds = []
    for kind, v in imported.flat_kinds:
        if kind == "value" and not (v is None or isinstance(v, (bool, int, float, str))):
            return  # an output value JSON cannot hold
        kinds.append([kind, v])
    try:
        spec = treespec_dumps(imported.spec)
    except Exception:  # noqa: BLE001 - an output structure without a serialization: not cached
        return
    compiled = imported.compiled
    extra = {"torch": {"feeds": [list(f) if f else None for f in imported.feeds], "flat_kinds": kinds,
                       "spec": spec, "out_names": list(imported.out_names), "inputs": compiled.input_names,
                       "unused": sorted(compiled.unused_inputs), "placeholders": entry.placeholders}}
    refs = {id(a): f"p{i}" for i, a in weight_arrays.items()}
    target = compiled._report.stored_key  # the lowered graph's entry, just stored (None: it was not)
    if target is not None and all(id(w) in refs for w in target.weights):  # its weights are Dynamo's placeholders
        bind = {f"w{j}": refs[id(w)] for j, w in enumerate(target.weights)}
        written = compile_cache.write_link(entry.digest, entry.text, target, bind, compiled._report, extra)
    else:
        written = compile_cache.write(entry.digest, entry.text, refs, compiled.outputs, compiled._report, extra)
    if written:
        compile_cache.offer_artifacts(compiled.runtime, entry.digest, compiled.device.name)  # for a hit's runtime


def restore(entry: Entry, args, name: str, opts: dict):
    """The compiled `Imported` of `entry`, its weights bound to `args`' weight tensors; None if
    the entry is absent or refused (then the caller compiles afresh)."""
    with gc_paused():
        return _restore(entry, args, name, opts)


def _restore(entry: Entry, args, name: str, opts: dict):
    from luminal.archive import _check_pytree_spec
    from luminal.builder import Graph
    from luminal.compiler import bind_runtime, op_counts
    from luminal.frontends.torch.fx_import import Imported, _constant

    t0 = time.perf_counter()
    if not compile_cache.present(entry.digest):  # a miss: no weight wrapped for nothing
        return None
    scratch = Graph("bind")
    bound = {f"p{i}": _constant(scratch, args[i], f"p{i}").node.arg for i in entry.weights}
    found = compile_cache.read(entry.digest, entry.text, bound)
    if found is None:
        return None
    block, optimized, by_name = found
    try:
        t = block["torch"]
        feeds, kinds, out_names = t["feeds"], t["flat_kinds"], t["out_names"]
        if not (isinstance(feeds, list) and len(feeds) == len(args) and all(
                f is None or (isinstance(f, list) and len(f) == 2 and f[0] in ("tensor", "complex", "dim") and isinstance(f[1], str))
                for f in feeds)):
            raise ValueError("malformed feeds")
        if not (isinstance(out_names, list) and len(out_names) == len(optimized)):
            raise ValueError("malformed output names")
        for kind, v in kinds:
            if kind in ("tensor", "complex", "tensor_dim") and not (type(v) is int and 0 <= v < len(optimized)):
                raise ValueError(f"output {v!r} out of range")
            if kind not in ("tensor", "complex", "tensor_dim", "value"):
                raise ValueError(f"unknown output kind {kind!r}")
        _check_pytree_spec(t["spec"])
        from torch.utils._pytree import treespec_loads

        spec = treespec_loads(t["spec"])
        inputs = [by_name[n] for n in t["inputs"] if n in by_name]
        unused = tuple(n for n in t["unused"] if isinstance(n, str))
        names = t["placeholders"]
        if not (isinstance(names, list) and len(names) == len(args) and all(isinstance(n, str) for n in names)):
            raise ValueError("malformed placeholder names")
    except (LuminalError, KeyError, TypeError, ValueError) as exc:
        return compile_cache.refused(entry.digest, f"a malformed torch block: {type(exc).__name__}: {exc}")
    report = Report(name=name, rules_fired=dict(block.get("rules_fired", {})), egraph_size=block.get("egraph_size"),
                    notes=[f"compile cache hit ({entry.digest[:12]}) on the {entry.level}: lowering, import and "
                           "egglog skipped; the miss said:", *map(str, block.get("notes", []))])
    report.phases["cache"] = entry.key_s + time.perf_counter() - t0
    report.cache[entry.level] = report.cache["optimize"] = "hit"
    counts = {k: block.get(k) for k in ("ops_before", "ops_after")}
    report.ops_before, report.ops_after = (
        {str(k): v for k, v in c.items() if type(v) is int} if isinstance(c, dict) else {} for c in counts.values())
    if not report.ops_after:
        report.ops_after = op_counts(optimized)
    compiled = bind_runtime(opts["device"], inputs, optimized, out_names, report, entry.digest,
                            unused=unused, rng_seed=by_name.get(RNG_SEED_INPUT), search=opts.get("search"))  # random ops: the seed drawn per call
    imported = Imported.restored(compiled, [tuple(f) if f else None for f in feeds], [tuple(k) for k in kinds], spec)
    imported.placeholder_names = names
    return imported
