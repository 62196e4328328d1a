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
core-ATen decompositions, the same table aot_autograd uses) and its small graph is spliced in
wherever the call repeats.

This is exactly what aot_autograd would produce only where nothing needs its machinery, so
`decompose_graph` returns None — and the caller falls back to aot_autograd or
`run_decompositions` — for:
- graphs that need gradients (an input requires grad while grad mode is on);
- symbolic shapes (any SymInt in the graph: the dynamic regime after a recompile);
- mutation: a traced call with a mutable ATen op (in-place methods, `setitem`, `copy_`);
- a call that decomposes into an op luminal's ATen table lacks (`F.batch_norm` traced
  without functionalization is `native_batch_norm`; aot_autograd gives the functional
  `_native_batch_norm_legit_no_training` luminal supports);
- calls that observe storage (`as_strided` on an input with a storage offset), side effects
  (a node without a tensor result other than the known no-ops), `call_module` nodes, or any
  argument that is not a plain value.
"""

from __future__ import annotations

import functools
import operator

import torch
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module
from torch.fx.experimental.proxy_tensor import make_fx

from luminal.frontends.torch.aten_ops import op_key
from luminal.frontends.torch.aten_table import table
from luminal.frontends.torch.fx_import import NO_OPS, fetch_attr

# calls recorded for their side effects only (logging, shape asserts): none changes what the
# graph computes, and the FX importer drops the asserts anyway
NO_EFFECT = {torch._C._log_api_usage_once}


class _Fallback(Exception):
    """This graph needs aot_autograd (the message says why, for the debug log)."""


def decompose_graph(gm: torch.fx.GraphModule, example_inputs=None) -> torch.fx.GraphModule | None:
    """The core-ATen graph of `gm`, or None where aot_autograd must do it. The example inputs
    default to the placeholders' `meta['val']` (torch.export's graphs carry them)."""
    from luminal.compile_cache import gc_paused

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
        return {op: table[op] for op in table}
    return dict(_core_aten_decompositions_post_autograd())


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
        self.templates: dict[tuple, torch.fx.GraphModule] = {}

    # --- the walk --------------------------------------------------------------------------
    def run(self) -> torch.fx.GraphModule:
        if torch.is_grad_enabled() and any(_is_tensor(a) and a.requires_grad for a in self.example_inputs):
            raise _Fallback("gradients needed")
        env: dict = {}
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.example_inputs):
            raise _Fallback("placeholders and example inputs differ")
        for node, value in zip(placeholders, self.example_inputs):
            env[node] = self._placeholder(node, value)
        with self.fake_mode, torch.no_grad():
            for node in self.gm.graph.nodes:
                if node.op in ("call_function", "call_method"):
                    env[node] = self._call(node, env)
                elif node.op == "get_attr":
                    env[node] = self._get_attr(fetch_attr(self.gm, node.target))
                elif node.op == "output":
                    self.graph.output(torch.fx.node.map_arg(node.args[0], lambda n: env[n]))
                elif node.op != "placeholder":
                    raise _Fallback(f"{node.op} node {node.name}")
        self.graph.eliminate_dead_code()
        out = _LazyGraphModule(self.attrs, self.graph, class_name="LuminalAten")
        calls = sum(n.op in ("call_function", "call_method") for n in self.gm.graph.nodes)
        out.meta["luminal_lowering"] = f"decomposing {len(self.templates)} distinct of {calls} calls once each"
        return out

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

    def _get_attr(self, tensor):
        name = f"_const{len(self.attrs)}"
        self.attrs[name] = tensor
        new = self.graph.get_attr(name)
        new.meta["val"] = self._fake_like(tensor) if _is_tensor(tensor) else tensor
        return new

    def _call(self, node, env):
        if node.target in NO_EFFECT or (isinstance(node.target, torch._ops.OpOverload) and op_key(node.target) in NO_OPS):
            return None
        if node.op == "call_function" and node.target is operator.getitem and isinstance(env[node.args[0]], (tuple, list)):
            return env[node.args[0]][node.args[1]]  # an element of a multi-output call
        value = node.meta.get("example_value", node.meta.get("val"))
        if not (_is_tensor(value) or (isinstance(value, (tuple, list)) and value and all(map(_is_tensor, value)))):
            raise _Fallback(f"{node.name} ({node.target}) has no tensor result")
        leaves: list[torch.fx.Node] = []  # the graph's tensors this call reads, in order
        sig = (node.op, node.target, _signature(node.args, env, leaves), _signature(node.kwargs, env, leaves))
        template = self.templates.get(sig)
        if template is None:
            template = self.templates[sig] = self._trace(node, env, leaves)
        return self._splice(template, leaves)

    # --- one distinct call -----------------------------------------------------------------
    def _trace(self, node, env, leaves) -> torch.fx.GraphModule:
        """make_fx of `node` on fresh fake tensors with its inputs' metadata."""
        fakes = [self._fake_like(leaf.meta["val"]) for leaf in leaves]
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

        traced = make_fx(call, decomposition_table=self.decompositions)(*fakes)
        supported = table()
        for n in traced.graph.nodes:
            if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
                continue
            if op_key(n.target) not in supported:  # aot_autograd's functional form may be
                raise _Fallback(f"{node.name} ({node.target}) decomposes to {n.target}")
            if n.target._schema.is_mutable:
                raise _Fallback(f"{node.name} ({node.target}) mutates ({n.target})")
            if n.target is torch.ops.aten.as_strided.default and any(f.storage_offset() for f in fakes):
                raise _Fallback(f"{node.name} ({node.target}) reads storage offsets")
        return traced

    def _splice(self, template: torch.fx.GraphModule, leaves):
        """Copy the template's nodes into the graph, its placeholders bound to `leaves`."""
        mapping: dict = {}
        inputs = iter(leaves)
        result = None
        for n in template.graph.nodes:
            if n.op == "placeholder":
                mapping[n] = next(inputs)
            elif n.op == "get_attr":
                mapping[n] = self._get_attr(fetch_attr(template, n.target))
            elif n.op == "output":
                result = torch.fx.node.map_arg(n.args[0], lambda m: mapping[m])
            else:
                mapping[n] = self.graph.node_copy(n, lambda m: mapping[m])
        return result

    def _fake_like(self, t: torch.Tensor) -> torch.Tensor:
        with self.fake_mode:
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device)


