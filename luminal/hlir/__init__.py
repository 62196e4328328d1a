"""The HLIR: op table, interned nodes, dtypes, symbolic dims and the shape tracker."""

from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Node, Op, toposort
from luminal.hlir.shape import ShapeTracker

__all__ = ["ConstantArray", "DType", "Node", "Op", "ShapeTracker", "toposort"]
