"""What every node run on the host between compiled stages shares (`staged.py`, `staged_rnn.py`):
reading its inputs from the run's values or the model's initializers, and writing its outputs
back, with a failure of its own computation reported as an `OnnxError` naming the node."""

from __future__ import annotations

import numpy as np

from luminal.frontends.onnx.errors import OnnxError, OnnxImportError
from luminal.frontends.onnx.importer import initializer_array


class HostStep:
    """A node run by Python: subclasses set `model` (the staged plan), `node`, `label` and
    define `_run(env) -> list of output arrays`."""

    def _value(self, env: dict, name: str) -> np.ndarray:
        if name in env:
            value = env[name]  # a sequence (a list of arrays) or an empty optional (None) as it is
            return value if value is None or isinstance(value, list) else np.asarray(value)
        init = self.model.initializers.get(name)
        if init is None:
            raise OnnxImportError(f"{self.label}: value {name!r} is neither computed, an input nor an initializer")
        return initializer_array(init)

    def run(self, env: dict) -> None:
        try:
            outs = self._run(env)
        except OnnxError:
            raise
        except (ValueError, IndexError) as exc:  # numpy on shapes the model did not promise
            raise OnnxError(f"{self.label}: {exc}") from exc
        for name, value in zip(self.node.output, outs):
            if name:
                env[name] = value