def _symbolic(t: torch.Tensor) -> bool:
    return any(isinstance(d, torch.SymInt) for d in (*t.shape, *t.stride()))


def _signature(a, env, leaves):
    """A hashable, exact description of an argument; tensors (appended to `leaves`) by their
    metadata. Raises _Fallback for anything whose value a signature cannot capture."""
    if isinstance(a, torch.fx.Node):
        v = env[a]
        if isinstance(v, (tuple, list)):
            return ("seq", tuple(_signature(x, env, leaves) for x in v))
        if not isinstance(v, torch.fx.Node):
            raise _Fallback(f"argument {a.name} is not a tensor")
        t = v.meta.get("val")
        if not _is_tensor(t) or _symbolic(t):
            raise _Fallback(f"argument {a.name} is not a static tensor")
        leaves.append(v)
        return ("T", tuple(t.shape), tuple(t.stride()), t.dtype, t.device.type, t.storage_offset() != 0)
    if isinstance(a, (tuple, list)):
        return (type(a).__name__, tuple(_signature(x, env, leaves) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _signature(v, env, leaves)) for k, v in sorted(a.items())))
    if isinstance(a, slice):
        return ("slice", _signature(a.start, env, leaves), _signature(a.stop, env, leaves), _signature(a.step, env, leaves))
    if a is None or a is Ellipsis or isinstance(a, (bool, int, float, complex, str)):
        return (type(a).__name__, repr(a))  # repr: 1, 1.0, True and -0.0 stay distinct
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(a).__name__, str(a))
    raise _Fallback(f"argument of type {type(a).__name__}")
