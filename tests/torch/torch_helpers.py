"""Comparing luminal's outputs with eager's: same structure, dtypes, and values (f32 1e-5)."""

import contextlib

import torch
from torch.utils import _pytree as pytree

ATOL = RTOL = 1e-5


def leaves(out):
    return [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]


def max_abs_error(got, want) -> float:
    errs = [(g.double() - w.double()).abs().max().item() if g.numel() else 0.0 for g, w in zip(leaves(got), leaves(want))]
    return max(errs, default=0.0)


def assert_same(got, want, atol=ATOL, rtol=RTOL):
    """Equal pytree structure; every tensor of the same dtype and shape and close (exact for ints)."""
    g_flat, g_spec = pytree.tree_flatten(got)
    w_flat, w_spec = pytree.tree_flatten(want)
    assert g_spec == w_spec, f"output structure differs:\n{g_spec}\nvs\n{w_spec}"
    for i, (g, w) in enumerate(zip(g_flat, w_flat)):
        if not isinstance(w, torch.Tensor):
            assert g == w, f"leaf {i}: {g!r} != {w!r}"
            continue
        assert isinstance(g, torch.Tensor), f"leaf {i}: got {type(g).__name__}"
        assert g.dtype == w.dtype, f"leaf {i}: dtype {g.dtype} != {w.dtype}"
        assert g.shape == w.shape, f"leaf {i}: shape {tuple(g.shape)} != {tuple(w.shape)}"
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True)
        else:
            assert torch.equal(g, w), f"leaf {i}: {g} != {w}"


def compile_by(path: str, model, x):
    """`model(x)` compiled by one of luminal's two torch paths and called: "dynamo"
    (torch.compile, strict, on the NumPy runtime) or "export-<device>" (luminal.compile)."""
    import luminal

    if path == "dynamo":
        torch._dynamo.reset()
        return torch.compile(model, backend="luminal", options={"strict": True, "device": "numpy"})(x)
    return luminal.compile(model, (x,), device=path.split("-")[1])(x)


@contextlib.contextmanager
def runs_on_luminal(at_least: int = 1):
    """Asserts that compiled luminal graphs (not an eager fallback) served `at_least` calls in the
    block. Counted per call rather than from `luminal.stats()`, which forgets a graph once it is
    freed (a rebuild after a weight is rebound drops the old graph and its calls)."""
    from luminal.compiler import CompiledGraph

    served = []
    original = CompiledGraph._served  # every call's count, by `__call__` or a bound call (`bound_call`)

    def counted(self):
        served.append(self.name)
        return original(self)

    CompiledGraph._served = counted
    try:
        yield served
    finally:
        CompiledGraph._served = original
    assert len(served) >= at_least, f"luminal served {len(served)} call(s), expected {at_least} (an eager fallback?)"
