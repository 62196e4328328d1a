"""An FX graph (Dynamo's torch-level one, or torch.export's) -> core ATen, one distinct call
at a time.

aot_autograd lowers Dynamo's graph by functionalizing and tracing all of it, twice, under fake
tensors, a cost per ATen node that made it most of a first `torch.compile(backend="luminal")`
call once Dynamo itself is paid (for torch.export, `run_decompositions()` does the same; the
`lower` column of `benchmarks/results/egraph_scaling.json` has the current figures). But a model's graph
is the same few calls over and over (32 layers of the same linear, rms-norm and attention on
the same shapes), and without mutation the ATen a call decomposes into depends only on its
target and the *signature* of its arguments: every tensor's shape, strides, dtype and device,
and every other argument's value. So each distinct call is traced once (`make_fx` with the
core-ATen decompositions); the FX importer builds each distinct call's HLIR once and
re-instantiates it wherever the call repeats (`Decomposed`, `import_memo.CallImporter`), and
the core-ATen graph, every call's small graph spliced in, is made only for whoever asks for it
(`decompose_graph`: torch.export's path, an eager fallback, the tests).

The distinct calls are traced together, in one `make_fx` (each trace costs milliseconds of
set-up whatever its size: 77 distinct calls for a Llama). A call's signature depends on the
metadata of the results of the calls before it, known exactly only once those are traced, so
the graph is walked first with each new call's result taken from running it undecomposed on
fake tensors (or from Dynamo's own fake value, where that is the same: `_as_run`), then everything new is traced at once; where a trace disagrees with that guess
the graph is walked again with the traced metadata (`_Distinct`). The calls known to disagree
(torch's scaled_dot_product_attention decomposition lays out its result otherwise than the
kernel) are traced alone as the walk meets them (`TRACED_AT_ONCE`): one walk and two traces for
the models of the benchmarks; the result is the graph
that tracing each call alone, in order, gives. No Python code is generated for any of these FX
graphs (lazy graph modules).

This is exactly what aot_autograd would produce only where nothing needs its machinery, so
`decompose_graph` returns None — and the caller falls back to aot_autograd or
`run_decompositions` — for:
- graphs that need gradients (an input requires grad while grad mode is on);
- symbolic shapes (any SymInt in the graph: the dynamic regime after a recompile);
- mutation: a traced call with a mutable ATen op (in-place methods, `setitem`, `copy_`);
- a call that decomposes into an op luminal's ATen table lacks (`F.batch_norm` in training
  mode, traced without functionalization, is `native_batch_norm`; in eval mode it becomes
  `_native_batch_norm_legit_no_training`, as under aot_autograd);
- calls that observe storage (`as_strided` on an input with a storage offset), side effects
  (a node without a tensor result other than the known no-ops), `call_module` nodes, or any
  argument that is not a plain value.
"""

from __future__ import annotations

import functools
import inspect
import operator

import torch
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module
from torch.fx.experimental.proxy_tensor import make_fx

from luminal.frontends.torch.aten_ops import op_key
from luminal.frontends.torch.aten_table import table
from luminal.frontends.torch.fx_import import NO_OPS, FxImporter, fetch_attr
from luminal.frontends.torch.recorder import record

# ATen ops whose import (`aten_*`) reads its arguments' `meta['val']`, not only its own: a call
# that decomposes into one is imported from the core-ATen graph (`Decomposed.by_calls`)
READS_ARGUMENT_META = {"as_strided.default", "as_strided_copy.default"}

# calls recorded for their side effects only (logging, shape asserts): none changes what the
# graph computes, and the FX importer drops the asserts anyway
NO_EFFECT = {torch._C._log_api_usage_once}


class _Fallback(Exception):
    """This graph needs aot_autograd (the message says why, for the debug log)."""


