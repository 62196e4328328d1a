"""Search by measurement, opt-in: `options={"search": seconds}` on `luminal.compile`,
`luminal.onnx.compile`, the torch.compile backend, or `compile_outputs(search=...)`.

A device that offers strategy variants (`Device.variants`: the `cpu` device's team size, GEMM
provider and convolution path, direct micro-kernel or im2col and the BLAS, `kernels/cpu/choices.py`)
has each one built as a runtime of the optimized graph,
run on example inputs, checked against the NumPy reference runtime (the specification) with the
tests' tolerance for each dtype, and timed (median of a few calls after a warm-up), within the
budget: the default first, then the others while time is left. A candidate that disagrees or
fails is discarded and reported, never chosen; one that is not at least `MARGIN` faster than
the default does not replace it (timing noise is not a reason to leave the default).

The winner is stored in the compile cache folder as `<graph key>.search-<machine>.json` (the
key of the optimized graph, `compile_cache.Key`; the machine: the CPU model, its cores, the
team size, the ISA and the BLAS), sealed with its sha256, written atomically and validated on
read (a bad entry is dropped and searched again), so a later compile of the model reuses it
without timing. `CompiledGraph.report()` lists the candidates, their times, the discarded ones
and the choice.

Example inputs are made from the graph's input nodes (floats normal(0, 1) from a fixed seed,
integers 0, bools True, each symbolic dim `SYMBOLIC_DIM`): the choice is a property of the
program and the machine, not of the values. A graph whose reference run fails on them is not
searched (a note says why).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from luminal.errors import OptionError
from luminal.hlir import symbolic as sym
from luminal.hlir.constants import RNG_SEED_INPUT
from luminal.hlir.ops import Node, Op, toposort

LOG = logging.getLogger("luminal")
FORMAT = 1  # of a search entry
MARGIN = 0.05  # a non-default candidate must be this much faster than the default to be chosen
SYMBOLIC_DIM = 2
MIN_CALLS, MAX_CALLS = 3, 25  # timed calls per candidate (after one warm-up call, which is checked)
# float tolerances (rtol, and atol relative to the reference's largest magnitude) as the tests use them
TOLERANCE = {"f64": 1e-7, "f32": 1e-5, "f16": 1e-2, "bf16": 2e-2}
# test-only: (choices, outputs) -> outputs, applied to each candidate's outputs before the check
TAMPER: Callable | None = None


def budget(value) -> float | None:
    """The search option's seconds (None: search off); OptionError for anything but a positive
    finite number."""
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise OptionError(f"search={value!r}: the search budget is a positive number of seconds (None or absent: "
                          "no search)")
    return float(value)


def options(opts: dict | None, where: str, more: tuple[str, ...] = ()) -> float | None:
    """The search budget from a frontend's `options` dict (the keys it knows: "search", and
    `more`, which the frontend has read)."""
    opts = dict(opts or {})
    unknown = set(opts) - {"search", *more}
    if unknown:
        known = ", ".join(["'search' (seconds)", *(repr(k) for k in more)])
        raise OptionError(f"{where}: unknown option(s) {sorted(unknown)}; the options are: {known}")
    return budget(opts.get("search"))


def choose(device, optimized: list[Node], report, seconds: float):
    """The choices to build `optimized`'s runtime with on `device` (None: the device offers none),
    from the cache or measured now; what was found goes to `report.search`."""
    t0 = time.perf_counter()
    try:
        return _choose(device, optimized, report, seconds)
    finally:
        report.phases["search"] = time.perf_counter() - t0


def _choose(device, optimized, report, seconds):
    if device.variants is None:
        report.search = {"note": f"device {device.name!r} offers no variants: nothing to search"}
        return None
    candidates = device.variants()
    if len(candidates) < 2:
        report.search = {"note": "one variant on this machine: nothing to search"}
        return candidates[0]
    key = _key(device, optimized)
    if key is not None:
        stored = _read(*key, candidates)
        if stored is not None:
            report.search = {**stored["result"], "cached": True}
            return _pick(candidates, stored["result"]["chosen"])
    result = measure(device, optimized, candidates, seconds)
    report.search = {**result, "cached": False}
    if key is not None and "chosen" in result:
        _write(*key, result)
    return _pick(candidates, result.get("chosen"))


def _pick(candidates, label):
    return next((c for c in candidates if c.label() == label), candidates[0])


# --- measuring -------------------------------------------------------------------------------
def example_feeds(optimized: list[Node]) -> dict[str, np.ndarray]:
    """Inputs for every INPUT node of `optimized` (see the module docstring)."""
    rng = np.random.default_rng(0)
    leaves = [n for n in toposort(optimized) if n.op is Op.INPUT]
    bindings = {str(s): SYMBOLIC_DIM for n in leaves for d in n.shape for s in getattr(d, "free_symbols", ())}
    feeds = {}
    for n in leaves:
        shape = tuple(int(sym.evaluate(d, bindings)) for d in n.shape)
        dt = np.dtype(n.dtype.numpy)
        if n.arg == RNG_SEED_INPUT:
            feeds[n.arg] = np.array(0, dt).reshape(shape)
        elif dt.kind == "f" or n.dtype.short == "bf16":
            feeds[n.arg] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feeds[n.arg] = np.ones(shape, dt)
        else:
            feeds[n.arg] = np.zeros(shape, dt)
    return feeds


def disagreement(got: list, want: list, dtypes: list[str]) -> str | None:
    """Why `got` is not `want` within the tolerance of each output's dtype; None when it is."""
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference has {len(want)}"
    for i, (g, w, dt) in enumerate(zip(got, want, dtypes)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, the reference's is {w.dtype}{list(w.shape)}"
        tol = TOLERANCE.get(dt)
        if tol is None:  # integers and bools: exact
            if not np.array_equal(g, w):
                return f"output {i}: {int(np.sum(g != w))} elements differ"
            continue
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        finite = np.isfinite(w64)
        if not np.array_equal(np.isnan(g64), np.isnan(w64)) or not np.array_equal(g64[~finite & ~np.isnan(w64)],
                                                                                   w64[~finite & ~np.isnan(w64)]):
            return f"output {i}: NaN or infinity where the reference has none (or the other way round)"
        scale = max(1.0, float(np.max(np.abs(w64[finite])))) if finite.any() else 1.0
        err = np.abs(g64[finite] - w64[finite]) - tol * np.abs(w64[finite])
        if err.size and float(err.max()) > tol * scale:
            return f"output {i}: off by up to {float(np.max(np.abs(g64[finite] - w64[finite]))):.3g} (tolerance {tol:g})"
    return None


def measure(device, optimized: list[Node], candidates: list, seconds: float) -> dict:
    """Each candidate built, checked and timed within `seconds`: {"candidates": [{"choices",
    "status" ("ok", "wrong", "failed", "not tried"), "ms", "why"}], "chosen", "default_ms"}."""
    from luminal.runtime import NumpyRuntime

    deadline = time.perf_counter() + seconds
    feeds = example_feeds(optimized)
    try:
        want = NumpyRuntime(optimized)(feeds)
    except Exception as exc:  # noqa: BLE001 - the examples do not suit this graph: no search
        return {"note": f"not searched: the reference failed on example inputs ({type(exc).__name__}: {exc})"}
    dtypes = [n.dtype.short for n in optimized]
    rows = []
    for i, c in enumerate(candidates):
        row = {"choices": c.label(), "as_json": c.as_json(), "status": "not tried", "ms": None, "why": ""}
        rows.append(row)
        left = deadline - time.perf_counter()
        if left <= 0 and i > 0:
            row["why"] = "the budget ran out"
            continue
        try:
            runtime = device.runtime(optimized, choices=c, tiered=False)
            got = runtime(feeds)  # the warm-up call, and the one checked
            if TAMPER is not None:
                got = TAMPER(c, got)
            why = disagreement(got, want, dtypes)
            if why is not None:
                row.update(status="wrong", why=why)
                continue
            share = max(0.0, deadline - time.perf_counter()) / (len(candidates) - i)
            times = []
            start = time.perf_counter()
            while len(times) < MIN_CALLS or (len(times) < MAX_CALLS and time.perf_counter() - start < share):
                t = time.perf_counter()
                runtime(feeds)
                times.append(time.perf_counter() - t)
            row.update(status="ok", ms=statistics.median(times) * 1e3, calls=len(times))
        except Exception as exc:  # noqa: BLE001 - a candidate that fails is discarded, and said so
            row.update(status="failed", why=f"{type(exc).__name__}: {exc}")
    ok = [r for r in rows if r["status"] == "ok"]
    result = {"candidates": rows}
    if not ok:
        LOG.warning("luminal search: no candidate matched the reference; the default is kept")
        return {**result, "note": "no candidate matched the reference: the default is kept"}
    default = rows[0]["ms"] if rows[0]["status"] == "ok" else None
    best = min(ok, key=lambda r: r["ms"])
    if default is not None and best is not rows[0] and best["ms"] > default * (1 - MARGIN):
        best = rows[0]
    return {**result, "chosen": best["choices"], "default_ms": default}


def lines(search: dict) -> list[str]:
    """The report's lines about a search (`Report.search`)."""
    if "candidates" not in search:
        return [f"  search: {search.get('note', '')}"]
    how = "reused from the compile cache (not timed again)" if search.get("cached") else "measured now"
    out = [f"  search ({how}): chosen {search.get('chosen', 'default')}"]
    for r in search["candidates"]:
        ms = r.get("ms")
        ms = f"{'-':>12}" if ms is None else f"{ms * 1e3:9.1f} us" if ms < 1 else f"{ms:9.3f} ms"
        why = f"  ({r['why']})" if r.get("why") else ""
        out.append(f"    {r['choices']:<28} {ms}  {r['status']}{why}")
    if search.get("note"):
        out.append(f"    {search['note']}")
    return out


# --- the cache entry --------------------------------------------------------------------------
def machine() -> str:
    """What a choice depends on besides the graph: CPU model, cores, team, ISA, BLAS."""
    from luminal.kernels.cpu import build
    from luminal.kernels.cpu.blas_libs import blas, threads

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.partition(":")[2].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        import platform

        model = platform.processor()
    flags = sorted(f for f in build.cpu_info()[0] if f.startswith(("avx", "fma", "amx", "sve", "neon")))
    b = blas()
    return f"{model}; cpus {os.cpu_count()}; threads {threads()}; isa {' '.join(flags)}; blas {b.kind} {b.core}"


def _key(device, optimized) -> tuple[Path, str] | None:
    """(the entry's path, its key text), or None: no cache (off, or the graph has no key)."""
    from luminal import compile_cache

    if not compile_cache.enabled():
        return None
    try:
        key = compile_cache.Key.of(optimized, device.name)
        directory = compile_cache.folder()
    except (compile_cache.Uncacheable, OSError) as exc:
        LOG.debug("search: not cached: %s", exc)
        return None
    where = machine()
    text = f"{key.text}; kernels {compile_cache.code_hash(compile_cache.ARTIFACT_CODE)}; machine {where}; " \
           f"search {FORMAT}"
    tag = hashlib.sha256(text.encode()).hexdigest()[:16]
    return directory / f"{key.digest}.search-{tag}.json", f"{key.digest} {text}"


def _read(path: Path, text: str, candidates: list) -> dict | None:
    """The stored search of `path`, validated; None when absent. A bad entry is deleted (and
    searched again)."""
    from luminal import compile_cache
    from luminal.kernels.cpu.choices import Choices

    if not os.path.lexists(path):
        return None
    try:
        data = compile_cache._read_json_file(path, 1 << 20)
        if not isinstance(data, dict) or compile_cache._sealed(data) != data:
            raise ValueError("its sha256 does not match")
        if data.get("key") != text:
            raise ValueError("a foreign entry (another key)")
        result = data["result"]
        chosen = Choices.from_json(data["choices"])
        if chosen not in candidates or result.get("chosen") != chosen.label():
            raise ValueError(f"its choice {chosen.label()!r} is not a candidate here")
        if not isinstance(result.get("candidates"), list):
            raise ValueError("no candidates")
    except Exception as exc:  # noqa: BLE001 - any bad entry is dropped and rebuilt
        LOG.debug("search: dropping %s: %s: %s", path, type(exc).__name__, exc)
        path.unlink(missing_ok=True)
        return None
    from luminal.kernels.cache import touch

    touch(path)
    return data


def _write(path: Path, text: str, result: dict) -> None:
    from luminal import compile_cache
    from luminal.kernels.cache import write_atomic

    chosen = next(r["as_json"] for r in result["candidates"] if r["choices"] == result["chosen"])
    try:
        data = {"format": "luminal search", "key": text, "choices": chosen, "result": result}
        write_atomic(path, json.dumps(compile_cache._sealed(data)).encode())
    except (OSError, TypeError, ValueError) as exc:  # a cache that cannot write only searches again
        LOG.debug("search: not stored: %s", exc)
