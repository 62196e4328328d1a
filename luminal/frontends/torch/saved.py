"""A model saved by `CompiledModel.save`, loaded: called like the torch model it came from.

`luminal.load(path)` hands a `.lum` written by `luminal.compile(...).save()` to `LoadedModel`,
which restores what the graph alone does not know (the archive's `frontend` metadata):
- the call signature: positional and keyword arguments by the model's own names, non-tensor
  arguments checked against the values compiled for;
- the state: buffers the model mutates are inputs of the graph; their saved values are fed,
  and each call's new values kept in `state` (by buffer name); inputs the model mutates are
  written back;
- the output structure: the model's own (a `CausalLMOutputWithPast`, a dict, a tuple) as torch
  tensors where torch is importable, else the flat list of NumPy arrays.
Calling it with one dict of graph inputs is the graph's own convention (`CompiledGraph`): flat
outputs in `output_names` order. This module imports neither torch nor torch.export.
"""

from __future__ import annotations

import base64
import warnings

import numpy as np

from luminal.errors import InputError, LuminalError
from luminal.hlir.dtypes import DType

FRONTEND = "torch.export"


def encode_array(a: np.ndarray) -> dict:
    """A small array (a mutated buffer's value) as JSON."""
    a = np.ascontiguousarray(a).reshape(a.shape)
    return {"dtype": DType.of(a.dtype).short, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}


def decode_array(d: dict, name: str) -> np.ndarray:
    from luminal.saving import SaveFormatError

    try:
        return np.frombuffer(base64.b64decode(d["data"], validate=True), DType.of(d["dtype"]).numpy).reshape(d["shape"]).copy()
    except (KeyError, TypeError, ValueError, LuminalError) as exc:  # binascii.Error is a ValueError
        raise SaveFormatError(f"the saved state {name!r} is malformed: {exc}") from None


def user_outputs(meta: dict, by_name: dict) -> list:
    """The model's flat outputs from the graph's outputs by name (see `CompiledModel.save`)."""
    return [value if kind == "value" else by_name[value] if kind == "tensor" else _complex(by_name[value])
            if kind == "complex" else int(by_name[value]) for kind, value in meta["user_outputs"]]


def _complex(planes):
    """A complex output from its (..., 2) planes (a torch tensor or a NumPy array)."""
    if hasattr(planes, "detach"):
        from luminal.frontends.torch.fx_import import _complex_of

        return _complex_of(planes)
    planes = np.ascontiguousarray(planes)
    return planes.view(np.complex64 if planes.dtype == np.float32 else np.complex128)[..., 0]


def structured(meta: dict, flat: list):
    """`flat` in the model's output structure, as torch tensors (needs torch and the output's type)."""
    import torch
    from torch.utils._pytree import tree_unflatten, treespec_loads

    from luminal.runtime.torch_arrays import numpy_to_torch

    flat = [numpy_to_torch(np.asarray(r)) if isinstance(r, np.ndarray) else r for r in flat]
    flat = [torch.tensor(r) if isinstance(r, np.generic) else r for r in flat]
    if meta.get("out_spec") is None:
        return flat
    from luminal.frontends.torch import hf_caches

    hf_caches.register()  # a saved Hugging Face model's cache: its type registered as at the save
    try:
        spec = treespec_loads(meta["out_spec"])
    except NotImplementedError as exc:  # a container type not registered here (its package not imported)
        warnings.warn(f"luminal: outputs as a flat list: {exc} (import the package that defines it first)",
                      UserWarning, stacklevel=3)
        return flat
    return tree_unflatten(flat, spec)


class LoadedModel:
    """A loaded torch model: `model(*args, **kwargs)` as before saving; the `CompiledGraph` it wraps
    answers everything else (`runtime`, `output_names`, `report()`, ...)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.meta = compiled.frontend_meta
        self.state = {name: decode_array(d["value"], name) for name, d in self.meta.get("state", {}).items()}

    def __getattr__(self, name):
        if name in ("compiled", "meta", "state"):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
            return self.compiled(args[0])
        names = self.meta["user_inputs"]
        if len(args) > len(names):
            raise InputError(f"{len(args)} positional arguments given; {self.compiled.name} takes {names}")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names or k in given:
                raise InputError(f"unexpected or repeated argument {k!r}; {self.compiled.name} takes {names}")
            given[k] = v
        for name, value in self.meta.get("guards", {}).items():
            if name in given and given[name] != value:
                raise InputError(f"argument {name!r} is {given[name]!r}; the model was compiled for {name}={value!r}")
        graph_inputs = set(self.compiled.input_names) | set(self.compiled.unused_inputs)
        missing = [n for n in names if n not in given]
        if missing:
            raise InputError(f"missing argument(s) {missing}; {self.compiled.name} takes {names}")
        rename = dict(zip(names, self.meta.get("graph_inputs", names)))
        feeds = {rename[n]: v for n, v in given.items() if rename[n] in graph_inputs}
        feeds.update({d["input"]: self.state[n] for n, d in self.meta.get("state", {}).items()})
        for n, v in given.items():  # an int argument that varies: its symbol's zero-cost carrier
            if f"_dim_{rename[n]}" in graph_inputs:
                feeds[f"_dim_{rename[n]}"] = np.empty(int(v), np.bool_)
        by_name = dict(zip(self.compiled.output_names, self.compiled(feeds)))
        for name, d in self.meta.get("state", {}).items():
            self.state[name] = by_name[d["output"]]
        for name, out in self.meta.get("input_mutations", []):  # by the user's argument name
            _write_back(given[name], by_name[out])
        flat = user_outputs(self.meta, by_name)
        try:
            return structured(self.meta, flat)
        except ImportError:  # no torch here: NumPy arrays
            return flat

    def __repr__(self) -> str:
        return f"<luminal.LoadedModel {self.meta.get('model', self.compiled.name)} on {self.compiled.device.name}>"


def _write_back(target, value):
    if hasattr(target, "copy_"):  # a torch tensor
        from luminal.runtime.torch_arrays import numpy_to_torch

        target.copy_(numpy_to_torch(np.asarray(value)) if isinstance(value, np.ndarray) else value)
    else:
        np.copyto(target, value)