def decompose_graph(gm: torch.fx.GraphModule, example_inputs=None) -> torch.fx.GraphModule | None:
    """The core-ATen graph of `gm`, or None where aot_autograd must do it. The example inputs
    default to the placeholders' `meta['val']` (torch.export's graphs carry them)."""
    calls = decompose_calls(gm, example_inputs)
    return None if calls is None else calls.graph_module()


def decompose_calls(gm: torch.fx.GraphModule, example_inputs=None) -> Decomposed | None:
    """`gm` as its distinct calls' traced graphs and the steps that use them (`Decomposed`:
    the FX importer builds HLIR from it call by call, and its core-ATen graph is only made if
    asked for), or None where aot_autograd must do it."""
    from luminal.threadflags import gc_paused

    try:
        # lazy graph modules: the traced templates and the result are only ever read as graphs
        # (the Python code FX would generate for each is written only if someone calls it);
        # the collector paused, as in the egraph pipeline (Dynamo's heap is large)
        with gc_paused(), _use_lazy_graph_module(True):
            return _Decomposer(gm, example_inputs).run()
    except _Fallback as exc:
        from luminal.debug import LOG

        LOG.debug("torch frontend: aot_autograd for this graph (%s)", exc)
        return None


class Decomposed:
    """A graph decomposed one distinct call at a time, before its core-ATen graph is made.

    `steps`, in the graph's order: ("attr", value, tensor) for a constant of Dynamo's graph,
    ("call", distinct, leaves, out) for a call (`distinct.nodes`, of its traced module, bound to
    the tensors `leaves`: placeholders of `placeholders`, or `_Value`s that earlier calls'
    `out` hold) and ("output", args, env) last. `graph_module()` replays them into one FX
    graph (every call's nodes copied); the FX
    importer reads the steps directly instead and imports each distinct call once
    (`import_memo.CallImporter`)."""

    def __init__(self, decomposer: _Decomposer, steps: list[tuple], lowering: str):
        self.placeholders = [n for n in decomposer.graph.nodes if n.op == "placeholder"]
        self.steps, self.lowering = steps, lowering
        self._decomposer, self._graph_module = decomposer, None

    @functools.cached_property
    def by_calls(self) -> bool:
        """Whether the call-by-call import is exact: no call decomposes into an op whose import
        reads its *arguments'* metadata (`READS_ARGUMENT_META`), which on a call's own
        placeholders is the traced stand-in's (storage offset 0), not the argument's."""
        return not any(op_key(n.target) in READS_ARGUMENT_META for s in self.steps if s[0] == "call"
                       for n in s[1].nodes if n.op == "call_function")

    def importer(self, name: str = "graph") -> FxImporter:
        """The FX importer of this graph: call by call where that is exact (`by_calls`), else
        from the core-ATen graph."""
        return FxImporter(None, name, calls=self) if self.by_calls else FxImporter(self.graph_module(), name)

    def import_into(self, importer: FxImporter, g, env: dict):
        """Build the steps into `g` (`env`: the placeholders' values); the graph's outputs."""
        from luminal.frontends.torch.import_memo import CallImporter

        importer.call_memo = CallImporter(importer, g, importer.memo, _Value)
        return importer.call_memo.run(self.steps, env)

    def graph_module(self) -> torch.fx.GraphModule:
        """The core-ATen graph (made once, on the first call)."""
        if self._graph_module is None:
            from luminal.threadflags import gc_paused

            with gc_paused(), _use_lazy_graph_module(True):
                self._graph_module = self._decomposer.replay(self.steps)
            self._graph_module.meta["luminal_lowering"] = self.lowering
        return self._graph_module


