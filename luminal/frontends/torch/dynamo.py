"""The torch.compile backend: `torch.compile(model, backend="luminal", options={...})`.

Options: `device` (an entry of `luminal.devices`: "cpu", "numpy", "cuda", "cuda-emulator"; an
unknown one, or one this machine cannot run, raises `DeviceError`, never an eager fallback),
`strict` (raise `UnsupportedError` naming every unsupported op; default: warn and run that graph
eagerly), `optimize` (egglog on/off), `lowering` ("auto": per-call decomposition where exact,
else aot_autograd; "aot_autograd"), `precision` ("float64" or "float32", fixed for these graphs;
None, the default: `luminal.set_precision`'s at each call; another value raises `OptionError`),
`search` (seconds to measure the device's variants in, `luminal.search`; None: no search).

Dynamo's graph is lowered to core ATen — the op set `torch.export(...).run_decompositions()`
produces, so one ATen table serves both entry points. For inference on static shapes without
mutation, `decompose.decompose_graph` does it one distinct call at a time (repeated layers
are traced once); otherwise `aot_autograd` with the core-ATen decompositions does (its
functionalization removes in-place ops; it also serves training). Dynamo's graph module is
not touched. Parameters and buffers (lifted into graph inputs by Dynamo) become luminal constants
on the first call, sharing memory with the model; later calls only check they are still the
same tensors. A CUDA parameter becomes a constant that holds the tensor (its values are copied
to the host only if a host runtime reads them, once per process: `luminal.runtime.torch_arrays`),
and on "cuda" the kernel runtime takes the parameter itself by DLPack (`luminal.kernels.weights`):
every recompile — each new sequence-length regime of `generate()` — reads the one device copy
the model already has, with no host trip.
Dynamo itself rebuilds pytree outputs (logits plus a KV cache).
"""

from __future__ import annotations

import collections
import itertools
import time
import warnings

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from luminal import devices
from luminal.errors import DeviceError, LuminalError, OptionError, UnsupportedError
from luminal.frontends.torch import fx_cache
from luminal.frontends.torch.decompose import Decomposed, decompose_calls
from luminal.frontends.torch.fx_import import FxImporter
from luminal.frontends.torch.partition import partition
from luminal.frontends.torch.view_outputs import aten_step, chain, replay, take_out_views, with_views
from luminal.search import budget as search_budget

OPTIONS = {"device": "cpu", "strict": False, "optimize": None, "lowering": "auto", "precision": None,
           "search": None}  # search: seconds to measure the device's variants in (`luminal.search`)
LOWERINGS = ("auto", "aot_autograd")
_ids = itertools.count()


class RecentLog:
    """The last `maxlen` entries (iterate), and how many there were in all (`len`)."""

    def __init__(self, maxlen: int = 256):
        self.recent: collections.deque = collections.deque(maxlen=maxlen)
        self.total = 0

    def append(self, item) -> None:
        self.recent.append(item)
        self.total += 1

    def __len__(self) -> int:
        return self.total

    def __iter__(self):
        return iter(list(self.recent))


EAGER_FALLBACKS = RecentLog()  # graphs that ran eagerly, with why: the last 256, and a count of all


def _is_weight(node, value) -> bool:
    if isinstance(value, torch.nn.Parameter):
        return True
    arg = node.meta.get("grapharg")
    name = arg.source.name if arg is not None and getattr(arg, "source", None) is not None else ""
    name = name() if callable(name) else name
    return isinstance(value, torch.Tensor) and ("_parameters[" in name or "_buffers[" in name)


