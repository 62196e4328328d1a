"""Sequences and optionals as values at the graph boundary, in the shapes onnxruntime's Python
API takes and returns them: a sequence of tensors is a Python list of arrays, an optional is
None (empty) or its value (an array, or a list for an optional sequence).

Inputs (`StructuredModel`): a sequence input is bound per call as a list of arrays, and its
length and its elements' dtypes and ranks are what the compiled graph specializes on. For each
such signature the model is rewritten once: the sequence becomes one tensor input per element
(`x[0]`, `x[1]`, ...; their dims are symbols of their own, so one build serves every element
size) feeding a SequenceConstruct (SequenceEmpty for an empty list) named as the input, an empty
optional becomes an `Optional` node without input, a present optional tensor a plain input. The
importer then sees the sequence it already represents at compile time (a Python list of values),
so every sequence op keeps its compile-time lowering and fuses with the numeric work around it.
Running the sequence ops on the host instead would cut the model at each of them; compiling per
length is what the importer already does for other values a graph specializes on (and a
sequence's length is one of them: SequenceAt, SplitToSequence, SequenceMap all need it), at the
cost of one build per distinct length (the last COMPILED_KEPT kept), as a host Loop that grows a
sequence builds its body once per length.

Outputs (`flatten` / `regroup`): a graph output whose value is a sequence is returned by the
compiled graph as its elements, one output each, and regrouped into a list after each call; an
empty optional is None. The layout is per compiled graph, since a sequence's length may depend
on values the model compiles per value of (SplitToSequence's split).
"""

from __future__ import annotations

import collections
import threading

import numpy as np
import onnx
from onnx import helper

from luminal.frontends.onnx.errors import OnnxImportError, OnnxInputError
from luminal.frontends.onnx.values import IOInfo, gather_feeds

COMPILED_KEPT = 32  # signatures (lengths, element dtypes and ranks, presence) a model keeps compiled


def kind(tp: onnx.TypeProto) -> str | None:
    return tp.WhichOneof("value")


