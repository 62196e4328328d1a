"""ai.onnx.ml ops that are tensor arithmetic: Binarizer, ArrayFeatureExtractor.

(The string and tree ops of the domain, LabelEncoder, TreeEnsemble, ..., are not lowered.)"""

from __future__ import annotations

from luminal.frontends.onnx.registry import onnx_op

ML = "ai.onnx.ml"


@onnx_op("Binarizer", domain=ML)
def binarizer(c, x, *, threshold=0.0):
    """1 where x > threshold, else 0 (NaN gives 0), in x's type."""
    return x.gt(x._scalar(threshold)).cast(x.dtype)


@onnx_op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(c, x, indices):
    """x[..., indices.ravel()]; a 1-D x gives one row (onnxruntime's shape). An index outside
    [0, x.shape[-1]) fails at run time (IndexOutOfRange), as onnxruntime rejects it."""
    if x.ndim == 1:
        x = x.reshape((1, x.shape[0]))
    idx = indices.reshape(-1)
    n = idx.shape[0]
    lead = tuple(x.shape[:-1])
    return x.gather(x.ndim - 1, idx.reshape((1,) * len(lead) + (n,)).expand(lead + (n,)))