class LuminalFunction:
    """The compiled forward of one graph, built on its first call (when the weights are at hand)."""

    _boxed_call = True  # aot_autograd's calling convention: one list of arguments

    def __init__(self, gm, weight_ids: set[int], name: str, opts: dict, lowering: tuple[float, str],
                 mutated: frozenset[int] = frozenset(), restore_from=None):
        self.gm, self.weight_ids, self.name, self.opts = gm, weight_ids, name, opts
        self.restore_from = restore_from  # a compile cache entry of Dynamo's graph `gm` (fx_cache): built from it
        self.cache_entry = None  # where to store what this (lowered) graph compiles to
        self.mutated = mutated  # positions of inputs the graph mutates: always fed, never constants
        self.lowering = lowering  # (seconds, how) of Dynamo's graph -> core ATen
        self.imported = None
        self.weights: dict[int, torch.Tensor] = {}
        self.eager = None
        # outputs that are an input or a view of one (a weight aot_autograd saves, or its transpose):
        # made from the input in torch at each call, not computed by luminal
        self.graph, self.aliases, self.pruned = _without_aliases(gm)
        # positions of inputs whose memory each call may take for its outputs: a backward's
        # donated saved activations (`bw_compiler`)
        self.donated: frozenset[int] = frozenset()

    def _build(self, args):
        if isinstance(self.gm, Decomposed):
            placeholders = self.gm.placeholders
        else:
            placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        self.weights = {i: a for i, a in enumerate(args) if id(a) in self.weight_ids and i not in self.mutated}
        constants = {placeholders[i].name: a for i, a in self.weights.items()}
        self.weight_ptrs = {i: a.data_ptr() for i, a in self.weights.items()}
        if self.restore_from is not None:  # a hit of the compile cache: no lowering, import or egglog
            self.imported = fx_cache.restore(self.restore_from, args, self.name, self.opts)
            if self.imported is None:
                raise LuminalError(f"the compile cache entry of graph {self.name} is gone or refused")
            return
        importer = self.gm.importer(self.name) if isinstance(self.gm, Decomposed) else FxImporter(self.graph, self.name)
        imported = importer.build(constants)
        seconds, how = self.lowering
        self.imported = imported.compile(device=self.opts["device"], optimize=self.opts["optimize"], name=self.name,
                                         phases={"lower": seconds}, notes=[f"lowered to core ATen by {how}"],
                                         search=self.opts["search"])
        if self.cache_entry is not None:
            fx_cache.store(self.cache_entry, self.imported, imported.weight_arrays)

    def run_eagerly(self, why: str) -> None:
        """From now on the graph runs on torch's kernels (logged in EAGER_FALLBACKS, with why)."""
        warnings.warn(f"luminal: running graph {self.name} eagerly: {why}", stacklevel=3)
        EAGER_FALLBACKS.append(f"{self.name}: {why}")
        gm = self.gm.graph_module() if isinstance(self.gm, Decomposed) else self.gm
        self.eager = make_boxed_func(gm.forward)

    def __call__(self, args):
        if self.eager is not None:
            return self.eager(args)
        if self.imported is None or any(
            args[i] is not w or w.data_ptr() != self.weight_ptrs[i] for i, w in self.weights.items()
        ):
            try:
                self._build(args)
            except (DeviceError, OptionError):  # a configuration error, not an unsupported graph
                raise
            except LuminalError as exc:  # unsupported, or a frontend bug: never a wrong answer
                if self.opts["strict"]:
                    raise
                self.run_eagerly(str(exc))
                return self.eager(args)
        values = list(args)
        args.clear()  # boxed calling convention: let aot_autograd free its inputs early
        out = self.imported(values, self.donated) if self.donated and _use_once() else self.imported(values)
        for i, j, steps in self.aliases:  # in output order: each lands at its own position
            value = replay(values[j], steps)
            if self.pruned:
                out.insert(i, value)
            else:
                out[i] = value
        return out


def _use_once() -> bool:
    """The backward running now frees its saved tensors after it (no `retain_graph`, which torch
    already refuses with donated buffers): checked again at each call, as a donation overwrites."""
    try:
        return not torch._C._autograd._get_current_graph_task_keep_graph()
    except RuntimeError:  # not inside autograd's backward: keep the inputs
        return False


