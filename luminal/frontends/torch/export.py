"""`luminal.compile(model, example_args)`: torch.export -> core ATen -> HLIR -> a runtime.

    cm = luminal.compile(model, (input_ids,))                  # static shapes
    cm = luminal.compile(model, (ids,), dynamic={"input_ids": {1: "seq"}})  # a symbolic dim
    out = cm(input_ids)                                       # the model's output structure

Parameters, buffers and lifted constants become luminal constants that share memory with the
model (no copy). Inputs the model mutates are written back after each call, buffers too.
"""

from __future__ import annotations

import inspect
import time

import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from luminal.errors import InputError, UnsupportedError
from luminal.frontends.torch.decompose import decompose_graph
from luminal.frontends.torch.fx_import import FxImporter


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
                 optimize: bool | None = None, name: str | None = None):
        example_args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
        example_kwargs = dict(example_kwargs or {})
        self.device = device
        phases = {}
        start = time.perf_counter()
        if isinstance(model, torch.export.ExportedProgram):  # already exported: decompose only
            self.name = name or "exported_program"
            ep = model
        else:
            self.name = name or type(model).__name__
            spec = dynamic_shapes_spec(model, example_args, example_kwargs, dynamic)
            with torch.no_grad():
                ep = torch.export.export(model, example_args, example_kwargs, dynamic_shapes=spec)
            phases["export"] = time.perf_counter() - start
        start = time.perf_counter()
        ep, gm, how = self._decompose(ep)
        phases["lower"] = time.perf_counter() - start
        self.exported = ep
        self.graph_module = gm
        sig = ep.graph_signature
        state = {**ep.state_dict, **ep.constants}
        mutated_buffers = {s.target for s in sig.output_specs if s.kind is OutputKind.BUFFER_MUTATION}
        constants, self._buffer_feeds, user = {}, {}, []
        for s in sig.input_specs:
            if s.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                if s.target in mutated_buffers:
                    self._buffer_feeds[s.arg.name] = state[s.target]
                else:
                    constants[s.arg.name] = state[s.target]
            elif s.kind is InputKind.USER_INPUT:
                user.append(s.arg.name)
            else:
                raise UnsupportedError(f"torch.export input of kind {s.kind.name} ({s.arg.name})")
        self._user_inputs = user
        self._ranges = _dim_ranges(ep, user)
        # the lowered graph has the program's placeholders in order, though FX may have renamed
        # some (`input` -> `input_1`): the signature's names are translated at this boundary
        names = [n.name for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
        rename = dict(zip(names, (n.name for n in gm.graph.nodes if n.op == "placeholder")))
        importer = FxImporter(gm, self.name)
        self._imported = importer.build({rename[k]: v for k, v in constants.items()}).compile(device=device, optimize=optimize, name=self.name,
                                                           phases=phases, notes=[f"lowered to core ATen by {how}"])
        self._placeholder_names = names
        self._outputs = list(sig.output_specs)
        self._in_spec, self._out_spec = ep.call_spec.in_spec, ep.call_spec.out_spec
        self._kw_order = self._in_spec.child(1).context if self._in_spec.num_children == 2 else None
        self.graph = self._imported.g
        self.compiled = self._imported.compiled

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
        ep = ep.run_decompositions()
        return ep, ep.graph_module, "run_decompositions"

    def __call__(self, *args, **kwargs):
        if self._kw_order is not None:
            missing = [k for k in kwargs if k not in self._kw_order]
            if missing:
                raise InputError(f"unexpected keyword argument(s) {missing}; compiled with {list(self._kw_order)}")
            kwargs = {k: kwargs[k] for k in self._kw_order if k in kwargs}
        flat, spec = pytree.tree_flatten((tuple(args), kwargs))
        if spec != self._in_spec:
            raise InputError(f"inputs do not match the example the model was compiled with:\n{spec}\nvs\n{self._in_spec}")
        by_name = dict(zip(self._user_inputs, flat))
        for name, axis, symbol, lo, hi in self._ranges:  # what torch.export assumed while tracing
            size = by_name[name].shape[axis]
            if not lo <= size <= hi:
                raise InputError(f"input {name!r} dim {axis} is {size}; the model was compiled for "
                                 f"{symbol} in [{lo}, {hi}]")
        by_name.update(self._buffer_feeds)
        values = [by_name.get(n) for n in self._placeholder_names]
        results = self._imported(values)
        user_out = []
        for s, value in zip(self._outputs, results):
            if s.kind is OutputKind.USER_OUTPUT:
                user_out.append(value)
            elif s.kind is OutputKind.BUFFER_MUTATION:
                self.exported.state_dict.get(s.target, self.exported.constants.get(s.target)).copy_(value)
            elif s.kind is OutputKind.USER_INPUT_MUTATION:
                by_name[s.target].copy_(value)
        return pytree.tree_unflatten(user_out, self._out_spec)

    def report(self):
        return self.compiled.report()

    def cuda_source(self) -> str:
        return self.compiled.cuda_source()

    def save(self, path, weights: str = "embed", weight_specs: dict | None = None, archs: tuple[str, ...] = ()):
        """Write a `.lum` that `luminal.load(path, device=...)` runs without torch or egglog.

        The archive keeps, as JSON metadata, the user inputs, which graph outputs are user
        outputs, and the output structure (`treespec_dumps`; restored where torch is importable)."""
        from torch.utils._pytree import treespec_dumps

        try:
            out_spec = treespec_dumps(self._out_spec)
        except Exception:  # a container type pytree cannot serialise: outputs load as a flat list
            out_spec = None
        user = [i for i, s in enumerate(self._outputs) if s.kind is OutputKind.USER_OUTPUT]
        kinds = self._imported.flat_kinds
        meta = {"frontend": "torch.export", "model": self.name, "user_inputs": self._user_inputs,
                "user_outputs": [["tensor", self._imported.out_names[kinds[i][1]]] if kinds[i][0] == "tensor"
                                 else ["value", kinds[i][1] if isinstance(kinds[i][1], (int, float, bool, str, type(None))) else None]
                                 if kinds[i][0] == "value" else [kinds[i][0], self._imported.out_names[kinds[i][1]]]
                                 for i in user],
                "out_spec": out_spec, "mutates_state": len(user) != len(self._outputs)}
        return self.compiled.save(path, meta, weights=weights, weight_specs=weight_specs, archs=archs)

    def __repr__(self) -> str:
        return f"<luminal.CompiledModel {self.name} on {self.device}>"


def compile(model, example_args=(), example_kwargs=None, *, dynamic=None, device: str = "cpu",  # noqa: A001
            optimize: bool | None = None) -> CompiledModel:
    """Compile `model` (an `nn.Module`, or a `torch.export.ExportedProgram` as is) through
    torch.export for `device` ("cpu", "cuda", "cuda-emulator")."""
    return CompiledModel(model, example_args, example_kwargs, dynamic=dynamic, device=device, optimize=optimize)