def structured_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that are sequences or optionals (not initializers)."""
    inits = {i.name for i in proto.graph.initializer}
    return [vi for vi in proto.graph.input if vi.name not in inits and kind(vi.type) in ("sequence_type", "optional_type")]


def check_types(graph: onnx.GraphProto) -> None:
    """Graph inputs and outputs are tensors, sequences of tensors, or optionals of either."""
    for vi in list(graph.input) + list(graph.output):
        where = "output" if vi in graph.output else "input"
        tp, what = vi.type, kind(vi.type)
        if what == "optional_type":
            tp, what = tp.optional_type.elem_type, kind(tp.optional_type.elem_type)
        if what == "sequence_type":
            tp, what = tp.sequence_type.elem_type, kind(tp.sequence_type.elem_type)
        if what not in (None, "tensor_type"):
            raise OnnxImportError(f"graph {where} {vi.name!r} holds a {what}; luminal takes and returns tensors, "
                                  "sequences of tensors and optionals of them (and ZipMap's maps)")


def _np_dtype(elem_type: int):
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)) if elem_type else None
    except (KeyError, TypeError):
        return None


def declared_elem(tp: onnx.TypeProto):
    """The NumPy dtype of the tensors a (sequence / optional) type holds; None if undeclared."""
    while kind(tp) in ("sequence_type", "optional_type"):
        tp = tp.sequence_type.elem_type if kind(tp) == "sequence_type" else tp.optional_type.elem_type
    return _np_dtype(tp.tensor_type.elem_type) if kind(tp) == "tensor_type" else None


# --- outputs -----------------------------------------------------------------------------------
def flatten(importer, outputs, declared: dict) -> tuple[list, list[str], list | None]:
    """The tensors a compiled graph returns for `outputs` (the importer's (name, Value, elem)),
    their names, and the layout `regroup` rebuilds the values from (None when every output is a
    tensor): per output (kind, count, dtype), kind "tensor", "seq" or "none" (an empty optional).
    `declared`: output name -> its TypeProto."""
    tensors, names, layout = [], [], []
    for name, value, elem in outputs:
        tp = declared.get(name)
        if value.seq is not None:
            items = []
            for i, item in enumerate(value.seq):
                if item.seq is not None or item.empty:
                    raise OnnxImportError(f"graph output {name!r}: element {i} is a sequence or an empty optional; "
                                          "luminal returns sequences of tensors")
                items.append(importer.tensor(item))
            dtype = declared_elem(tp) if tp is not None else None
            layout.append(("seq", len(items), dtype or (items[0].dtype.numpy if items else None)))
            tensors += items
            names += [f"{name}[{i}]" for i in range(len(items))]
        elif value.empty:
            layout.append(("none", 0, None))
        else:
            t = importer.tensor(value)
            dtype = _np_dtype(elem) or (declared_elem(tp) if tp is not None else None) or t.dtype.numpy
            layout.append(("tensor", 1, dtype))
            tensors.append(t)
            names.append(name)
    if all(k == "tensor" for k, _, _ in layout):
        return tensors, names, None
    return tensors, names, layout


def positions(layout) -> list[int]:
    """Each output's first position among the compiled graph's outputs."""
    out, at = [], 0
    for _, count, _ in layout:
        out.append(at)
        at += count
    return out


def regroup(results: list, layout) -> list:
    """The compiled graph's results as the model's outputs: lists for sequences, None for empty
    optionals, each tensor cast to its declared dtype (narrow types are computed widened)."""

    def cast(r, dtype):
        return r.astype(dtype, copy=False) if dtype is not None and r.dtype != dtype else r

    out, at = [], 0
    for k, count, dtype in layout:
        part = results[at:at + count]
        at += count
        out.append(cast(part[0], dtype) if k == "tensor" else None if k == "none" else [cast(r, dtype) for r in part])
    return out


def info(name: str, layout_entry) -> tuple:
    """(dtype, shape) of the IOInfo of a sequence output (an object array of its length: a list)
    or of an empty optional (its declared dtype)."""
    k, _, dtype = layout_entry
    if k == "seq":
        return np.dtype(object), (f"len({name})",)
    return dtype, ()


# --- values between host steps (staged.py) ---------------------------------------------------
def is_structured(value) -> bool:
    return value is None or isinstance(value, list)


def kind_key(value) -> tuple:
    return ("none",) if value is None else ("seq", value[0].dtype.str if value else None)


def copy_value(value):
    return None if value is None else [np.array(v) for v in value] if isinstance(value, list) else np.array(value)


def body_input_info(name: str, value, declared) -> onnx.ValueInfoProto:
    """The declared type of a sequence or optional input of a body (its own declaration, else a
    sequence of the elements' type, an optional of undeclared type for None)."""
    if declared is not None and declared.type.WhichOneof("value") in ("sequence_type", "optional_type"):
        # its element type without the shape: a body's state may grow past what it declares (the
        # node suite's Loop over an optional sequence of scalars appends vectors), as onnxruntime allows
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(declared)
        tp = vi.type
        while kind(tp) in ("sequence_type", "optional_type"):
            tp = tp.sequence_type.elem_type if kind(tp) == "sequence_type" else tp.optional_type.elem_type
        if kind(tp) == "tensor_type":
            tp.tensor_type.ClearField("shape")
        return vi
    elem = helper.np_dtype_to_tensor_dtype(value[0].dtype) if value else onnx.TensorProto.UNDEFINED
    tensor = helper.make_tensor_type_proto(elem, None)
    tp = helper.make_optional_type_proto(tensor) if value is None else helper.make_sequence_type_proto(tensor)
    return helper.make_value_info(name, tp)


# --- inputs ------------------------------------------------------------------------------------
def _elem_type(tp: onnx.TypeProto) -> onnx.TypeProto:
    return tp.optional_type.elem_type if kind(tp) == "optional_type" else tp


def _tensor_checks(name: str, arr, tt, what: str) -> None:
    """`arr` against a declared tensor type: dtype, rank, static dims (OnnxInputError naming it)."""
    want = _np_dtype(tt.elem_type)
    if want is not None and arr.dtype != want:
        raise OnnxInputError(f"input {name!r}: {what} has dtype {arr.dtype}, the model declares {want}")
    if tt.HasField("shape"):
        dims = tt.shape.dim
        if arr.ndim != len(dims):
            raise OnnxInputError(f"input {name!r}: {what} has shape {arr.shape} ({arr.ndim} dims), the model "
                                 f"declares {len(dims)} dims")
        for axis, d in enumerate(dims):
            if d.HasField("dim_value") and d.dim_value >= 0 and arr.shape[axis] != d.dim_value:
                raise OnnxInputError(f"input {name!r}: {what} has shape {arr.shape}, the model declares dim {axis} "
                                     f"= {d.dim_value}")


def signature(vi: onnx.ValueInfoProto, value) -> tuple:
    """What the compiled graph specializes on for structured input `vi` given `value`:
    ("none",), ("tensor", dtype, ndim) or ("seq", ((dtype, ndim), ...)); a value of the wrong
    kind, element dtype or rank is an OnnxInputError naming the input."""
    name, tp = vi.name, vi.type
    optional = kind(tp) == "optional_type"
    tp = _elem_type(tp)
    if value is None:
        if not optional:
            raise OnnxInputError(f"input {name!r} is a sequence of tensors; None is only an empty optional")
        return ("none",)
    if kind(tp) == "tensor_type":
        if isinstance(value, (list, tuple)):
            raise OnnxInputError(f"input {name!r} is an optional tensor; give an array or None, not a "
                                 f"{type(value).__name__}")
        arr = np.asarray(value)
        _tensor_checks(name, arr, tp.tensor_type, "the array")
        return ("tensor", arr.dtype.str, arr.ndim)
    if not isinstance(value, (list, tuple)):
        raise OnnxInputError(f"input {name!r} is a sequence of tensors; give a list of arrays"
                             f"{' or None' if optional else ''}, not a {type(value).__name__}")
    elems = [np.asarray(v) for v in value]
    tt = tp.sequence_type.elem_type.tensor_type
    for i, arr in enumerate(elems):
        _tensor_checks(name, arr, tt, f"element {i}")
        if arr.dtype != elems[0].dtype:
            raise OnnxInputError(f"input {name!r}: element {i} has dtype {arr.dtype}, element 0 {elems[0].dtype}; "
                                 "a sequence holds one dtype")
        if arr.dtype == object:
            raise OnnxInputError(f"input {name!r}: element {i} is not a numeric array")
    return ("seq", tuple((a.dtype.str, a.ndim) for a in elems))


def rewrite(proto: onnx.ModelProto, signatures: dict) -> onnx.ModelProto:
    """`proto` with each structured input made of tensor inputs and nodes for `signatures`."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    inputs, front = [], []
    for vi in proto.graph.input:
        sig = signatures.get(vi.name)
        if sig is None:
            inputs.append(vi)
            continue
        tp = _elem_type(vi.type)
        if sig[0] == "none":
            front.append(helper.make_node("Optional", [], [vi.name], type=tp))
        elif sig[0] == "tensor":
            inputs.append(_tensor_input(vi.name, tp.tensor_type, np.dtype(sig[1]), sig[2]))
        else:
            tt = tp.sequence_type.elem_type.tensor_type
            names = [f"{vi.name}[{i}]" for i in range(len(sig[1]))]
            inputs += [_tensor_input(n, tt, np.dtype(d), ndim) for n, (d, ndim) in zip(names, sig[1])]
            elem = tt.elem_type or (helper.np_dtype_to_tensor_dtype(np.dtype(sig[1][0][0])) if sig[1] else
                                    onnx.TensorProto.FLOAT)
            front.append(helper.make_node("SequenceConstruct", names, [vi.name]) if names else
                         helper.make_node("SequenceEmpty", [], [vi.name], dtype=elem))
    del graph.input[:]
    graph.input.extend(inputs)
    nodes = front + list(proto.graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return out


def _tensor_input(name: str, tt, dtype: np.dtype, ndim: int) -> onnx.ValueInfoProto:
    """A tensor input of the declared element type (else `dtype`) and rank `ndim`: declared
    static dims kept, every other dim unnamed (a symbol of this input's own: the elements of one
    sequence differ in size, whatever name the sequence's type gives their dims)."""
    dims = [None] * ndim
    if tt.HasField("shape") and len(tt.shape.dim) == ndim:
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim]
    return helper.make_tensor_value_info(name, tt.elem_type or helper.np_dtype_to_tensor_dtype(dtype), dims)


class StructuredModel:
    """A compiled model with sequence or optional inputs: one inner model (`luminal.onnx.compile`'s)
    per signature of those inputs, built at the first call that brings it. Same interface as
    `OnnxModel`; `model(x=[a, b], y=arr)` -> outputs (lists for sequences, None for empty optionals)."""

    def __init__(self, proto: onnx.ModelProto, compile_fn, notes=()):
        self.proto, self.compile_fn = proto, compile_fn
        self.structured = {vi.name: vi for vi in structured_inputs(proto)}
        inits = {i.name for i in proto.graph.initializer}
        self._names = [vi.name for vi in proto.graph.input if vi.name not in inits]
        self.notes = list(notes) + [f"compiled per length, element dtypes and ranks of sequence input(s) and per presence "
                                    f"of optional input(s) {sorted(self.structured)}"]
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._last = None
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()

    @property
    def inputs(self) -> list:
        return [IOInfo(vi.name, np.dtype(object), (f"len({vi.name})",)) if vi.name in self.structured
                and kind(_elem_type(vi.type)) == "sequence_type" else
                IOInfo(vi.name, declared_elem(vi.type), ()) for vi in self.proto.graph.input if vi.name in self._names]

    @property
    def input_names(self) -> list[str]:
        return list(self._names)

    @property
    def outputs(self) -> list:
        if self._last is not None:
            return self._last.outputs
        return [IOInfo(vi.name, declared_elem(vi.type), ()) for vi in self.proto.graph.output]

    @property
    def output_names(self) -> list[str]:
        return [vi.name for vi in self.proto.graph.output]

    @property
    def compiled(self):
        return None if self._last is None else self._last.compiled

    def report(self):
        if self._last is None:
            raise OnnxInputError(f"this model compiles per length of its sequence inputs {sorted(self.structured)}; "
                                 "call it first")
        return self._last.report()

    def __repr__(self) -> str:
        return f"<luminal.onnx model with sequence/optional inputs {sorted(self.structured)}>"

    def __call__(self, *args, **kwargs) -> list:
        feeds = gather_feeds(self._names, args, kwargs)
        known = set(self._names) | {i.name for i in self.proto.graph.initializer}
        unknown = [n for n in feeds if n not in known]
        if unknown:
            raise OnnxInputError(f"unknown input name(s) {unknown}; the model's inputs are {self._names}")
        missing = [n for n in self.structured if n not in feeds]
        if missing:
            raise OnnxInputError(f"missing input(s) {missing}; the model's inputs are {self._names} (an empty "
                                 "optional is None)")
        sigs = {n: signature(vi, feeds[n]) for n, vi in self.structured.items()}
        flat = {n: v for n, v in feeds.items() if n not in self.structured}
        for n, sig in sigs.items():
            if sig[0] == "tensor":
                flat[n] = feeds[n]
            elif sig[0] == "seq":
                flat.update((f"{n}[{i}]", v) for i, v in enumerate(feeds[n]))
        model = self._model(tuple(sorted(sigs.items())))
        self._last = model
        return model(flat)

    run = __call__

    def _model(self, key):
        with self._lock:
            model = self._cache.get(key)
            if model is not None:
                self._cache.move_to_end(key)
                return model
        with self._build_lock:
            with self._lock:
                model = self._cache.get(key)
            if model is None:
                model = self.compile_fn(rewrite(self.proto, dict(key)))
                with self._lock:
                    self._cache[key] = model
                    while len(self._cache) > COMPILED_KEPT:
                        self._cache.popitem(last=False)
            return model
