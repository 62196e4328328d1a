"""ZipMap (ai.onnx.ml) at the graph boundary: a graph output that is a sequence of maps, one
{class label: probability} per row, as classifiers converted by skl2onnx return probabilities.

The compiled graph stops at the ZipMap's input, the (N, classes) probabilities tensor; the maps
are made on the host from it after each call, in the shape onnxruntime's Python API returns
them: a list of dicts, int (int64 labels) or str keys, Python float values."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import onnx

from luminal.frontends.onnx.errors import OnnxImportError
from luminal.frontends.onnx.importer import attr_value


@dataclass(frozen=True)
class MapOutput:
    index: int  # position among the graph outputs
    name: str  # the graph output's name
    labels: tuple  # the keys, one per column


def split(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, list[MapOutput]]:
    """`proto` with each graph output that a ZipMap makes replaced by the ZipMap's input, and
    those outputs; (proto, []) when it has none."""
    graph = proto.graph
    makers = {n.output[0]: n for n in graph.node if n.op_type == "ZipMap" and n.domain == "ai.onnx.ml"}
    maps = [(i, makers[o.name]) for i, o in enumerate(graph.output) if o.name in makers]
    if not maps:
        return proto, []
    read = {i for n in graph.node for i in n.input}
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    found = []
    for i, node in maps:
        if node.output[0] in read:
            raise OnnxImportError(f"ZipMap node {node.name!r}: its maps are read by other nodes; luminal makes them "
                                  "only as graph outputs")
        attrs = {a.name: attr_value(a) for a in node.attribute}
        labels = attrs.get("classlabels_int64s", attrs.get("classlabels_strings"))
        if labels is None:
            raise OnnxImportError(f"ZipMap node {node.name!r}: no classlabels_int64s or classlabels_strings")
        labels = tuple(int(v) for v in labels) if "classlabels_int64s" in attrs else tuple(labels)
        found.append(MapOutput(i, graph.output[i].name, labels))
        out.graph.output[i].CopyFrom(onnx.helper.make_tensor_value_info(node.input[0], onnx.TensorProto.UNDEFINED, None))
    keep = [n for n in graph.node if not (n.op_type == "ZipMap" and n.output[0] in {m.name for m in found})]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out, found


def to_maps(probabilities: np.ndarray, m: MapOutput) -> list[dict]:
    p = np.asarray(probabilities)
    if p.ndim == 1:
        p = p.reshape(1, -1)
    if p.ndim != 2 or p.shape[1] != len(m.labels):
        raise OnnxImportError(f"ZipMap output {m.name!r}: probabilities of shape {p.shape} for {len(m.labels)} labels")
    return _maps_maker(m.labels)(p.astype(np.float32).tolist())


@lru_cache(maxsize=64)
def _maps_maker(labels: tuple):
    """A function from rows (lists of floats) to one dict a row, with the labels as its keys.

    It is a comprehension over dict displays with the labels written in as constants,
    `[{0: r0, 1: r1} for r0, r1, in rows]`, generated once per label tuple: less than half the
    time of `dict(zip(labels, row))` a row (README). Labels are ints or strs (`split` made them
    so), whose reprs are literals that read back as the same value. Duplicate labels keep the
    last column, as dict(zip()) does."""
    if not labels or len(labels) > 256 or not all(type(k) in (int, str) for k in labels):
        return lambda rows: [dict(zip(labels, row)) for row in rows]
    names = [f"r{i}" for i in range(len(labels))]
    pairs = ", ".join(f"{k!r}: {n}" for k, n in zip(labels, names))
    return eval(f"lambda rows: [{{{pairs}}} for {', '.join(names)}, in rows]", {"__builtins__": {}})


class MapModel:
    """A compiled model whose ZipMap outputs come back as lists of dicts; everything else is the
    inner model's."""

    def __init__(self, inner, maps: list[MapOutput]):
        self.inner, self.maps = inner, maps
        outs = list(inner.outputs)
        for m in maps:
            outs[m.index] = replace(outs[m.index], name=m.name, dtype=np.dtype(object), shape=("N",))
        self.outputs = outs

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def __call__(self, *args, **kwargs) -> list:
        results = list(self.inner(*args, **kwargs))
        for m in self.maps:
            results[m.index] = to_maps(results[m.index], m)
        return results

    run = __call__

    def __repr__(self) -> str:
        return repr(self.inner).replace("<luminal.onnx model", "<luminal.onnx model with maps", 1)