@functools.lru_cache(maxsize=1)
def decompositions() -> dict:
    """The decompositions to core ATen, built once per process.

    `core_aten_decompositions()` (aot_autograd's table) is torch's Python decompositions plus,
    for every CompositeImplicitAutograd op of the aten namespace, an entry that runs the op's
    own C++ composite kernel; collecting those walks every registered op (a third of a second
    per process) and its lookups re-check the walk on every dispatched op. `make_fx` below
    autograd runs those same composite kernels for any CompositeImplicitAutograd op, table or
    not, so the Python decompositions alone trace the same graphs (checked graph for graph on
    every model of the test zoo and the benchmark LLMs). Where torch lacks that helper, the
    full table (as a plain dict)."""
    try:
        from torch._decomp import _core_aten_decompositions_post_autograd
    except ImportError:  # another torch: the public table
        from torch._decomp import core_aten_decompositions

        table = core_aten_decompositions()
        out = {op: table[op] for op in table}
    else:
        out = dict(_core_aten_decompositions_post_autograd())
    out[torch.ops.aten.native_batch_norm.default] = _batch_norm_no_training
    for op in (torch.ops.aten.upsample_linear1d.default, torch.ops.aten.upsample_linear1d.vec):
        out.pop(op, None)  # lowered with eager's own taps (aten_vision): torch's lerp makes inf NaN
    return out


