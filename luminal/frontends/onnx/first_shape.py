"""The first call's shapes compiled static, as torch.compile's automatic dynamic shapes start
static (README, "ONNX": "The first shape compiled static").

ONNX files declare their batch, and often an image's height and width or a sequence's length,
as symbolic dims, and `luminal.onnx.compile` compiles the graph over them: one graph for every
size, checked once. Its C then runs the general forms of the kernels; the fast forms that need
the sizes (a depthwise conv's padding read in place instead of a padded copy, flat planes, conv
tiles and thread splits sized to the image, search timed at the real sizes) do not apply. So,
for a graph that reads windows (convolutions, pools: `reads_windows`; elsewhere known sizes
measured slower as often as faster), the first call whose dynamic dims are all non-zero
compiles the graph again with this call's shapes static (once, in that call: the cost of a
compile), and every later call with exactly those shapes runs it; a call with any other shape
runs the symbolic graph, which `compile` built. A model called with many shapes compiles twice,
never more, and one input always runs the same graph, so it always gets the same bits.

Shapes the symbolic graph refuses (its assumptions: a sequence longer than a table the model
slices) are refused before a static build, as they were. Off with `options={"specialize":
False}` (the symbolic graph serves every call), and on the NumPy device, which runs the same
array calls at any size. A static build that fails (it should not: it knows more than the
symbolic one) is noted in `report()` and the symbolic graph serves.
"""

from __future__ import annotations

import dataclasses

from luminal.errors import LuminalError, OptionError
from luminal.hlir.ops import Op, toposort

OPTION = "specialize"


def reads_windows(outputs) -> bool:
    """Whether the optimized graph reads windows (a WindowReduce: a depthwise convolution's or a
    pool's). The C's forms that need the sizes are theirs (the padding read in place, flat
    planes); on other graphs known sizes measured slower as often as faster (tree ensembles: a
    random forest 0.87 -> 1.26 of onnxruntime, README), so those keep the symbolic graph."""
    return any(n.op is Op.WINDOW_REDUCE for n in toposort(outputs))


def option(options: dict | None) -> tuple[bool, dict | None]:
    """(whether to specialize, the options without this key) from `compile`'s `options`."""
    if not options or OPTION not in options:
        return True, options
    rest = {k: v for k, v in options.items() if k != OPTION}
    value = options[OPTION]
    if not isinstance(value, bool):
        raise OptionError(f"{OPTION}={value!r}: True (the default: the first call's shapes compile static) or False")
    return value, rest


class FirstShape:
    """The static graph of a model's first call's shapes (`graph_for`), built once."""

    __slots__ = ("shapes", "graph", "note", "build")

    def __init__(self, build):
        self.shapes = None  # the input shapes of the first call with dynamic dims (None: none yet)
        self.graph = None  # its static graph (None: not built, or the build failed)
        self.note = None  # what happened, for `report()`
        self.build = build  # arrays -> the static graph (raises LuminalError)

    def graph_for(self, model, arrays: dict):
        """The static graph if `arrays` have the first call's shapes (built now, at the first
        call), else None (the symbolic graph serves)."""
        shapes = tuple(arrays[n].shape for n in model.input_names)
        if self.shapes is None:
            with model._build_lock:  # a second caller of the first shape waits for it
                if self.shapes is None:
                    self.graph, self.note = self._built(model, arrays, shapes)
                    self.shapes = shapes
        return self.graph if shapes == self.shapes else None

    def report(self, symbolic):
        """The report of the graph that serves the first shape (the static one where it built),
        with what happened noted."""
        graph = self.graph if self.graph is not None else symbolic
        report = graph.report()
        return report if self.note is None else dataclasses.replace(report, notes=[*report.notes, self.note])

    def _built(self, model, arrays: dict, shapes: tuple):
        shown = ", ".join(f"{n} {s}" for n, s in zip(model.input_names, shapes))
        try:
            graph = self.build(arrays)
        except LuminalError as exc:
            return None, (f"the first call's shapes ({shown}) did not compile static ({type(exc).__name__}: {exc}); "
                          "the symbolic graph serves every shape")
        return graph, (f"the first call's shapes ({shown}) compiled static: calls with these shapes run that graph, "
                       "others the symbolic one (options={'specialize': False}: the symbolic one always)")
