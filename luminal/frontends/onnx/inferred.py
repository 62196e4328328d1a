"""What onnx's shape inference finds in a model, run once (and only when asked) for everyone
who needs it: `staged.plan` and the staged model (the dims of stage inputs), `if_convert` (the
element types a branch divides), the importer's If-conversion check. Inference copies the whole
model, weights included; only the two small tables are kept."""

from __future__ import annotations

import functools

import onnx


class Inferred:
    def __init__(self, proto: onnx.ModelProto):
        self.proto = proto

    @property
    def shapes(self) -> dict[str, list]:
        """Main-graph value name -> dims (int, dim_param str, or None when unknown)."""
        return self._tables[0]

    @property
    def elem_types(self) -> dict[str, int]:
        """Value name -> ONNX element type, subgraphs included."""
        return self._tables[1]

    @functools.cached_property
    def _tables(self) -> tuple[dict, dict]:
        try:
            graph = onnx.shape_inference.infer_shapes(self.proto, strict_mode=False).graph
        except Exception:  # noqa: BLE001 - inference is a help here, never a requirement
            graph = self.proto.graph
        shapes: dict[str, list] = {}
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.HasField("shape"):
                shapes[vi.name] = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or None)
                                   for d in tt.shape.dim]
        for init in graph.initializer:
            shapes[init.name] = list(init.dims)
        types: dict[str, int] = {}
        _collect_types(graph, types)
        return shapes, types


def _collect_types(g: onnx.GraphProto, out: dict[str, int]) -> None:
    for i in g.initializer:
        out[i.name] = i.data_type
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _collect_types(a.g, out)
            for sub in a.graphs:
                _collect_types(sub, out)
            if n.op_type == "Constant" and a.name == "value":
                out[n.output[0]] = a.t.data_type
