"""`luminal.compile(model, example_args)`: torch.export -> core ATen -> HLIR -> a runtime.

    cm = luminal.compile(model, (input_ids,))                  # static shapes
    cm = luminal.compile(model, (ids,), dynamic={"input_ids": {1: "seq"}})  # a symbolic dim
    out = cm(input_ids)                                       # the model's output structure

Parameters, buffers and lifted constants become luminal constants that share memory with the
model (no copy). Inputs the model mutates are written back after each call, buffers too.

What torch.export fixed is checked at every call, as the exported module's guards do: each
non-tensor argument must equal the value compiled for (`InputError` otherwise) and each dynamic
dim stay in its range. torch.export's semantics also hold for the weights: in-place updates are
seen, a rebound `m.weight = nn.Parameter(...)` or `m.double()` is not (a warning says so).
A model in training mode is compiled as it runs in training mode (a warning says so where that
updates buffers, as batch norm does); random ops (dropout with p > 0, rand) draw luminal's Philox numbers, seeded per call from torch's generator. Under grad mode the call runs on the compiled joint graph, its backward compiled too (`backward.py`).
Data-dependent control flow cannot be exported: `UnsupportedError`, pointing at
`torch.compile(backend="luminal")`, which graph-breaks around it.

The compile cache is looked up right after torch.export, before the lowering (`program_key`,
through `fx_cache` as the Dynamo backend does): a hit skips the lowering to core ATen, the
import and egglog, its weights bound to this model's. A program whose lowering changes its
signature (`run_decompositions` revealing an in-place buffer update) is not stored: a hit
runs the exported program's signature.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import time
import warnings

import torch
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind
from torch.utils import _pytree as pytree

from luminal import devices
from luminal.errors import InputError, UnsupportedError
from luminal.frontends.torch import fx_cache, hf_caches
from luminal.frontends.torch.backward import needs_grad, training_call, training_reports
from luminal.frontends.torch.decompose import decompose_graph
from luminal.frontends.torch.fx_import import FxImporter
from luminal.frontends.torch.view_outputs import aten_step, find_views, replay
from luminal.frontends.torch.weight_watch import WeightWatch, state_owners


def dynamic_shapes_spec(model, args, kwargs, dynamic):
    """`dynamic` as torch.export's `dynamic_shapes`.

    None/False: static. True: every dim of every tensor input may vary (`Dim.AUTO`).
    `{"input_ids": {1: "seq"}}` or `{"input_ids": [1]}`: those dims are dynamic (`Dim.DYNAMIC`:
    torch.export infers their range, e.g. 2..max_positions; the names are for the reader);
    `torch.export.Dim` objects (named, with ranges, shared between inputs) pass through as is.
    """
    if dynamic is None or dynamic is False:
        return None
    names = _arg_names(model, args, kwargs)
    values = dict(zip(names, list(args) + list(kwargs.values())))
    if dynamic is True:
        return {n: _auto(v) for n, v in values.items()}
    if not isinstance(dynamic, dict):
        return dynamic
    def convert(spec, name):
        if spec is None:
            return None
        if isinstance(spec, (list, tuple, set)) and all(isinstance(a, int) for a in spec):
            spec = {a: f"{name}_{a}" for a in spec}
        if isinstance(spec, dict):
            return {a: torch.export.Dim.DYNAMIC if isinstance(d, str) else d for a, d in spec.items()}
        return spec

    unknown = [k for k in dynamic if k not in values]
    if unknown:
        raise InputError(f"dynamic names unknown argument(s) {unknown}; the arguments are {names}")
    return {n: convert(dynamic.get(n), n) for n in names}


def dim_labels(dynamic) -> dict[tuple[str, int], str]:
    """(argument, axis) -> the name the user gave that dynamic dim ("batch", a `Dim`'s name)."""
    if not isinstance(dynamic, dict):
        return {}
    labels = {}
    for arg, spec in dynamic.items():
        if isinstance(spec, (list, tuple, set)):
            spec = {a: f"{arg}.shape[{a}]" for a in spec if isinstance(a, int)}
        for axis, d in (spec.items() if isinstance(spec, dict) else ()):
            labels[arg, axis] = d if isinstance(d, str) else getattr(d, "__name__", f"{arg}.shape[{axis}]")
    return labels


def _last_frame(text) -> str:
    """' at file.py:N `code`' for the innermost frame a torch error or stack trace names."""
    frames = re.findall(r'File "([^"]+)", line (\d+)[^\n]*\n\s*(\S[^\n]*)', text or "")
    if frames:
        return f" at {os.path.basename(frames[-1][0])}:{frames[-1][1]} `{frames[-1][2].strip()}`"
    cause = re.search(r"Caused by: \(([^():]+):(\d+) in (\w+)\)", text or "")  # "(file.py:N in fn)"
    return f" at {os.path.basename(cause[1])}:{cause[2]} (in {cause[3]})" if cause else ""


def _unbacked_sources(graph) -> str:
    """The ops whose results have data-dependent sizes (torch's unbacked symbols), with their lines."""
    return "; ".join(f"{n.target}{_last_frame(n.meta.get('stack_trace'))} -> "
                     + ", ".join(map(str, n.meta["unbacked_bindings"]))
                     for n in graph.nodes if n.meta.get("unbacked_bindings"))


def _export(model, args, kwargs, spec):
    """torch.export (Hugging Face caches registered as pytrees first: `hf_caches`), with the failures a
    user can fix (data-dependent control flow, an input or output type that is no pytree) as luminal
    errors."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    hf_caches.register()  # a Hugging Face model's KV cache in its output: a pytree torch.export can trace
    try:
        with torch.no_grad():
            return torch.export.export(model, args, kwargs, dynamic_shapes=spec)
    except GuardOnDataDependentSymNode as exc:
        first = str(exc).strip().splitlines()[0]
        raise UnsupportedError(
            f"{type(model).__name__} has data-dependent control flow (a Python branch on a tensor's "
            f"value){_last_frame(str(exc))}, which torch.export cannot trace: {first}\nUse torch.compile(model, backend=\"luminal\") "
            "instead: it graph-breaks around the branch and runs the rest on luminal (or write the branch "
            "as torch.where / torch.cond).") from exc
    except RuntimeError as exc:  # an input or output type that is not a pytree: named, with what to do
        error = hf_caches.unknown_type_error(exc, model)
        if error is None:
            raise
        raise error from exc


def _feeds(ep) -> tuple[dict, dict, dict, list, dict]:
    """How each placeholder of `ep` is fed: (constants by placeholder, buffers fed each call by
    placeholder, mutated buffer -> its placeholder, user inputs, non-tensor user inputs' values)."""
    sig = ep.graph_signature
    state = {**ep.state_dict, **ep.constants}
    mutated_buffers = {s.target for s in sig.output_specs if s.kind is OutputKind.BUFFER_MUTATION}
    constants, buffer_feeds, buffer_args, user, guards = {}, {}, {}, [], {}
    for s in sig.input_specs:
        if s.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            if s.target in mutated_buffers:
                buffer_feeds[s.arg.name] = state[s.target]
                buffer_args[s.target] = s.arg.name
            else:
                constants[s.arg.name] = state[s.target]
        elif s.kind is InputKind.USER_INPUT:
            user.append(s.arg.name)
            if isinstance(s.arg, ConstantArgument):  # an int, float, bool, str, None: baked in
                guards[s.arg.name] = s.arg.value
        else:
            raise UnsupportedError(f"torch.export input of kind {s.kind.name} ({s.arg.name})")
    return constants, buffer_feeds, buffer_args, user, guards


def _layout(ep) -> tuple:
    """What each placeholder and output of `ep` is, by position (a cached import is positional)."""
    sig = ep.graph_signature
    return ([(s.kind, s.target) for s in sig.input_specs], [(s.kind, s.target) for s in sig.output_specs])


def program_key(ep, values: list, weights: dict, opts: dict):
    """The compile cache's key (`fx_cache.key`) of the program `ep` compiled with `opts`, before
    the lowering; `values` per placeholder: its weight or fed buffer, None for a user input;
    `weights` the placeholders that are constants (the others are fed at each call).
    Beyond the graph's nodes it spells the signature, each placeholder's traced value (dtype,
    shape and strides, symbols included), the symbols' ranges and traced sizes (the import
    checks shapes at them) and which placeholders are the same tensor. None: not cacheable."""
    from luminal.frontends.torch.dims import hints_of

    sig = ep.graph_signature
    vals = [n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"]
    spelled = [(str(v.dtype), str(v.layout), tuple(map(str, v.shape)),
                tuple(map(str, v.stride())) if v.layout is torch.strided else None, v.device.type, v.requires_grad)
               if isinstance(v, torch.Tensor) else repr(v) for v in vals]
    first = {}
    aliases = [first.setdefault(id(v), i) if v is not None else None for i, v in enumerate(values)]
    extra = repr(([(s.kind.name, repr(s.arg), s.target, s.persistent) for s in sig.input_specs],
                  [(s.kind.name, repr(s.arg), s.target) for s in sig.output_specs],
                  spelled, sorted((str(k), str(r)) for k, r in ep.range_constraints.items()),
                  sorted(hints_of(vals).items()), aliases))
    with torch.no_grad():  # the lowering runs without grad whatever the caller's mode
        return fx_cache.key(ep.graph_module, values, {id(w) for w in weights.values()}, opts,
                            level="exported program", extra=extra)


def _auto(v):
    if isinstance(v, torch.Tensor):
        return {i: torch.export.Dim.AUTO for i in range(v.ndim)}
    return None if not isinstance(v, (list, tuple, dict)) else pytree.tree_map(_auto, v)


def _arg_names(model, args, kwargs) -> list[str]:
    params = list(inspect.signature(model.forward).parameters.values())
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional[: len(args)] + list(kwargs)


def _dim_ranges(ep, user_inputs) -> list[tuple]:
    """(input, axis, symbol, lo, hi) for every dynamic input dim, from torch.export's ranges."""
    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    out = []
    for node in ep.graph_module.graph.nodes:
        val = node.meta.get("val")
        if node.op != "placeholder" or node.name not in user_inputs or not isinstance(val, torch.Tensor):
            continue
        for axis, d in enumerate(val.shape):
            name = str(d.node.expr) if isinstance(d, torch.SymInt) else None
            if name in ranges:
                r = ranges[name]
                hi = int(r.upper) if r.upper.is_Integer else 2**62  # torch spells no bound IntInfinity
                out.append((node.name, axis, name, int(r.lower), hi))
    return out


class CompiledModel:
    """A model compiled through torch.export; call it like the model."""

    def __init__(self, model, example_args=(), example_kwargs=None, *, dynamic=None, device: str = "cpu",
                 optimize: bool | None = None, name: str | None = None, precision: str | None = None,
                 options: dict | None = None):
        from luminal.search import options as search_options

        search = search_options(options, "luminal.compile")  # OptionError before the export is paid for
        example_args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
        example_kwargs = dict(example_kwargs or {})
        device = devices.resolve(device, precision)  # a bad device or precision fails before the export is paid for
        self.device, self._optimize, self._trainer, self._training_graphs = device, optimize, None, []
        self._search = search
        phases = {}
        start = time.perf_counter()
        self._labels = {}
        if isinstance(model, torch.export.ExportedProgram):  # already exported: decompose only
            self.name = name or "exported_program"
            ep = model
            self._eager = None  # the program's module is made when a grad-mode call first needs it
        else:
            self.name = name or type(model).__name__
            spec = dynamic_shapes_spec(model, example_args, example_kwargs, dynamic)
            self._labels = dim_labels(dynamic)
            ep = _export(model, example_args, example_kwargs, spec)
            phases["export"] = time.perf_counter() - start
            self._eager = model
        owners = state_owners(model, ep) if self._eager is not None else []
        self._lowering = None
        self._read_signature(ep)
        opts = {"device": device, "optimize": optimize, "search": search}
        start = time.perf_counter()
        values = self._placeholder_values()
        entry = program_key(ep, values, self._constants, opts)
        imported = entry and fx_cache.restore(entry, values, self.name, opts)
        if imported:  # the compile cache knows this program: no lowering, import or egglog
            report = imported.compiled._report
            report.phases = {**phases, **report.phases}
            self._rename = dict(zip(self._placeholder_names, imported.placeholder_names))
        else:
            if entry:
                phases["cache key"] = time.perf_counter() - start
            ep, imported = self._lower_and_compile(ep, phases, entry)
        self._imported = imported
        if getattr(model, "training", False) and any(s.kind is OutputKind.BUFFER_MUTATION for s in ep.graph_signature.output_specs):
            warnings.warn(f"luminal.compile: {self.name} is in training mode, and is compiled as it runs in "
                          "training mode: it updates buffers (batch norm's running statistics) at every call; "
                          "call model.eval() first for inference", UserWarning, stacklevel=3)
        self._outputs = list(ep.graph_signature.output_specs)
        self._mutates = any(s.kind is not OutputKind.USER_OUTPUT for s in self._outputs)
        self._in_spec, self._out_spec = ep.call_spec.in_spec, ep.call_spec.out_spec
        self._kw_order = self._in_spec.child(1).context if self._in_spec.num_children == 2 else None
        # the common call, positional tensors only: its flat inputs are the arguments (no pytree walk)
        n = self._in_spec.child(0).num_children if self._in_spec.num_children == 2 else -1
        self._positional = n if n >= 0 and pytree.tree_flatten((tuple(range(n)), {}))[1] == self._in_spec else -1
        self.compiled = self._imported.compiled
        # the weights luminal reads in place, their linear layers' packed once (`CompiledGraph.pack_weights`):
        # an in-place change (torch's version counter) has them packed anew at the next call
        self._weights = WeightWatch(self.name, owners, tuple(t for t in self._constants.values() if isinstance(t, torch.Tensor)),
                                    self.compiled)
        self.compiled.pack_weights()

    def weights_changed(self) -> None:
        """A weight was written in place past torch's version counter (`p.data.copy_()`, a NumPy
        view): the next call packs the linear layers' weights anew (`CompiledGraph.pack_weights`).
        Changes through torch (`with torch.no_grad(): p.mul_(2)`, `load_state_dict`) need no call."""
        self.compiled.weights_changed()

    def _read_signature(self, ep):
        self.exported = ep
        self._views = None  # `_view_outputs`, found in this program on the first call
        self._constants, self._buffer_feeds, self._buffer_args, user, self._guards = _feeds(ep)
        self._user_inputs = user
        self._ranges = _dim_ranges(ep, user)
        self._placeholder_names = [n.name for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
        # a call's placeholder values: the user's inputs and the fed buffers in their slots, None in the
        # weights' (compiled in: `Imported.fed` never reads them), without a lookup per weight
        fed = set(user) | set(self._buffer_feeds)
        self._fed_slots = [(k, n) for k, n in enumerate(self._placeholder_names) if n in fed]
        self._no_values = [None] * len(self._placeholder_names)

    def _placeholder_values(self) -> list:
        """Per placeholder: its weight or fed buffer; None for a user input (the key spells those
        from the program, which fixed their dtypes, shapes and values)."""
        fed = {**self._constants, **self._buffer_feeds}
        return [fed.get(n) for n in self._placeholder_names]

    def _lower(self, ep):
        """(program, its core-ATen graph module, the import of it): made once, and on a compile
        cache hit only when asked for (`graph`, `graph_module`)."""
        if self._lowering is None:
            start = time.perf_counter()
            ep, gm, how = self._decompose(ep)
            lower_s = time.perf_counter() - start
            # the lowered graph has the program's placeholders in order, though FX may have renamed
            # some (`input` -> `input_1`): the signature's names are translated at this boundary
            names = [n.name for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
            rename = dict(zip(names, (n.name for n in gm.graph.nodes if n.op == "placeholder")))
            constants = _feeds(ep)[0]
            try:
                built = FxImporter(gm, self.name).build({rename[k]: v for k, v in constants.items()})
            except UnsupportedError as exc:  # name where a data-dependent size comes from
                if "data-dependent size" not in str(exc) or not _unbacked_sources(ep.graph):
                    raise
                raise UnsupportedError(f"{self.name}: luminal's graphs take their sizes from the input shapes, "
                                       f"not from values: {exc}; the data-dependent sizes come from: "
                                       f"{_unbacked_sources(ep.graph)}") from exc
            self._lowering = (ep, gm, how, lower_s, rename, built)
        return self._lowering

    def _lower_and_compile(self, ep, phases: dict, entry):
        """The miss: the program lowered, imported and compiled; stored in the compile cache
        (`entry`) where the lowering kept the program's signature, so a hit can use the program."""
        lowered, gm, how, phases["lower"], self._rename, built = self._lower(ep)
        if lowered is not ep:  # run_decompositions made a new program: its signature is the one fed
            self._read_signature(lowered)
        imported = built.compile(device=self.device, optimize=self._optimize, name=self.name,
                                 phases=phases, notes=[f"lowered to core ATen by {how}"], search=self._search)
        if entry and _layout(lowered) == _layout(ep) and len(imported.placeholders) == len(self._placeholder_names):
            entry.placeholders = [n.name for n in imported.placeholders]
            fx_cache.store(entry, imported, built.weight_arrays)
        return lowered, imported

    @property
    def graph_module(self):
        """The program lowered to core ATen (on a compile cache hit, lowered now)."""
        return self._lower(self.exported)[1]

    @property
    def graph(self):
        """The builder graph imported from `graph_module` (on a compile cache hit, imported now)."""
        return self._imported.g if self._imported.g is not None else self._lower(self.exported)[5].g

    @staticmethod
    def _decompose(ep):
        """The program as a core-ATen graph: decomposed one distinct call at a time where that
        is exact (no mutation, static shapes: see `decompose`), else `run_decompositions()`.
        The placeholders and outputs keep their names and order, so the signature holds."""
        mutates = any(s.kind is not OutputKind.USER_OUTPUT for s in ep.graph_signature.output_specs)
        with torch.no_grad():
            gm = None if mutates else decompose_graph(ep.graph_module)
        if gm is not None:
            return ep, gm, gm.meta["luminal_lowering"]
        from torch._export.verifier import SpecViolationError
        from torch.fx.experimental.symbolic_shapes import PendingUnbackedSymbolNotFound

        try:
            ep = ep.run_decompositions()
        except PendingUnbackedSymbolNotFound as exc:  # torch's limit: the re-trace loses unbacked sizes
            raise UnsupportedError(
                "torch.export traced the model, but torch's run_decompositions() cannot re-trace a program "
                "with data-dependent sizes (torch's PendingUnbackedSymbolNotFound); they come from: "
                f"{_unbacked_sources(ep.graph)}."
                "\nUse torch.compile(model, backend=\"luminal\"): it graph-breaks there") from exc
        except SpecViolationError as exc:  # torch's re-trace drops tensors the model built while traced
            raise UnsupportedError(
                f"torch.export traced the model, but torch's run_decompositions() fails on it: {exc} (a tensor "
                "the model creates while it runs, which torch.export lifts to a constant: a Hugging Face "
                "cache's empty layers with use_cache=True, in an encoder-decoder or a mixture-of-experts "
                "model). Call it with use_cache=False, or use torch.compile(model, backend=\"luminal\")") from exc
        return ep, ep.graph_module, "run_decompositions"

    def __call__(self, *args, **kwargs):
        if self._kw_order is not None:
            missing = [k for k in kwargs if k not in self._kw_order]
            if missing:
                raise InputError(f"unexpected keyword argument(s) {missing}; compiled with {list(self._kw_order)}")
            kwargs = {k: kwargs[k] for k in self._kw_order if k in kwargs}
        if not kwargs and len(args) == self._positional and all(isinstance(a, torch.Tensor) for a in args):
            flat = args
        else:
            flat, spec = pytree.tree_flatten((tuple(args), kwargs))
            if spec != self._in_spec:
                raise InputError(f"inputs do not match the example the model was compiled with:\n{spec}\nvs\n{self._in_spec}")
        by_name = dict(zip(self._user_inputs, flat))
        self._check(by_name)
        if not needs_grad(flat, self._weights.owner_tensors):
            self._weights.seen()
            return pytree.tree_unflatten(self._run(by_name), self._out_spec)
        self._check_tensors(by_name)
        if self._trainer is None:  # grad mode: the joint graph, forward and backward compiled (backward.py)
            module = self._eager if self._eager is not None else self.exported.module()
            self._trainer = training_call(module, self.device, self._optimize, self._training_graphs,
                                          dynamic=bool(self._ranges))
        return self._trainer(*args, **kwargs)

    def _check_tensors(self, by_name):
        """Grad mode runs the joint graph (backward.py), not the graph compiled here: the inputs are
        held to the same static shapes and dtypes (dynamic dims' ranges: `_check`)."""
        fakes = {n.name: n.meta.get("val") for n in self.exported.graph.nodes if n.op == "placeholder"}
        for name, value in by_name.items():
            fake = fakes.get(name)
            if not isinstance(fake, torch.Tensor) or not isinstance(value, torch.Tensor):
                continue
            if value.dtype != fake.dtype:
                raise InputError(f"input {name!r} has dtype {value.dtype}, expected {fake.dtype}; cast it before calling")
            static = [d if isinstance(d, int) else None for d in fake.shape]
            if value.ndim != len(static) or any(d is not None and d != n for d, n in zip(static, value.shape)):
                raise InputError(f"input {name!r} has shape {tuple(value.shape)}, expected {tuple(fake.shape)} "
                                 "(compiled for these static sizes)")

    def _check(self, by_name):
        """What torch.export assumed while tracing: non-tensor arguments, dim ranges, the weights."""
        for name, value in self._guards.items():
            got = by_name[name]
            if type(got) is not type(value) or got != value:
                raise InputError(f"argument {name!r} is {got!r}; the model was compiled for {name}={value!r} "
                                 "(torch.export bakes non-tensor arguments in): compile again for this value")
        for name, axis, symbol, lo, hi in self._ranges:
            size = by_name[name].shape[axis]
            if not lo <= size <= hi:
                label = self._labels.get((name, axis), symbol)
                why = (" (torch.export specialises sizes 0 and 1, where a dim broadcasts, so a dynamic dim "
                       "starts at 2: compile with an example of that size for it)" if size < 2 <= lo else "")
                raise InputError(f"input {name!r} dim {axis} ({label}) is {size}; the model was compiled for "
                                 f"{label} in [{lo}, {hi if hi < 2**62 else 'inf'}]{why}")
        self._weights.check_rebound()

    def _view_outputs(self) -> list:
        """`view_outputs.find_views` of the user outputs over the user inputs and fed buffers: made
        as those views in torch at each call, as the exported module returns them (an in-place
        change of the input or output shows in the view). Found once, in the program fed."""
        if self._views is None:
            nodes = list(self.exported.graph_module.graph.nodes)
            fed = set(self._user_inputs) | set(self._buffer_feeds)
            inputs = {n: n.name for n in nodes if n.op == "placeholder" and n.name in fed}
            outputs = [out if spec.kind is OutputKind.USER_OUTPUT else None
                       for out, spec in zip(nodes[-1].args[0], self._outputs)]
            self._views = find_views(outputs, inputs, aten_step)
        return self._views

    def _run(self, by_name) -> list:
        """The flat user outputs for the user inputs `by_name`; mutated buffers and inputs written back."""
        by_name = {**by_name, **self._buffer_feeds}
        values = self._no_values.copy()
        for k, name in self._fed_slots:
            values[k] = by_name.get(name)
        results = self._imported(values)
        if self._view_outputs():
            results = list(results)
            for i, (kind, j), steps in self._views:
                value = by_name[j] if kind == "input" else results[j]
                if isinstance(value, torch.Tensor):
                    results[i] = replay(value, steps)
        user_out = []
        for s, value in zip(self._outputs, results):
            if s.kind is OutputKind.USER_OUTPUT:
                user_out.append(value)
            elif s.kind is OutputKind.BUFFER_MUTATION:
                self.exported.state_dict.get(s.target, self.exported.constants.get(s.target)).copy_(value)
            elif s.kind is OutputKind.USER_INPUT_MUTATION:
                by_name[s.target].copy_(value)
        return user_out

    def report(self):
        """The compile report; after a grad-mode call, with the forward and backward graphs'."""
        report = self.compiled.report()
        extra = training_reports(self._training_graphs)
        return dataclasses.replace(report, sections=[*report.sections, *extra]) if extra else report

    def cuda_source(self) -> str:
        return self.compiled.cuda_source()

    def roofline(self, gpu: str = "h200", bindings: dict | None = None, **options) -> list[dict]:
        """Per launch: kernel, bytes, flops, predicted_us on `gpu` (`CompiledGraph.roofline`)."""
        return self.compiled.roofline(gpu, bindings, **options)

    def save(self, path, weights: str = "embed", weight_specs: dict | None = None, archs: tuple[str, ...] = ()):
        """Write a `.lum` that `luminal.load(path, device=...)` runs without torch or egglog.

        The archive keeps, as JSON metadata, what `saved.LoadedModel` needs to be called like the
        model: the user inputs (and their graph input names), the values non-tensor arguments were
        compiled for, the current value of every buffer the model mutates and which outputs update
        it, which graph outputs are user outputs, and the output structure (`treespec_dumps`)."""
        from torch.utils._pytree import treespec_dumps

        from luminal.frontends.torch.fx_import import to_numpy
        from luminal.frontends.torch.saved import FRONTEND, encode_array

        try:
            out_spec = treespec_dumps(self._out_spec)
        except Exception:  # a container type pytree cannot serialise: outputs load as a flat list
            out_spec = None
        user = [i for i, s in enumerate(self._outputs) if s.kind is OutputKind.USER_OUTPUT]
        kinds = self._imported.flat_kinds
        out_name = {i: self._imported.out_names[kinds[i][1]] for i in range(len(self._outputs)) if kinds[i][0] == "tensor"}
        state = {s.target: {"input": self._rename[self._buffer_args[s.target]], "output": out_name[i],
                            "value": encode_array(to_numpy(self._buffer_feeds[self._buffer_args[s.target]]))}
                 for i, s in enumerate(self._outputs) if s.kind is OutputKind.BUFFER_MUTATION}
        input_mutations = [[s.target, out_name[i]] for i, s in enumerate(self._outputs)
                           if s.kind is OutputKind.USER_INPUT_MUTATION]
        scalars = (int, float, bool, str, type(None))
        meta = {"frontend": FRONTEND, "model": self.name, "user_inputs": self._user_inputs,
                "graph_inputs": [self._rename.get(n, n) for n in self._user_inputs],
                "guards": {k: v for k, v in self._guards.items() if isinstance(v, scalars)},
                "state": state, "input_mutations": input_mutations,
                "user_outputs": [["tensor", self._imported.out_names[kinds[i][1]]] if kinds[i][0] == "tensor"
                                 else ["value", kinds[i][1] if isinstance(kinds[i][1], scalars) else None]
                                 if kinds[i][0] == "value" else [kinds[i][0], self._imported.out_names[kinds[i][1]]]
                                 for i in user],
                "out_spec": out_spec, "mutates_state": len(user) != len(self._outputs)}
        return self.compiled.save(path, meta, weights=weights, weight_specs=weight_specs, archs=archs)

    def __repr__(self) -> str:
        return f"<luminal.CompiledModel {self.name} on {self.device.name}>"


def compile(model, example_args=(), example_kwargs=None, *, dynamic=None, device: str = "cpu",  # noqa: A001
            optimize: bool | None = None, precision: str | None = None, options: dict | None = None) -> CompiledModel:
    """Compile `model` (an `nn.Module`, or a `torch.export.ExportedProgram` as is) through
    torch.export for `device` ("cpu", "cuda", "cuda-emulator"). `precision` ("float64" or
    "float32"): the model's, fixed; None: `luminal.set_precision`'s at each call, else the
    device's default (`luminal.precision`). `options`: {"search": seconds} measures the device's
    variants within that budget and keeps the fastest that matches the reference (`luminal.search`)."""
    return CompiledModel(model, example_args, example_kwargs, dynamic=dynamic, device=device, optimize=optimize,
                         precision=precision, options=options)
