"""String class labels (ai.onnx.ml classifiers' `classlabels_strings`), compiled as class indices.

A classifier that names its classes by strings is rewritten, before anything else sees the
model, into the same classifier over the int64 labels 0..k-1 followed by a CategoryMapper from
those indices to the strings. The scores and the label's choice are then the numeric classifier
that compiles (onnxruntime itself picks the label's index and reads the string from it), and the
CategoryMapper is a string op run on the host after the compiled part (`strings.py`), so the
label comes back as onnxruntime returns it: an object array of `str`."""

from __future__ import annotations

import onnx
from onnx import helper

ML = "ai.onnx.ml"
# op -> its int64 labels attribute (the string one is classlabels_strings for all three)
INT_LABELS = {"LinearClassifier": "classlabels_ints", "SVMClassifier": "classlabels_ints",
              "TreeEnsembleClassifier": "classlabels_int64s"}
SUFFIX = "__luminal_class_index"


def _string_labels(node: onnx.NodeProto) -> list[str] | None:
    if node.domain != ML or node.op_type not in INT_LABELS:
        return None
    for a in node.attribute:
        if a.name == "classlabels_strings" and a.strings:
            return [s.decode("utf-8") for s in a.strings]
    return None


def rewrite(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` with every main-graph classifier with string labels split into the classifier over
    class indices and a CategoryMapper to the strings; `proto` itself when it has none."""
    if not any(_string_labels(n) for n in proto.graph.node):
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = []
    for node in proto.graph.node:
        labels = _string_labels(node)
        if labels is None:
            nodes.append(node)
            continue
        numeric = onnx.NodeProto()
        numeric.CopyFrom(node)
        del numeric.attribute[:]
        numeric.attribute.extend(a for a in node.attribute if a.name not in ("classlabels_strings", INT_LABELS[node.op_type]))
        numeric.attribute.append(helper.make_attribute(INT_LABELS[node.op_type], list(range(len(labels)))))
        nodes.append(numeric)
        if node.output and node.output[0]:  # (a label nobody asked for needs no strings)
            index = node.output[0] + SUFFIX
            numeric.output[0] = index
            nodes.append(helper.make_node("CategoryMapper", [index], [node.output[0]], name=f"{node.name}{SUFFIX}",
                                          domain=ML, cats_int64s=list(range(len(labels))), cats_strings=labels))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
