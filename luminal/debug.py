"""Seeing what the compiler did: `LUMINAL_DEBUG`, the `luminal` logger and a progress bar.

    LUMINAL_DEBUG=1  time per phase of every compile
    LUMINAL_DEBUG=2  + the rewrite rules that fired and how often
    LUMINAL_DEBUG=3  + the optimized graph, one line per node
    LUMINAL_DEBUG=4  + the generated CUDA C
Messages go to `logging.getLogger("luminal")`; when LUMINAL_DEBUG is set and the logger has
no handler, one that writes to stderr is added. Compiles that take longer than two seconds
show a tqdm progress bar on a terminal.
"""

from __future__ import annotations

import logging
import os
import sys

LOG = logging.getLogger("luminal")


def level() -> int:
    try:
        return int(os.environ.get("LUMINAL_DEBUG", "0") or 0)
    except ValueError:
        return 0


def _ensure_handler() -> None:
    if not LOG.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("luminal: %(message)s"))
        LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)


def emit(compiled) -> None:
    """Log what LUMINAL_DEBUG asks for about a finished compile."""
    lvl = level()
    report = compiled._report  # as compiled: report() adds the roofline, a kernel plan's worth of work per compile
    LOG.debug("compiled %s: %s", report.name, {k: round(v, 4) for k, v in report.phases.items()})
    if lvl <= 0:
        return
    _ensure_handler()
    phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in report.phases.items())
    cache = "".join(f"; cache: {k} {v}" for k, v in report.cache.items())
    LOG.info("compiled %r: %s; %d ops -> %d ops%s", report.name, phases,
             sum(report.ops_before.values()), sum(report.ops_after.values()), cache)
    if lvl >= 2:
        fired = ", ".join(f"{k} x{v}" for k, v in sorted(report.rules_fired.items(), key=lambda kv: -kv[1]))
        LOG.info("rules fired: %s", fired or "none")
    if lvl >= 3:
        from luminal.builder.display import graph_text, outputs_view

        LOG.info("optimized graph:\n%s", graph_text(outputs_view(report.name, compiled.output_names, compiled.outputs)))
    if lvl >= 4:
        from luminal.kernels import render_graph

        LOG.info("generated CUDA C:\n%s", render_graph(compiled.outputs))


class Progress:
    """A tqdm bar over the compile phases that appears only if the compile is slow."""

    def __init__(self, name: str, total: int):
        try:
            from tqdm.auto import tqdm
        except ImportError:  # tqdm is optional at run time
            self.bar = None
            return
        self.bar = tqdm(total=total, desc=f"luminal {name}", delay=2.0, leave=False, disable=None, unit="phase")

    def step(self, phase: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(phase, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
