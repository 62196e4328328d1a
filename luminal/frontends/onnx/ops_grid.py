"""GridSample: the builder's (`luminal/builder/sampling.py`), which torch's grid_sampler shares."""

from __future__ import annotations

from luminal.builder.sampling import grid_sample as sample
from luminal.errors import UnsupportedError
from luminal.frontends.onnx.registry import onnx_op


@onnx_op("GridSample", since=16)
def grid_sample(c, x, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    try:
        return sample(x, grid, align_corners=bool(align_corners), mode=mode, padding_mode=padding_mode)
    except UnsupportedError as exc:
        c.fail(str(exc))
