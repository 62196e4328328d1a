"""Optional values inside a graph: OptionalHasElement and OptionalGetElement on a tensor or
sequence (always present) or an omitted input (the empty optional). An optional value at the
graph boundary, or an empty optional flowing between nodes, is not represented."""

from __future__ import annotations

import numpy as np

from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.values import Known, Seq
from luminal.hlir.dtypes import DType


@onnx_op("OptionalHasElement", since=15)
def optional_has_element(c, x=None):
    """False for an omitted input (an empty optional), True for a tensor or a sequence."""
    return Known(np.array(x is not None), DType.BOOL)


@onnx_op("OptionalGetElement", since=15)
def optional_get_element(c, x=None):
    """The tensor or sequence itself; an empty optional has no element (an import error)."""
    if x is None:
        c.fail("the optional input is empty")
    return Seq(x) if isinstance(x, list) else x
