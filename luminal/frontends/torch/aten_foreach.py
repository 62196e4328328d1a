"""ATen's `_foreach_*` ops: an optimizer's foreach implementation (`torch.optim.Adam(...,
foreach=True)`) traces to them, and core ATen keeps them whole.

Each overload is its per-tensor op applied to the i-th element of every list argument, which is
what eager's CPU kernels do (their slow path calls that op tensor by tensor), lowered by that
op's own function here: `_foreach_add.List(xs, ys, alpha=a)` is `[add.Tensor(x, y, alpha=a)
...]`, `_foreach_pow.ScalarAndTensor(s, es)` is `[pow.Scalar(s, e) ...]`. An overload is
registered only when torch has it and its per-tensor op is in the table. Not lowered:
addcmul/addcdiv's `.Tensor` overloads (their 1-D `scalars` tensor must be on the CPU, which
fake tensors are not, so Dynamo cannot trace them), `_foreach_zero`, `_foreach_max`.
"""

from __future__ import annotations

import torch

from luminal.errors import UnsupportedError
from luminal.frontends.torch import aten_elementwise, aten_reduce  # noqa: F401 - the per-tensor ops first
from luminal.frontends.torch.aten_ops import ATEN, Ctx, aten, ldtype
from luminal.frontends.torch.dims import shape_of

UNARY = ("abs", "neg", "sqrt", "rsqrt", "reciprocal", "exp", "expm1", "log", "log1p", "log2", "log10", "sign",
         "sigmoid", "tanh", "sin", "cos", "tan", "erf", "floor", "ceil", "round", "trunc", "frac", "clone")
BINARY = ("add", "sub", "mul", "div")
# (foreach op, overload) -> the per-tensor op's key
ELEMENT = {
    **{(f"_foreach_{op}", ""): f"{op}.default" for op in UNARY},
    **{(f"_foreach_{op}", ov): f"{op}.Tensor" for op in BINARY for ov in ("Scalar", "List", "ScalarList", "Tensor")},
    **{(f"_foreach_{op}", ov): "addcmul.default" if op == "addcmul" else "addcdiv.default"
       for op in ("addcmul", "addcdiv") for ov in ("Scalar", "ScalarList")},
    **{(f"_foreach_{op}", ov): f"{op}.default" for op in ("maximum", "minimum")
       for ov in ("Scalar", "List", "ScalarList")},
    **{(f"_foreach_{op}", ov): f"{op}.default" if ov != "List" else f"{op}.Tensor"
       for op in ("clamp_min", "clamp_max") for ov in ("Scalar", "List", "ScalarList")},
    ("_foreach_pow", "Scalar"): "pow.Tensor_Scalar",
    ("_foreach_pow", "ScalarList"): "pow.Tensor_Scalar",
    ("_foreach_pow", "List"): "pow.Tensor_Tensor",
    ("_foreach_pow", "ScalarAndTensor"): "pow.Scalar",
    ("_foreach_lerp", "Scalar"): "lerp.Scalar",
    ("_foreach_lerp", "ScalarList"): "lerp.Scalar",
    ("_foreach_lerp", "List"): "lerp.Tensor",
    ("_foreach_copy", ""): "copy.default",
    ("_foreach_norm", "Scalar"): "linalg_vector_norm.default",
}


def _lowering(name: str, overload: str, element):
    def fn(cx: Ctx, *args, **kwargs):
        if name == "_foreach_norm":  # (xs, ord=2, dtype=None) -> linalg_vector_norm(x, ord, dim, keepdim, dtype=)
            xs, ord_ = args[0], args[1] if len(args) > 1 else kwargs.get("ord", 2)
            dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
            args, kwargs = (xs, ord_, None, False), {"dtype": dtype}
        n = len(cx.val)
        out = []
        for i, v in enumerate(cx.val):
            each = [_item(a, i, n) for a in args]
            each_kw = {k: _item(a, i, n) for k, a in kwargs.items()}
            sub = Ctx(cx.g, cx.node, ldtype(v.dtype), shape_of(v), v, cx.hints)
            out.append(element(sub, *each, **each_kw))
        return out

    fn.__name__ = f"{name}_{overload or 'default'}"
    return fn


def _item(a, i: int, n: int):
    """The i-th element's argument: a list's i-th item; anything else as it is (one tensor or
    scalar for every element)."""
    if isinstance(a, (list, tuple)):
        if len(a) != n:
            raise UnsupportedError(f"a foreach argument of {len(a)} items for {n} results")
        return a[i]
    return a


def _exists(name: str, overload: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    return packet is not None and overload in packet.overloads()


for (_name, _overload), _key in ELEMENT.items():
    if _key in ATEN and _exists(_name, _overload or "default"):
        aten(f"{_name}.{_overload or 'default'}")(_lowering(_name, _overload, ATEN[_key]))