def _batch_norm_no_training(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """`native_batch_norm` in eval mode as the functional op aot_autograd's functionalization
    gives (torch's `native_batch_norm_decomposition`, registered on the Autograd key, which only
    the Python dispatcher aot_autograd enables runs); training, or no running statistics: left
    alone (not in luminal's table: the graph falls back to aot_autograd)."""
    if training or running_mean is None or running_var is None:
        return NotImplemented
    return torch.ops.aten._native_batch_norm_legit_no_training.default(input, weight, bias, running_mean, running_var,
                                                                       momentum, eps)


def _is_tensor(v) -> bool:
    return isinstance(v, torch.Tensor)


class _Decomposer:
    def __init__(self, gm, example_inputs):
        from torch._guards import detect_fake_mode

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if example_inputs is None:
            example_inputs = [n.meta.get("val") for n in placeholders]
        self.gm, self.example_inputs = gm, list(example_inputs)
        self.fake_mode = detect_fake_mode(self.example_inputs)
        if self.fake_mode is None:
            raise _Fallback("no fake mode")
        self.decompositions = decompositions()
        self.graph = torch.fx.Graph()
        self.attrs: dict[str, torch.Tensor] = {}
        self.templates: dict[tuple, _Distinct] = {}
        self.traces = 0  # make_fx calls

    # --- the walk --------------------------------------------------------------------------
    def run(self) -> Decomposed:
        if torch.is_grad_enabled() and any(_is_tensor(a) and a.requires_grad for a in self.example_inputs):
            raise _Fallback("gradients needed")
        env: dict = {}
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.example_inputs):
            raise _Fallback("placeholders and example inputs differ")
        for node, value in zip(placeholders, self.example_inputs):
            env[node] = self._placeholder(node, value)
        with self.fake_mode, torch.no_grad():
            walks = 0
            for _ in range(MAX_ROUNDS):
                walks += 1
                steps = self._walk(dict(env))
                fresh = [d for d in self.templates.values() if d.traced is None]
                if fresh:
                    self._trace(fresh)
                if all(d.settled for d in fresh):
                    break
            else:
                raise _Fallback(f"the traced metadata did not settle in {MAX_ROUNDS} walks")
        calls = sum(n.op in ("call_function", "call_method") for n in self.gm.graph.nodes)
        used = len({id(s[1]) for s in steps if s[0] == "call"})
        return Decomposed(self, steps, f"decomposing {used} distinct of {calls} calls once each "
                                       f"({self.traces} trace{'s' if self.traces != 1 else ''}, "
                                       f"{walks} walk{'s' if walks != 1 else ''})")

    def replay(self, steps: list[tuple]) -> torch.fx.GraphModule:
        """The core-ATen graph of the steps of `run` (once: it adds to `self.graph`)."""
        with self.fake_mode, torch.no_grad():
            for step in steps:
                self._replay(step)
        _drop_unused(self.graph)
        return _LazyGraphModule(self.attrs, self.graph, class_name="LuminalAten")

    def _walk(self, env: dict) -> list[tuple]:
        """Dynamo's graph as steps (constants, calls bound to their distinct call, the output),
        every value a `_Value` carrying the metadata the distinct call gives it."""
        steps = []
        for node in self.gm.graph.nodes:
            if node.op in ("call_function", "call_method"):
                env[node] = self._call(node, env, steps)
            elif node.op == "get_attr":
                tensor = fetch_attr(self.gm, node.target)
                env[node] = _Value(self._fake_like(tensor) if _is_tensor(tensor) else tensor)
                steps.append(("attr", env[node], tensor))
            elif node.op == "output":
                steps.append(("output", node.args[0], env))
            elif node.op != "placeholder":
                raise _Fallback(f"{node.op} node {node.name}")
        return steps

    def _placeholder(self, node, value):
        if isinstance(value, torch.SymInt) or (_is_tensor(value) and _symbolic(value)):
            raise _Fallback(f"symbolic shape at {node.name}")
        new = self.graph.placeholder(node.name)
        if _is_tensor(value):
            new.meta["val"] = self._known_fake(node, value)
        else:
            new.meta["val"] = value
        return new

    def _known_fake(self, node, value: torch.Tensor) -> torch.Tensor:
        """A fake tensor with `value`'s metadata: the one Dynamo (or torch.export) already made for
        the placeholder when it fits (only its metadata is ever read: the traces make their own
        fakes from it), else a new one."""
        from torch._subclasses.fake_tensor import FakeTensor

        for fake in (value, node.meta.get("example_value"), node.meta.get("val")):
            if (isinstance(fake, FakeTensor) and fake.shape == value.shape
                    and fake.stride() == value.stride() and fake.dtype == value.dtype and fake.device == value.device
                    and fake.storage_offset() == value.storage_offset()):
                return fake
        return self._fake_like(value)

    def _get_attr(self, tensor, val=None):
        name = f"_const{len(self.attrs)}"
        self.attrs[name] = tensor
        new = self.graph.get_attr(name)
        new.meta["val"] = val if val is not None else self._fake_like(tensor) if _is_tensor(tensor) else tensor
        return new

    def _call(self, node, env, steps):
        if node.target in NO_EFFECT or (isinstance(node.target, torch._ops.OpOverload) and op_key(node.target) in NO_OPS):
            return None
        if node.op == "call_function" and node.target is operator.getitem and isinstance(env[node.args[0]], (tuple, list)):
            return env[node.args[0]][node.args[1]]  # an element of a multi-output call
        value = node.meta.get("example_value", node.meta.get("val"))
        if not (_is_tensor(value) or (isinstance(value, (tuple, list)) and value and all(map(_is_tensor, value)))):
            raise _Fallback(f"{node.name} ({node.target}) has no tensor result")
        leaves: list = []  # the graph's tensors this call reads, in order
        seen: list = []  # Dynamo's fake value of each, in the same order
        sig = (node.op, node.target, _signature(node.args, env, leaves, seen),
               _signature(node.kwargs, env, leaves, seen))
        distinct = self.templates.get(sig)
        if distinct is None:
            distinct = self.templates[sig] = _Distinct(node, _caller(node, env, leaves),
                                                       [leaf.meta["val"] for leaf in leaves])
            if node.target in TRACED_AT_ONCE:
                distinct.walked = None
            else:
                known = _as_run(value, distinct.inputs, seen)
                distinct.walked = known if known is not None else self._run(distinct)
            if distinct.walked is None:  # no eager fake result: trace it now, alone
                self._trace([distinct])
        out = _values(distinct.traced if distinct.traced is not None else distinct.walked)
        steps.append(("call", distinct, leaves, out))
        return out

    def _run(self, distinct: _Distinct):
        """The call on fresh fake tensors, not decomposed: the metadata of its result, or None."""
        try:
            return distinct.call(*[self._fake_like(m) for m in distinct.inputs])
        except Exception:  # noqa: BLE001 - a fake kernel missing: the call is traced alone instead
            return None

    # --- the distinct calls, traced together ---------------------------------------------
    def _trace(self, distincts: list[_Distinct]) -> None:
        """make_fx of every call in `distincts` at once (one trace, not one per call: each trace
        costs milliseconds of set-up), each on fresh fake tensors with its inputs' metadata; each
        call's nodes are the ancestors of its outputs (its placeholders excluded)."""
        fakes = [[self._fake_like(m) for m in d.inputs] for d in distincts]

        def everything(*tensors):
            out, i = [], 0
            for d, f in zip(distincts, fakes):
                out.append(d.call(*tensors[i:i + len(f)]))
                i += len(f)
            return out

        flat = [f for fs in fakes for f in fs]
        self.traces += 1
        try:  # make_fx's graph in a third of its time (`recorder`), where the recorder can make it
            traced = record(everything, flat, self.decompositions, self.fake_mode)
        except Exception as exc:  # noqa: BLE001 - make_fx decides (and raises a call's own error)
            from luminal.debug import LOG

            LOG.debug("torch frontend: make_fx for %d call(s) (%s: %s)", len(distincts), type(exc).__name__, exc)
            fakes = [[self._fake_like(m) for m in d.inputs] for d in distincts]
            flat = [f for fs in fakes for f in fs]
            traced = make_fx(everything, decomposition_table=self.decompositions, **_MAKE_FX_OPTIONS)(*flat)
        nodes = list(traced.graph.nodes)
        supported = table()
        for n in nodes:  # every node, those only kept for their effects too
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                continue
            if op_key(n.target) not in supported:  # aot_autograd's functional form may be
                raise _Fallback(f"a call decomposes to {n.target}")
            if n.target._schema.is_mutable:
                raise _Fallback(f"a call mutates ({n.target})")
            if n.target is torch.ops.aten.as_strided.default and any(f.storage_offset() for f in flat):
                raise _Fallback(f"a call reads storage offsets ({n.target})")
        index = {n: i for i, n in enumerate(nodes)}
        placeholders = [n for n in nodes if n.op == "placeholder"]
        results = next(n for n in reversed(nodes) if n.op == "output").args[0]
        start = 0
        for d, f, result in zip(distincts, fakes, results):
            d.module, d.outputs = traced, result
            d.placeholders = placeholders[start:start + len(f)]
            start += len(f)
            d.nodes = sorted(_ancestors(result), key=index.__getitem__)
            d.traced = torch.fx.node.map_arg(result, lambda n: n.meta["val"])
            d.settled = d.walked is None or _same_metadata(d.walked, d.traced)

    def _replay(self, step) -> None:
        """Build the new graph: constants, then each call's nodes copied with its placeholders
        bound to the call's arguments."""
        if step[0] == "attr":
            _, value, tensor = step
            value.node = self._get_attr(tensor, value.meta["val"])
        elif step[0] == "call":
            _, d, leaves, out = step
            mapping = {p: _node(leaf) for p, leaf in zip(d.placeholders, leaves)}
            for n in d.nodes:
                if n.op == "get_attr":
                    mapping[n] = self._get_attr(fetch_attr(d.module, n.target))
                else:
                    mapping[n] = self.graph.node_copy(n, mapping.__getitem__)
            _bind(out, d.outputs, mapping)
        else:
            _, args, env = step
            self.graph.output(_resolve(torch.fx.node.map_arg(args, lambda n: env[n])))

    def _fake_like(self, t: torch.Tensor) -> torch.Tensor:
        with self.fake_mode:
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device)


