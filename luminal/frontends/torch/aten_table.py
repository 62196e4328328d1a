"""The whole ATen op table: importing the op families fills `aten_ops.ATEN` (each family imports
`aten_ops` for its `@aten` decorator, so the table and the families stay one layer apart)."""

from luminal.frontends.torch import (  # noqa: F401 - imported for their registrations
    aten_backward,
    aten_complex,
    aten_elementwise,
    aten_foreach,
    aten_index,
    aten_moe,
    aten_movement,
    aten_nn,
    aten_random,
    aten_reduce,
    aten_vision,
    collectives,
)
from luminal.frontends.torch.aten_ops import ATEN


def table() -> dict:
    """ATen overload key -> the function that lowers it."""
    return ATEN