def _donated(compiled: LuminalFunction) -> frozenset[int]:
    """The backward's inputs aot_autograd donates (`bw_donated_idxs`: saved activations that alias
    no forward input or output and no gradient; the backward is then called once per forward,
    `retain_graph` refused), less any an output is made from (`aliases`): the C runtime may write
    gradients into their memory once it has read them (`kernels/cpu/donation.py`)."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    idxs = getattr(meta, "bw_donated_idxs", None) or ()
    return frozenset(idxs) - {j for _, j, _ in compiled.aliases}


def _without_aliases(gm):
    """(the graph luminal compiles, [(output position, input position, view chain)], whether they
    were taken out of it): outputs of an
    FX graph that are one of its inputs, or a view of one, come out of luminal's graph. The input
    itself must stay the very tensor the caller gave (torch checks a saved weight's version at the
    backward: a weight changed in place between forward and backward raises, as in eager), and a
    view of it costs nothing in torch where luminal would copy it (a transposed weight per linear
    layer, kept until the backward). A graph with no other output keeps them all (luminal's
    copies), the inputs themselves replacing theirs."""
    if not isinstance(gm, torch.fx.GraphModule):
        return gm, [], False
    nodes = list(gm.graph.nodes)
    if not nodes or nodes[-1].op != "output" or not isinstance(nodes[-1].args[0], (tuple, list)):
        return gm, [], False
    position = {n: i for i, n in enumerate(n for n in nodes if n.op == "placeholder")}
    outputs = list(nodes[-1].args[0])
    aliases = [(i, *found) for i, o in enumerate(outputs) if (found := chain(o, position, aten_step)) is not None]
    if len(aliases) == len(outputs):
        return gm, [a for a in aliases if not a[2]], False
    if not aliases:
        return gm, [], False
    graph = torch.fx.Graph()
    mapping: dict = {}
    graph.graph_copy(gm.graph, mapping)
    gone = {i for i, _, _ in aliases}
    graph.output(tuple(mapping[o] for i, o in enumerate(outputs) if i not in gone))
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph), aliases, True


def _mutated_inputs(agm) -> frozenset[int]:
    """Positions of the inputs aot_autograd's graph updates (a buffer's `self.count += 1`): their
    new values are outputs, copied back by aot_autograd, so they must be read afresh each call."""
    from torch._guards import TracingContext

    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    n = sum(1 for node in agm.graph.nodes if node.op == "placeholder")
    if meta is None or len(meta.input_info) != n:  # the per-call decomposition: no mutation
        return frozenset()
    return frozenset(i for i, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata)


def _runs_eagerly(compiled) -> bool:
    """Whether what fw_compiler returned runs on torch's kernels (from the start, or since a fallback)."""
    return compiled is not None and (not isinstance(compiled, LuminalFunction) or compiled.eager is not None)


def backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, *, graphs: list | None = None,
            **kwargs):
    """A Dynamo backend; `options` as `torch.compile(..., options={...})` passes them. `graphs`, if
    given, collects the `LuminalFunction` of every graph compiled (forward and backward). Outputs
    that view an input or another output are made as views in torch (`view_outputs`)."""
    pruned, views = take_out_views(gm)
    compiled = _backend(pruned, example_inputs, options, graphs=graphs, **kwargs)
    return with_views(compiled, views) if views else compiled


