"""Everything luminal needs from egglog's low-level bindings, in one place.

Written against egglog 13.2 (Python 3.11) and 14.x (Python 3.12): only classes both versions
expose are used (`EGraph.parse_program/run_program/freeze/value_to_*`, `ActionCommand`,
`Union`, `Call`, `Lit`, `Int`/`Float`/`String`, `Set`, `Expr_`, `RunSchedule`/`Run`/`RunConfig`,
`Push`/`Pop`, `PanicSpan`). Facts from /work/shared/EGGLOG_NOTES.md shape it:
- model-sized programs are never parsed as text (13.2 copies the whole source into every
  span: memory quadratic in the text); commands are built from binding objects that share
  one span. Declarations and rules (a few hundred lines) are parsed as text.
- egglog panics raise pyo3's `PanicException`, a `BaseException` that is not importable by
  name: the pipeline catches `BaseException` (except KeyboardInterrupt/SystemExit) around egglog.
"""

from __future__ import annotations

import sys


def _load_bindings():
    """egglog's Rust bindings (`egglog.bindings`), loaded on their own when the `egglog` package
    is not imported yet: its `__init__` builds the high-level Python API (hundreds of ms of
    imports, most of egglog's import time) that luminal never uses. The module is registered
    under its own name, so a later `import egglog` reuses it (a pyo3 module initializes once
    per process)."""
    if "egglog.bindings" in sys.modules:
        return sys.modules["egglog.bindings"]
    if "egglog" not in sys.modules:
        import importlib.machinery
        import importlib.util
        from pathlib import Path

        spec = importlib.util.find_spec("egglog")
        folders = list(spec.submodule_search_locations or []) if spec else []
        for path in (Path(f) / f"bindings{s}" for f in folders for s in importlib.machinery.EXTENSION_SUFFIXES):
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader("egglog.bindings", str(path))
                module = importlib.util.module_from_spec(importlib.util.spec_from_loader("egglog.bindings", loader))
                sys.modules["egglog.bindings"] = module
                loader.exec_module(module)
                return module
    from egglog import bindings

    return bindings


_b = _load_bindings()

SPAN = _b.PanicSpan()  # one shared span object: no per-node copy of anything


def new_egraph():
    return _b.EGraph()


def push(eg) -> None:
    """Save the e-graph state (declarations and rules stay; a part's terms go with `pop`)."""
    eg.run_program(_b.Push(1))


def pop(eg) -> None:
    eg.run_program(_b.Pop(SPAN, 1))


def parse(eg, text: str) -> list:
    return eg.parse_program(text)


def run(eg, commands) -> list:
    return eg.run_program(*commands)


# --- expressions and actions ----------------------------------------------------------------
def i64(v: int):
    return _b.Lit(SPAN, _b.Int(int(v)))


def f64(v: float):
    return _b.Lit(SPAN, _b.Float(float(v)))


def string(v: str):
    return _b.Lit(SPAN, _b.String(v))


def call(name: str, *args):
    return _b.Call(SPAN, name, list(args))


def union(lhs, rhs):
    return _b.ActionCommand(_b.Union(SPAN, lhs, rhs))


def fact(expr):
    """Insert a relation row, e.g. `fact(call("Bcast", i64(3)))`."""
    return _b.ActionCommand(_b.Expr_(SPAN, expr))


def set_value(name: str, args: list, value):
    return _b.ActionCommand(_b.Set(SPAN, name, list(args), value))


def run_ruleset(eg, ruleset: str) -> tuple[bool, dict[str, int]]:
    """One iteration of `ruleset`: (whether the e-graph changed, matches per rule name)."""
    (out,) = eg.run_program(_b.RunSchedule(_b.Run(SPAN, _b.RunConfig(ruleset, None))))
    report = out.report
    return bool(report.updated), dict(report.num_matches_per_rule)


def function_sizes(eg) -> dict[str, int]:
    (out,) = eg.run_program(_b.PrintSize(SPAN, None))
    return dict(getattr(out, "sizes", []))


# --- reading the e-graph back -----------------------------------------------------------------
def frozen_rows(eg):
    """{function name: (input sorts, output sort, [(inputs, output), ...])}, subsumed rows left out."""
    frozen = eg.freeze()
    out = {}
    for name, fn in frozen.functions.items():
        rows = [(list(r.inputs), r.output) for r in fn.rows if not r.subsumed]
        out[name] = (list(fn.input_sorts), fn.output_sort, rows)
    return out


def literal(eg, sort: str, value):
    """A Python value for a primitive egglog value of `sort`."""
    if sort == "i64":
        return eg.value_to_i64(value)
    if sort == "f64":
        return eg.value_to_f64(value)
    if sort == "String":
        return eg.value_to_string(value)
    if sort == "bool":
        return eg.value_to_bool(value)
    raise TypeError(f"unexpected egglog sort {sort!r}")
