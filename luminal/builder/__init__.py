"""The tensor builder: `Graph` and `Tensor`, with high-level ops decomposed into primitives."""

from luminal.builder.graph import Graph
from luminal.builder.tensor import Tensor

__all__ = ["Graph", "Tensor"]
