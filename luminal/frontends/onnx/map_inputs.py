"""Map-typed graph inputs (ai.onnx.ml DictVectorizer, CastMap): a Python dict per call, as
onnxruntime's Python API takes one.

A map never enters the HLIR. The model is split at each DictVectorizer or CastMap that reads a
map input: the node's output becomes a tensor input of the compiled rest of the model (numeric
or string), and the node itself runs on the host before each call, from the dict to its
(1, n) row, as onnxruntime computes it. So a DictVectorizer + classifier pipeline compiles once
and every call costs one dict walk on the host. A map input read by anything else is an import
error naming the node; so is a sequence of maps, which neither op takes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper

from luminal.frontends.onnx.errors import OnnxImportError, OnnxInputError
from luminal.frontends.onnx.importer import attr_value
from luminal.frontends.onnx.values import IOInfo, gather_feeds

TP = onnx.TensorProto
ML = "ai.onnx.ml"
HOST_OPS = ("DictVectorizer", "CastMap")
KEYS = {TP.STRING: str, TP.INT64: int}
VALUES = {TP.FLOAT: np.float32, TP.DOUBLE: np.float64, TP.INT64: np.int64, TP.STRING: object}
CASTS = {"TO_FLOAT": (TP.FLOAT, np.float32), "TO_STRING": (TP.STRING, object), "TO_INT64": (TP.INT64, np.int64)}


def _is_map(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") == "map_type"


def _is_map_sequence(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") == "sequence_type" and _is_map(tp.sequence_type.elem_type)


@dataclass(frozen=True)
class MapStep:
    """One host node: reads graph input `source` (a map), makes the inner model's input `target`."""

    op: str
    label: str
    source: str
    target: str
    key: type  # str or int
    value: int  # the map's value element type
    attrs: dict

    @property
    def out(self) -> tuple[int, object]:
        """The output's element type and NumPy dtype."""
        if self.op == "CastMap":
            return CASTS[self.attrs.get("cast_to", "TO_FLOAT")]
        return self.value, VALUES[self.value]


def split(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, list[MapStep]]:
    """`proto` with each DictVectorizer / CastMap that reads a map graph input removed and its
    output made a graph input, and those steps; (proto, []) when it has no map input."""
    graph = proto.graph
    inits = {i.name for i in graph.initializer}
    ins = [vi for vi in graph.input if vi.name not in inits]
    for vi in ins:
        if _is_map_sequence(vi.type):
            raise OnnxImportError(f"graph input {vi.name!r} is a sequence of maps; luminal takes maps as inputs of "
                                  "DictVectorizer and CastMap, which read one map (a dict)")
    maps = {vi.name: vi for vi in ins if _is_map(vi.type)}
    if not maps:
        return proto, []
    steps, removed = [], set()
    for k, node in enumerate(graph.node):
        read = [i for i in node.input if i in maps]
        if not read:
            continue
        label = f"{node.op_type} node {node.name or '<unnamed>'!r}"
        if node.domain != ML or node.op_type not in HOST_OPS:
            raise OnnxImportError(f"{label} reads map input {read[0]!r}; luminal takes a map input only into "
                                  f"{' or '.join(HOST_OPS)}")
        mt = maps[read[0]].type.map_type
        vt = mt.value_type.tensor_type.elem_type if mt.value_type.WhichOneof("value") == "tensor_type" else 0
        if mt.key_type not in KEYS or vt not in VALUES:
            raise OnnxImportError(f"{label}: map input {read[0]!r} of key type {TP.DataType.Name(mt.key_type)} and "
                                  f"values {onnx.helper.printable_type(mt.value_type)}; keys are string or int64, "
                                  "values float, double, int64 or string")
        attrs = {a.name: attr_value(a) for a in node.attribute}
        step = MapStep(node.op_type, label, read[0], node.output[0], KEYS[mt.key_type], vt, attrs)
        _check(step)
        steps.append(step)
        removed.add(k)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    out.graph.node.extend(n for k, n in enumerate(graph.node) if k not in removed)
    kept = [vi for vi in graph.input if vi.name not in maps]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    outputs = {o.name for o in graph.output}
    for k, s in enumerate(steps):
        elem, _ = s.out
        if elem == TP.STRING and s.target in outputs:  # a string graph input returned as it is: staged through an
            # Identity on the host (the compiled part holds no strings)
            steps[k] = s = replace(s, target=s.target + "__luminal_map")
            out.graph.node.append(helper.make_node("Identity", [s.target], [s.target[:-len("__luminal_map")]]))
        out.graph.input.append(helper.make_tensor_value_info(s.target, elem, [1, _width(s)]))
    return out, steps


def _width(step: MapStep) -> int | None:
    """The row's length when the attributes fix it (DictVectorizer, sparse CastMap), else None."""
    if step.op == "DictVectorizer":
        return len(step.attrs.get("string_vocabulary") if step.key is str else step.attrs.get("int64_vocabulary"))
    return int(step.attrs.get("max_map", 1)) if step.attrs.get("map_form", "DENSE") == "SPARSE" else None