def _drop_unused(graph: torch.fx.Graph) -> None:
    """Erase the nodes nothing reads (last first, so a chain goes whole). Every node here is a
    functional ATen op, a constant or a no-op assert the importer drops anyway (`_trace` refuses
    mutation), so nothing needs FX's `eliminate_dead_code` and its per-node purity check."""
    for node in reversed(graph.nodes):
        if node.op not in ("placeholder", "output") and not node.users:
            graph.erase_node(node)


def _symbolic(t: torch.Tensor) -> bool:
    return any(isinstance(d, torch.SymInt) for d in (*t.shape, *t.stride()))


# make_fx's torch-function mode records which torch function each node came from
# (`node.meta['torch_fn']`, read by nothing here) on every torch call a trace makes, and turns a
# symbolic `size()` into `sym_size` (symbolic shapes fall back to aot_autograd before a trace):
# a cost for nothing, so off where this torch has the option
_MAKE_FX_OPTIONS = ({"_disable_torch_fn_metadata_mode": True}
                    if "_disable_torch_fn_metadata_mode" in inspect.signature(make_fx).parameters else {})

# calls whose decomposition lays out its result otherwise than their kernel (the walk's guess):
# traced alone as the walk meets them, so the calls after them are keyed right the first time
# and the graph is walked once, not twice (`_Distinct`)
TRACED_AT_ONCE = {torch._C._nn.scaled_dot_product_attention}