def _backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None, *, graphs: list | None = None,
             **kwargs):
    opts = dict(OPTIONS)
    opts.update(options or {})
    opts.update(kwargs)
    unknown = set(opts) - set(OPTIONS)
    if unknown:
        raise LuminalError(f"unknown luminal backend option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}")
    if opts["lowering"] not in LOWERINGS:
        raise LuminalError(f"luminal backend option lowering={opts['lowering']!r}; expected one of {LOWERINGS}")
    # resolved once (DeviceError: unknown, or not runnable here; OptionError: a bad precision; never
    # an eager fallback): the graphs below get the Device, at this precision
    opts["device"] = devices.resolve(opts["device"], opts["precision"])
    opts["search"] = search_budget(opts["search"])  # OptionError: not a positive number of seconds
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weight_ids = {id(v) for n, v in zip(placeholders, example_inputs) if _is_weight(n, v)}
    training = torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in example_inputs)
    name = f"dynamo_{next(_ids)}"
    start = time.perf_counter()

    def fw_compiler(agm: torch.fx.GraphModule, _fake_inputs, part: str = "forward"):
        lowering = (time.perf_counter() - start, "aot_autograd")
        graph_name = name if part == "forward" else f"{name}_backward"
        bad = FxImporter(agm, graph_name).unsupported()
        if bad:
            ops = sorted({op for _, op in bad})
            where = ", ".join(f"{n} ({op})" for n, op in bad)
            msg = f"luminal does not support {len(ops)} ATen op(s): {', '.join(ops)}; at nodes: {where}"
            if opts["strict"]:
                raise UnsupportedError(msg)
            warnings.warn(f"luminal: running graph {graph_name} eagerly: {msg}", stacklevel=2)
            EAGER_FALLBACKS.append(f"{graph_name}: {msg}")
            eager = make_boxed_func(agm.forward)
            if part == "forward":
                forwards.append(eager)
            return eager
        # a graph autograd differentiates reads its parameters afresh each call: an optimizer
        # updates them in place between calls, so they are never constants luminal could fold
        constants = set() if training else weight_ids
        mutated = _mutated_inputs(agm) if part == "forward" else frozenset()
        kind = distributed_function(LuminalFunction, agm) if fx_collectives(agm) else LuminalFunction
        compiled = kind(agm, constants, graph_name, opts, lowering, mutated)
        if graphs is not None:
            graphs.append(compiled)
        if part == "forward":
            forwards.append(compiled)
        return compiled

    # the forward of this graph: where it runs eagerly, so does its backward. An eager forward
    # saves what torch's kernels return, which need not be what the trace declared (a bf16
    # layer norm's mean and rstd: bf16 in the trace, f32 from the CPU kernel), and the backward
    # luminal compiled from the trace would refuse them
    forwards: list = []

    def bw_compiler(agm: torch.fx.GraphModule, _fake_inputs):  # training: the backward on luminal too
        compiled = fw_compiler(agm, _fake_inputs, part="backward")
        forward = forwards[-1] if forwards else None
        if type(compiled) is LuminalFunction:
            compiled.donated = _donated(compiled)

        def boxed(args):  # Dynamo's `disable` wraps what this returns, keeping function attributes only
            if isinstance(compiled, LuminalFunction) and compiled.eager is None and _runs_eagerly(forward):
                compiled.run_eagerly(f"its forward {name} runs eagerly")
            return compiled(args)

        boxed._boxed_call = True
        return boxed

    from luminal.frontends.torch.collectives import distributed_function, fx_collectives

    # a graph with torch.distributed collectives: never from or into the compile cache, and its
    # ranks agree it compiled before any of them runs it
    communicates = bool(fx_collectives(gm))
    entry = fx_cache.key(gm, example_inputs, weight_ids, opts) if opts["lowering"] == "auto" and not communicates else None
    if entry is not None:  # the compile cache may hold what this graph becomes
        cached = LuminalFunction(gm, weight_ids, name, opts, (0.0, "the compile cache"), restore_from=entry)
        try:
            cached._build(list(example_inputs))
            if graphs is not None:
                graphs.append(cached)
            return lambda *args: cached(list(args))
        except LuminalError:  # a miss: compile it (and store it) below
            pass
    opts["device"].prepare()  # what the build needs without the graph builds while it is lowered
    calls = decompose_calls(gm, example_inputs) if opts["lowering"] == "auto" else None
    if calls is not None:  # the fast path: Dynamo calls the result directly, unboxed
        # every traced op is in luminal's table and none mutates (checked as it was traced)
        kind = distributed_function(LuminalFunction, gm) if communicates else LuminalFunction
        boxed = kind(calls, weight_ids, name, opts, (time.perf_counter() - start, calls.lowering))
        if graphs is not None:
            graphs.append(boxed)
        boxed.cache_entry = entry
        return lambda *args: boxed(list(args))

    from luminal.frontends.torch.training_decomps import training_decompositions

    # the joint graph split by torch's min-cut partitioner, as inductor does, with attention scores
    # and cheap activations recomputed rather than saved (`partition`)
    compiler = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                            partition_fn=partition,
                            decompositions=training_decompositions())
    return compiler(gm, example_inputs)