def _check(step: MapStep) -> None:
    a = step.attrs
    if step.op == "DictVectorizer":
        vocab = a.get("string_vocabulary") if step.key is str else a.get("int64_vocabulary")
        if vocab is None or len(vocab) == 0:
            raise OnnxImportError(f"{step.label}: no {'string' if step.key is str else 'int64'}_vocabulary for its "
                                  f"{step.key.__name__} keys")
        return
    if step.key is not int or step.value not in (TP.FLOAT, TP.STRING):
        raise OnnxImportError(f"{step.label}: CastMap takes a map of int64 keys to float or string values")
    if a.get("cast_to", "TO_FLOAT") not in CASTS:
        raise OnnxImportError(f"{step.label}: cast_to {a.get('cast_to')!r} is not one of {', '.join(CASTS)}")
    if a.get("map_form", "DENSE") not in ("DENSE", "SPARSE"):
        raise OnnxImportError(f"{step.label}: map_form {a.get('map_form')!r} is not DENSE or SPARSE")


def _entries(step: MapStep, m) -> list[tuple]:
    """The dict's (key, value) pairs, each checked against the declared map type."""
    if isinstance(m, (list, tuple)):
        raise OnnxInputError(f"input {step.source!r} is a map: it takes one dict, not a {type(m).__name__} of them")
    if not isinstance(m, dict):
        raise OnnxInputError(f"input {step.source!r} is a map: it takes a dict, not a {type(m).__name__}")
    out = []
    for k, v in m.items():
        ok_key = isinstance(k, str) if step.key is str else isinstance(k, (int, np.integer)) and not isinstance(k, bool)
        if not ok_key:
            raise OnnxInputError(f"input {step.source!r}: key {k!r} is a {type(k).__name__}; the map's keys are "
                                 f"{'strings' if step.key is str else 'int64'}")
        if step.value == TP.STRING:
            ok = isinstance(v, str)
        else:
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            ok = ok and (step.value != TP.INT64 or float(v).is_integer())
        if not ok:
            raise OnnxInputError(f"input {step.source!r}: the value of key {k!r} is {v!r}; the map's values are "
                                 f"{TP.DataType.Name(step.value).lower()}")
        out.append((step.key(k), v))
    return out


def _cast(step: MapStep, values: list, dtype) -> list:
    """CastMap's casts as onnxruntime's: floats to strings by "%f", to int64 by truncation;
    strings parsed as numbers."""
    if step.value == TP.STRING:
        if dtype is object:
            return values
        try:
            return [float(v) if dtype is np.float32 else int(v) for v in values]
        except ValueError as exc:
            raise OnnxInputError(f"{step.label}: {exc}") from None
    if dtype is object:
        return [f"{float(np.float32(v)):f}" for v in values]  # C's %f of the float32 value
    return [np.float32(v) for v in values] if dtype is np.float32 else [int(np.float32(v)) for v in values]


def run_step(step: MapStep, m) -> np.ndarray:
    entries = _entries(step, m)
    _, dtype = step.out
    if step.op == "DictVectorizer":
        vocab = step.attrs.get("string_vocabulary") if step.key is str else step.attrs.get("int64_vocabulary")
        columns: dict = {}
        for i, k in enumerate(vocab):  # a key the vocabulary repeats fills each of its columns (onnxruntime)
            columns.setdefault(k, []).append(i)
        row = np.full((1, len(vocab)), "" if dtype is object else 0, dtype)
        for k, v in entries:  # keys outside the vocabulary are dropped
            for i in columns.get(k, ()):
                row[0, i] = v
        return row
    entries.sort(key=lambda kv: kv[0])
    values = _cast(step, [v for _, v in entries], dtype)
    if step.attrs.get("map_form", "DENSE") == "DENSE":
        row = np.empty((1, len(values)), dtype)
        row[0, :] = values
        return row
    size = int(step.attrs.get("max_map", 1))
    row = np.full((1, size), "0.f" if dtype is object else 0, dtype)  # onnxruntime's pad, "0.f" for strings
    for (k, _), v in zip(entries, values):
        if not 0 <= k < size:
            raise OnnxInputError(f"{step.label}: key {k} is outside [0, max_map={size})")
        row[0, k] = v
    return row


class MapInputModel:
    """A compiled model whose map inputs are dicts: the DictVectorizer / CastMap steps run on the
    host, then the inner (compiled) model."""

    def __init__(self, inner, steps: list[MapStep], proto: onnx.ModelProto):
        self.inner, self.steps = inner, steps
        inits = {i.name for i in proto.graph.initializer}
        self._names = [vi.name for vi in proto.graph.input if vi.name not in inits]
        self._maps = {s.source for s in steps}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def input_names(self) -> list[str]:
        return list(self._names)

    @property
    def inputs(self) -> list:
        by_name = {i.name: i for i in self.inner.inputs}
        return [IOInfo(n, np.dtype(object), ()) if n in self._maps else by_name[n] for n in self._names]

    def __call__(self, *args, **kwargs) -> list:
        # one dict is the feeds, unless the model's one input is a map and the dict is that map
        lone_map = len(self._names) == 1 and self._names[0] in self._maps
        one_dict = not (lone_map and len(args) == 1 and isinstance(args[0], dict) and self._names[0] not in args[0])
        feeds = gather_feeds(self._names, args, kwargs, one_dict)
        missing = [n for n in self._maps if n not in feeds]
        if missing:
            raise OnnxInputError(f"missing input(s) {missing}; the model's inputs are {self._names}")
        inner = {n: v for n, v in feeds.items() if n not in self._maps}
        for s in self.steps:
            inner[s.target] = run_step(s, feeds[s.source])
        return self.inner(inner)

    run = __call__

    def __repr__(self) -> str:
        outs = ", ".join(map(str, self.inner.outputs))
        return f"<luminal.onnx model with map inputs {sorted(self._maps)} ({', '.join(self._names)}) -> ({outs})>"