MAX_ROUNDS = 4  # walks of Dynamo's graph; a second settles what the first guessed wrong


class _Value:
    """A value of the walk: `meta['val']` its metadata (what the signatures of the calls that
    read it see), `node` its node in the new graph once the steps are replayed."""

    __slots__ = ("meta", "node", "sig")

    def __init__(self, val):
        self.meta, self.node, self.sig = {"val": val}, None, None


class _Distinct:
    """One distinct call. The walk first takes its result's metadata from running it on fake
    tensors undecomposed (`walked`); once traced, from the trace (`traced`). Where the two differ
    (torch's decomposition of scaled_dot_product_attention lays its result out otherwise than the
    kernel does), the calls downstream were keyed on the wrong metadata: `settled` is False and
    the graph is walked again, now with the traced metadata, so every call ends up keyed exactly
    as if each had been traced alone, in order."""

    def __init__(self, node, call, inputs):
        self.name, self.call, self.inputs = node.name, call, inputs
        self.walked = self.traced = None
        self.settled = False
        self.module = self.outputs = None
        self.placeholders: list = []
        self.nodes: list = []


def _caller(node, env, leaves):
    """`node`'s call on tensors given in the order of `leaves`."""
    position = {id(leaf): i for i, leaf in enumerate(leaves)}

    def rebuild(tensors, a):
        if isinstance(a, torch.fx.Node):
            v = env[a]
            return type(v)(rebuild(tensors, x) for x in v) if isinstance(v, (tuple, list)) else tensors[position[id(v)]]
        if isinstance(a, (tuple, list)):
            return type(a)(rebuild(tensors, x) for x in a)
        if isinstance(a, dict):
            return {k: rebuild(tensors, x) for k, x in a.items()}
        if isinstance(a, slice):
            return slice(rebuild(tensors, a.start), rebuild(tensors, a.stop), rebuild(tensors, a.step))
        return a

    def call(*tensors):
        args, kwargs = rebuild(tensors, node.args), rebuild(tensors, node.kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)

    return call


def _values(result):
    if _is_tensor(result):
        return _Value(result)
    if isinstance(result, (tuple, list)):
        return type(result)(_values(r) for r in result)
    return result


def _node(v):
    return v.node if isinstance(v, _Value) else v


def _resolve(v):
    if isinstance(v, _Value):
        return v.node
    if isinstance(v, (tuple, list)):
        return type(v)(_resolve(x) for x in v)
    if isinstance(v, dict):
        return {k: _resolve(x) for k, x in v.items()}
    return v


def _bind(out, traced, mapping: dict) -> None:
    """Give each `_Value` of `out` the new node of the traced output in the same place."""
    if isinstance(out, _Value):
        out.node = mapping.get(traced, traced) if isinstance(traced, torch.fx.Node) else traced
    elif isinstance(out, (tuple, list)):
        for o, t in zip(out, traced):
            _bind(o, t, mapping)


