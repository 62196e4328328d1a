"""`onnx.backend.base.Backend` over luminal, so `onnx.backend.test.BackendTest` runs against it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend as _Backend
from onnx.backend.base import BackendRep as _BackendRep
from onnx.backend.base import Device, DeviceType

from luminal.frontends.onnx.model import OnnxModel, compile


class BackendRep(_BackendRep):
    def __init__(self, model: OnnxModel):
        self.model = model

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            return tuple(self.model(inputs))
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        # a sequence (a list of arrays) or an empty optional (None) as it is
        return tuple(self.model(*[x if x is None or isinstance(x, list) else np.asarray(x) for x in inputs]))


class Backend(_Backend):
    """The luminal ONNX backend. `optimize` and `luminal_device` (class attributes, or keyword
    arguments of `prepare` / `run_node`) are passed to `compile`; `luminal_device` None maps
    onnx's device ("CPU" -> "cpu", "CUDA" -> "cuda")."""

    optimize: bool | None = None
    luminal_device: str | None = None

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> BackendRep:
        return BackendRep(compile(model, device=cls._target(device, kwargs), optimize=kwargs.get("optimize", cls.optimize)))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """Run one node: wrapped in a model whose inputs take the given arrays' types."""
        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input if n]
        value_infos = [
            onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, arrays)
        ]
        outputs = [onnx.helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = onnx.helper.make_graph([node], "run_node", value_infos, outputs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(node.domain or "", opset)])
        compiled = compile(model, device=cls._target(device, kwargs), optimize=kwargs.get("optimize", cls.optimize), check=False)
        return tuple(compiled(*arrays))

    @classmethod
    def _target(cls, device: str, kwargs: dict) -> str:
        return kwargs.get("luminal_device") or cls.luminal_device or _device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


def _device(device: str) -> str:
    return "cpu" if Device(device).type == DeviceType.CPU else "cuda"


prepare = Backend.prepare
run_model = Backend.run_model
supports_device = Backend.supports_device
