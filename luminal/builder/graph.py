"""`Graph`: declares inputs, constants and outputs, runs itself, and shows itself in notebooks."""

from __future__ import annotations

import numbers

import numpy as np

from luminal.builder import functional as F
from luminal.builder import random as R
from luminal.builder.tensor import Tensor
from luminal.errors import DTypeError, InputError, LuminalError
from luminal.hlir import symbolic as sym
from luminal.hlir.constants import RNG_SEED_INPUT
from luminal.hlir.dtypes import DType
from luminal.hlir.ops import ConstantArray, Node, Op, count_ops, toposort


class Graph:
    """An HLIR graph under construction: `g.input(...)`, tensor ops, `g.output(...)`, `g.run(...)`."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: dict[str, Node] = {}
        self.outputs: list[tuple[str, Node]] = []
        self._runtime = None
        self._rng_streams = 0  # random ops built so far: each gets its own stream (`builder/random.py`)

    # --- leaves ----------------------------------------------------------------------------
    def input(self, name: str, shape, dtype=DType.F32) -> Tensor:
        """A run-time input. Dims are ints or symbol names / expressions ('seq', 'seq + 1')."""
        if name in self.inputs:
            raise LuminalError(f"input {name!r} is already declared")
        if name == RNG_SEED_INPUT:
            raise LuminalError(f"input name {name!r} is reserved for the seed of random ops: use g.rng_seed()")
        shape = tuple(sym.parse(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        node = Node(Op.INPUT, DType.of(dtype), shape, (), name)
        self.inputs[name] = node
        return Tensor(self, node)

    def constant(self, value, dtype=None, name: str | None = None) -> Tensor:
        """A tensor constant (e.g. a weight). Scalars become scalar constants."""
        if isinstance(value, (numbers.Number, bool)):
            return self.scalar(value, DType.of(dtype) if dtype else _scalar_dtype(value))
        arr = np.asarray(value) if not hasattr(value, "detach") else _from_torch(value)
        if dtype is not None:
            arr = np.asarray(arr).astype(DType.of(dtype).numpy)
        dt = DType.of(arr.dtype)
        return Tensor(self, Node(Op.CONSTANT, dt, arr.shape, (), ConstantArray(arr, name)))

    def scalar(self, value, dtype) -> Tensor:
        """A scalar constant; `value` may be a symbolic dim expression."""
        dtype = DType.of(dtype)
        if hasattr(value, "free_symbols") and not isinstance(value, numbers.Number):
            if dtype is DType.BOOL:
                raise DTypeError("a symbolic dim cannot be a bool constant")
            value = sym.norm(value)
        if not hasattr(value, "free_symbols") or isinstance(value, numbers.Number):
            value = _check_scalar(value, dtype)
        return Tensor(self, Node(Op.CONSTANT, dtype, (), (), value))

    def iota(self, n, dtype=DType.I32) -> Tensor:
        n = sym.parse(n)
        dtype = DType.of(dtype)
        if not dtype.is_int:
            raise DTypeError(f"iota needs an integer dtype, got {dtype}")
        return Tensor(self, Node(Op.IOTA, dtype, (n,), (), n))

    def arange(self, start, stop=None, step=1, dtype=DType.I64) -> Tensor:
        return F.arange(self, start, stop, step, dtype)

    def full(self, shape, value, dtype=DType.F32) -> Tensor:
        return F.full(self, shape, value, dtype)

    def zeros(self, shape, dtype=DType.F32) -> Tensor:
        return F.full(self, shape, False if DType.of(dtype) is DType.BOOL else 0, dtype)

    def ones(self, shape, dtype=DType.F32) -> Tensor:
        return F.full(self, shape, True if DType.of(dtype) is DType.BOOL else 1, dtype)

    # --- random numbers (`builder/random.py`) ---------------------------------------------
    def rng_seed(self) -> Tensor:
        """The 0-d int64 seed every random op reads: an input named `RNG_SEED_INPUT`, not among
        `inputs`; a call draws it unless given (`CompiledGraph`, `run`)."""
        return Tensor(self, R.seed_node())

    def rng_stream(self) -> int:
        """A stream number no random op of this graph has used yet."""
        self._rng_streams += 1
        return self._rng_streams - 1

    def rand(self, shape, dtype=DType.F32, stream=None, seed=None) -> Tensor:
        """Uniform in [0, 1); `seed`: None (the graph's seed input), an int, or a 0-d int64 tensor."""
        return R.uniform(self, _shape(shape), stream, dtype, seed)

    def randn(self, shape, dtype=DType.F32, stream=None, seed=None) -> Tensor:
        """Standard normal (Box-Muller)."""
        return R.normal(self, _shape(shape), stream, dtype, seed)

    # module-level helpers, reachable from the graph too
    where = staticmethod(F.where)
    concat = cat = staticmethod(F.concat)
    stack = staticmethod(F.stack)
    split = staticmethod(F.split)

    # --- outputs and running ---------------------------------------------------------------
    def output(self, tensor: Tensor, name: str | None = None) -> Tensor:
        if not isinstance(tensor, Tensor) or tensor.graph is not self:
            raise LuminalError("output() takes a Tensor of this graph")
        name = name or f"out{len(self.outputs)}"
        if any(n == name for n, _ in self.outputs):
            raise LuminalError(f"output {name!r} is already declared")
        self.outputs.append((name, tensor.node))
        self._runtime = None
        return tensor

    @property
    def output_nodes(self) -> list[Node]:
        return [n for _, n in self.outputs]

    def nodes(self) -> list[Node]:
        """Every node the outputs depend on, sources first."""
        return toposort(self.output_nodes)

    def run(self, feeds: dict | None = None, **kwargs) -> list[np.ndarray]:
        """Run on the NumPy reference runtime: `g.run({"x": arr})` -> [output arrays]."""
        from luminal.runtime import NumpyRuntime

        if not self.outputs:
            raise LuminalError("the graph has no outputs; call g.output(tensor) first")
        feeds = dict(feeds or {}, **kwargs)
        if self._runtime is None:
            used = {n.arg for n in self.nodes() if n.op is Op.INPUT}
            self._runtime = NumpyRuntime(self.output_nodes)
            self._runtime_seeded = RNG_SEED_INPUT in used
            unused = [k for k in self.inputs if k not in used]
            self._unused_inputs = unused
        for k in self._unused_inputs:  # declared but unused inputs are still checked by name
            if k not in feeds:
                raise InputError(f"missing input {k!r}")
        if not self._runtime_seeded:  # no random ops: a seed given is ignored
            feeds.pop(RNG_SEED_INPUT, None)
        elif RNG_SEED_INPUT not in feeds:  # random ops: a fresh seed per run
            from luminal.runtime.rng import draw_seed

            feeds[RNG_SEED_INPUT] = draw_seed()
        return self._runtime({k: v for k, v in feeds.items() if k not in self._unused_inputs})

    # --- inspection ------------------------------------------------------------------------
    def compile(self, *, device: str = "cpu", optimize: bool | None = None, precision: str | None = None,
                search: float | None = None):
        """Optimize (egglog) and bind to a runtime: see `luminal.compiler.compile_graph`."""
        from luminal.compiler import compile_graph

        return compile_graph(self, device=device, optimize=optimize, precision=precision, search=search)

    def op_counts(self) -> dict[str, int]:
        """How many nodes of each op the outputs depend on (views included)."""
        return count_ops(self.nodes())

    def __repr__(self) -> str:
        from luminal.builder.display import graph_text

        return graph_text(self)

    def _repr_svg_(self):
        from luminal.builder.display import graph_svg

        return graph_svg(self)

    def _repr_html_(self):
        from luminal.builder.display import graph_html

        return graph_html(self)

    def to_dot(self) -> str:
        from luminal.builder.display import graph_dot

        return graph_dot(self)


def _scalar_dtype(value) -> DType:
    if isinstance(value, bool):
        return DType.BOOL
    if isinstance(value, numbers.Integral):
        return DType.I64
    return DType.F32


def _check_scalar(value, dtype: DType):
    """The Python value of a scalar constant of `dtype`; a DTypeError if not representable."""
    if isinstance(value, np.generic):
        value = value.item()
    if dtype is DType.BOOL:
        if not isinstance(value, bool):
            raise DTypeError(f"constant {value!r} for a bool tensor; use True/False")
        return value
    if isinstance(value, bool):
        return int(value) if dtype.is_int else float(value)
    if dtype.is_int:
        if isinstance(value, float):
            if not value.is_integer():
                raise DTypeError(f"constant {value!r} is not an integer but the tensor is {dtype}; cast it")
            value = int(value)
        info = np.iinfo(dtype.numpy)
        if not info.min <= value <= info.max:
            raise DTypeError(f"constant {value} does not fit in {dtype}")
        return int(value)
    if not isinstance(value, numbers.Real):
        raise DTypeError(f"constant {value!r} is not a real number")
    return float(value)


def _from_torch(t):
    """A NumPy array, or for a tensor on a GPU its host side, copied only if the host reads it."""
    from luminal.runtime.binding import as_array
    from luminal.runtime.torch_arrays import device_host

    return device_host(t) or as_array(t, "constant")


def _shape(shape) -> tuple:
    return tuple(sym.parse(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