def _ancestors(result) -> set:
    """The non-placeholder nodes `result` (a node or a structure of them) depends on."""
    seen, stack = set(), []
    torch.fx.node.map_arg(result, stack.append)
    while stack:
        n = stack.pop()
        if n in seen or n.op == "placeholder":
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _same_metadata(a, b) -> bool:
    """Whether two results agree on everything a signature reads (structure, and per tensor
    shape, strides, dtype, device and whether it has a storage offset)."""
    if _is_tensor(a) or _is_tensor(b):
        return (_is_tensor(a) and _is_tensor(b) and tuple(a.shape) == tuple(b.shape) and a.stride() == b.stride()
                and a.dtype == b.dtype and a.device.type == b.device.type
                and (a.storage_offset() != 0) == (b.storage_offset() != 0))
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(_same_metadata(x, y) for x, y in zip(a, b)))
    return type(a) is type(b)


def _as_run(value, inputs: list, seen: list):
    """Dynamo's own fake result of a call (`value`), where it is what `_run` would compute: every
    tensor the call read had, in Dynamo's trace, exactly the metadata the walk gives it, at
    storage offset 0 (as `_run`'s fresh fakes are); else None (then the call is run)."""
    if len(inputs) != len(seen):
        return None
    for m, d in zip(inputs, seen):
        if not (_is_tensor(d) and d.storage_offset() == 0 and m.storage_offset() == 0 and d.dtype == m.dtype
                and d.device == m.device and d.shape == m.shape and d.stride() == m.stride()):
            return None
    return value


_PLAIN = {type(None), bool, int, float, complex, str}


def _signature(a, env, leaves, seen=None):
    """A hashable, exact description of an argument; tensors (appended to `leaves`, and
    Dynamo's value of each to `seen`) by their metadata. Raises _Fallback for anything whose
    value a signature cannot capture."""
    if type(a) in _PLAIN:
        return (type(a).__name__, repr(a))  # repr: 1, 1.0, True and -0.0 stay distinct
    if isinstance(a, torch.fx.Node):
        v = env[a]
        if isinstance(v, (tuple, list)):
            return ("seq", tuple(_signature(x, env, leaves, seen) for x in v))
        sig = v.sig if isinstance(v, _Value) else None  # a value read by several calls: spelled once
        if sig is None:
            if not isinstance(v, (torch.fx.Node, _Value)):
                raise _Fallback(f"argument {a.name} is not a tensor")
            t = v.meta.get("val")
            if not _is_tensor(t):
                raise _Fallback(f"argument {a.name} is not a static tensor")
            shape, stride = tuple(t.shape), tuple(t.stride())  # read once: a fake tensor's are slow to get
            if not all(type(d) is int for d in shape + stride):  # a SymInt (an unbacked size, say)
                raise _Fallback(f"argument {a.name} is not a static tensor")
            sig = ("T", shape, stride, t.dtype, t.device.type, t.storage_offset() != 0)
            if isinstance(v, _Value):
                v.sig = sig
        leaves.append(v)
        if seen is not None:
            seen.append(a.meta.get("example_value", a.meta.get("val")))
        return sig
    if isinstance(a, (tuple, list)):
        return (type(a).__name__, tuple(_signature(x, env, leaves, seen) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _signature(v, env, leaves, seen)) for k, v in sorted(a.items())))
    if isinstance(a, slice):
        return ("slice", _signature(a.start, env, leaves, seen), _signature(a.stop, env, leaves, seen),
                _signature(a.step, env, leaves, seen))
    if a is None or a is Ellipsis or isinstance(a, (bool, int, float, complex, str)):
        return (type(a).__name__, repr(a))  # repr: 1, 1.0, True and -0.0 stay distinct
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(a).__name__, str(a))
    raise _Fallback(f"argument of type {type(a).__name__}")
