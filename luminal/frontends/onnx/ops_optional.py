"""Optional values inside a graph: `Optional`, OptionalHasElement and OptionalGetElement. A
present optional is its value itself (a tensor or a sequence); an empty one is an omitted input
or an empty `Value` (`Optional` without input, or a graph input given as None: `boundary.py`),
which the ops below receive as None."""

from __future__ import annotations

import numpy as np

from luminal.frontends.onnx.registry import onnx_op
from luminal.frontends.onnx.values import Known, Seq, Value
from luminal.hlir.dtypes import DType


@onnx_op("Optional", since=15)
def optional(c, x=None, type=None):  # noqa: A002 - ONNX's attribute name
    """Its input, or without one the empty optional of `type` (its type matters to no consumer here)."""
    if x is None:
        return Value()
    return Seq(x) if isinstance(x, list) else x


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
