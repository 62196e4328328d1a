"""The ONNX frontend: `compile(model)` lowers an ONNX model to the HLIR and compiles it.

    model = luminal.onnx.compile("model.onnx")       # a path, bytes or onnx.ModelProto
    (logits,) = model(input_ids)                      # or model({"input_ids": ids})

Layout: `loader` (reading, checking, upgrading to opset >= 13), `importer` (the graph walk,
compile-time evaluation of known and symbolic values), `shape_eval` (shape arithmetic over
symbolic dims), `registry` (the versioned op table), one module per op family (`ops_math`,
`ops_tensor`, `ops_nn`, `ops_resize`, `ops_attention`, `ops_loss`, `ops_quant`, `ops_rnn`, `ops_bits`, `ops_signal`, `ops_grid`, `ops_contrib` (com.microsoft), `ops_quant_contrib` (com.microsoft quantized), `ops_misc`,
`ops_bitcast`, `ops_linalg`, `ops_scatter`, `ops_spectral`, `ops_detection`, `ops_dynamic` (data-dependent
output lengths), `ops_ml`, `ops_ml_sklearn` (ai.onnx.ml; `zipmap` makes ZipMap's maps on the host), `ops_optional`, `boundary` (sequences and optionals as graph inputs and outputs), `ops_random` (Philox), `ops_training` (ai.onnx.preview.training);
`narrow` for float8 / 4-bit types), `model` (`compile` and the
callable `OnnxModel`) and `backend` (`onnx.backend.base.Backend` for onnx's BackendTest).
"""

from luminal.frontends.onnx import (  # noqa: F401 - registers ops
    ops_attention,
    ops_bitcast,
    ops_bits,
    ops_contrib,
    ops_detection,
    ops_dynamic,
    ops_grid,
    ops_linalg,
    ops_loss,
    ops_math,
    ops_misc,
    ops_ml,
    ops_ml_sklearn,
    ops_nn,
    ops_optional,
    ops_quant,
    ops_quant_contrib,
    ops_random,
    ops_resize,
    ops_rnn,
    ops_scatter,
    ops_signal,
    ops_spectral,
    ops_tensor,
    ops_training,
)
from luminal.frontends.onnx.backend import Backend, BackendRep
from luminal.frontends.onnx.errors import (
    ExternalDataError,
    InvalidModelError,
    OnnxError,
    OnnxImportError,
    OnnxInputError,
    UnsupportedOpsError,
    UnsupportedOpsetError,
)
from luminal.frontends.onnx.model import IOInfo, OnnxModel, compile
from luminal.frontends.onnx.registry import onnx_op, supported_ops

__all__ = [
    "Backend", "BackendRep", "ExternalDataError", "IOInfo", "InvalidModelError", "OnnxError", "OnnxImportError",
    "OnnxInputError", "OnnxModel", "UnsupportedOpsError", "UnsupportedOpsetError", "compile", "onnx_op", "supported_ops",
]
