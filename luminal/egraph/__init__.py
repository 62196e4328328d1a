"""The egglog layer: rewrite an HLIR graph by equality saturation and extract the cheapest form.

    optimize(outputs, report) -> outputs'   (called by `luminal.compiler.compile_outputs`)

Modules, in pipeline order: `partition` (repeated layers found by structural hashing),
`schema` (the term language), `encode` (HLIR -> egglog commands), the rulesets `rules_algebra`,
`rules_fusion`, `rules_numerics`, `pipeline` (schedule with named limits), `extract` (cost
model, HLIR back), `regions` (FusedElementwise kernels); `reference` defines every fused op
in primitives; `compat` isolates the egglog version. egglog is imported on first use only.
"""

from __future__ import annotations

import os
import time


def contained(run, fallback):
    """`run()`, or `fallback(exc)` when it fails: rewriting is an optimization, never a reason
    to fail a compile. egglog panics derive from BaseException, so those are caught too (but
    not KeyboardInterrupt/SystemExit); LUMINAL_EGRAPH_STRICT=1 (the tests) re-raises instead."""
    try:
        return run()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - egglog panics derive from BaseException
        if os.environ.get("LUMINAL_EGRAPH_STRICT") == "1":
            raise
        return fallback(exc)


def optimize(outputs, report):
    """Rewrite the graph computing `outputs`; on an internal error, keep it as it was."""

    def run():
        t0 = time.perf_counter()
        from luminal.egraph.pipeline import optimize as _optimize  # imports egglog (once)

        report.phases["egglog import"] = time.perf_counter() - t0
        return _optimize(outputs, report)

    def skipped(exc):
        report.notes.append(f"rewriting failed and was skipped: {type(exc).__name__}: {exc}")
        return list(outputs)

    return contained(run, skipped)


__all__ = ["contained", "optimize"]
