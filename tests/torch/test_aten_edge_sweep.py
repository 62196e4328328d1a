"""Every overload of luminal's ATen table on edge inputs (tests/torch/aten_sweep.py makes the
cases from the op schemas: 0-d, empty, broadcast (expanded), transposed and flipped views;
float32 with NaN/inf/-0.0, int64, int32, bool), against eager: exact for integer and bool
results, 1e-5 for float32. Compiled on the NumPy runtime with the rewrites off (the frontend's
semantics are the point), many cases per graph; a subset also on the compiled cpu backend.

The failures must be exactly the explained exclusions of aten_sweep_exclusions.py, and the
overloads the generator cannot reach exactly its NOT_GENERATED list. The default run covers
every float32 case, int64 on flipped views and bool 0-d (the exclusions checked one case each); LUMINAL_SLOW=1 runs every dtype and
checks every excluded case:  LUMINAL_SLOW=1 .venv/bin/pytest -q tests/torch/test_aten_edge_sweep.py
"""

import fnmatch
import os
import warnings

import pytest
import torch
from aten_sweep import Batch, compare, generate, overloads, run_batch
from aten_sweep_exclusions import EXCLUDED, NO_CASE, NOT_GENERATED

import luminal
from luminal.errors import IndexOutOfRange, UnsupportedError

SLOW = bool(os.environ.get("LUMINAL_SLOW"))


def _in_default_run(case) -> bool:
    """The default (CI) subset: every float32 case, integers on flipped views, bools 0-d."""
    return SLOW or case.dtype_name == "f32" or (case.dtype_name == "i64" and case.layout == "flip") or \
        (case.dtype_name == "bool" and case.layout == "0d")
BATCH = 400


@pytest.fixture(scope="module")
def sweep():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases, inputs, skipped = generate()
    return cases, inputs, skipped


def _excluded(case) -> str | None:
    for op, layouts, dtypes, reason in EXCLUDED:
        if fnmatch.fnmatch(case.key, op) and case.layout in layouts and case.dtype_name in dtypes:
            return reason
    return None


def test_not_generated_is_exactly_the_listed_overloads(sweep):
    _, _, skipped = sweep
    assert set(skipped) == set(NOT_GENERATED), (sorted(set(skipped) - set(NOT_GENERATED)),
                                                sorted(set(NOT_GENERATED) - set(skipped)))


def test_overloads_without_cases_are_exactly_the_listed_ones(sweep):
    cases, _, skipped = sweep
    none = set(overloads()) - {c.key for c in cases} - set(skipped)
    assert none == set(NO_CASE), (sorted(none - set(NO_CASE)), sorted(set(NO_CASE) - none))


def test_sweep_numpy(sweep):
    cases, inputs, _ = sweep
    run = [c for c in cases if _in_default_run(c) and _excluded(c) is None]
    failures = {}
    for i in range(0, len(run), BATCH):
        failures.update(run_batch(run[i:i + BATCH], inputs, "numpy"))
    print(f"ATen edge sweep: {len(run)} cases over {len({c.key for c in run})} overloads passed "
          f"(of {len(cases)} generated, {len({c.key for c in cases})} overloads)")
    assert not failures, "\n".join(f"{k}: {v}" for k, v in sorted(failures.items()))


def test_exclusions_are_exact(sweep):
    """Each exclusion matches generated cases, and they still fail (one each by default, all
    with LUMINAL_SLOW=1): an excluded case that starts passing must leave the list."""
    cases, inputs, _ = sweep
    stale, passing = [], []
    for op, layouts, dtypes, _ in EXCLUDED:
        hit = [c for c in cases if fnmatch.fnmatch(c.key, op) and c.layout in layouts and c.dtype_name in dtypes]
        if not hit:
            stale.append(op)
            continue
        for case in hit if SLOW else hit[:1]:
            if not run_batch([case], inputs, "numpy"):
                passing.append(case.id)
    assert not stale, f"exclusions that match no generated case: {stale}"
    assert not passing, f"excluded cases that now pass (remove them from the list): {passing}"


def test_sweep_cpu_subset(sweep):
    """The compiled cpu backend (rewrites on) on the flipped (negative-stride) float32 cases."""
    cases, inputs, _ = sweep
    run = [c for c in cases if c.dtype_name == "f32" and c.layout == "flip" and _excluded(c) is None]
    model = Batch(run)
    xs = tuple(inputs[s] for s in model.slots)
    with torch.no_grad():
        want = model(*xs)
    got = luminal.compile(model, xs, device="cpu")(*xs)
    bad = {c.id: why for c, g, w in zip(run, got, want) if (why := compare(g, w, "empty" not in c.key))}
    print(f"cpu subset: {len(run)} cases")
    assert not bad, bad


class _MaskedScatter(torch.nn.Module):
    def forward(self, x, mask, source):
        return x.masked_scatter(mask, source)


def test_hand_written_cases():
    """Ops the schema generator cannot drive: as_strided (storage views), masked_scatter (too
    short a source raises at run time, as torch does), bucketize on sorted boundaries, unfold."""

    class M(torch.nn.Module):
        def forward(self, x, b):
            return (torch.as_strided(x, (2, 2), (1, 3)), torch.as_strided(x, (3,), (3,), 1),
                    torch.as_strided(x[1:], (2,), (1,), 4), x.t().unfold(0, 2, 1), x.flip(0).unfold(1, 2, 2),
                    torch.bucketize(x, b), torch.bucketize(x.flip(1), b, right=True, out_int32=True))

    x = torch.tensor([[float("nan"), 2.0, -float("inf")], [1.0, 0.5, 3.0], [2.5, -1.0, float("inf")], [0.0, 1.0, 2.0]])
    b = torch.tensor([0.0, 1.0, 2.0, 3.0])
    want = M()(x, b)
    for device in ("numpy", "cpu"):
        got = luminal.compile(M(), (x, b), device=device)(x, b)
        for g, w in zip(got, want):
            assert compare(g, w) is None, (g, w)

    class Bad(torch.nn.Module):
        def forward(self, x):
            return torch.as_strided(x, (4,), (5,))

    with pytest.raises(UnsupportedError, match="outside the storage"):
        luminal.compile(Bad(), (torch.zeros(2, 3),), device="numpy")

    x, mask = torch.randn(2, 3), torch.tensor([[True, False, True], [True, True, False]])
    for source in (torch.arange(6.0), torch.arange(4.0).reshape(2, 2)):
        got = luminal.compile(_MaskedScatter(), (x, mask, source), device="numpy")(x, mask, source)
        assert torch.equal(got, x.masked_scatter(mask, source))
    short = torch.arange(3.0)  # four selected elements: torch raises, luminal's Gather too
    with pytest.raises(RuntimeError):
        x.masked_scatter(mask, short)
    for device in ("numpy", "cpu"):
        cm = luminal.compile(_MaskedScatter(), (x, mask, short), device=device)
        with pytest.raises(IndexOutOfRange):
            cm(x, mask, short)
