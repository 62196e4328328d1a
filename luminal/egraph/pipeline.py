"""`optimize`: partition -> (encode -> saturate -> extract) per distinct part -> splice -> attention
-> regions.

Every schedule has named limits: iterations per ruleset (`SCHEDULE`), e-nodes per part
(`MAX_ENODES`) and seconds per part (`MAX_SECONDS`); a part that hits one keeps what the rules
found so far. If egglog fails on a part (an error or a Rust panic), that part is kept as it
was and the report says so: rewriting is an optimization, never a reason to fail a compile.

Declarations and rules live in one e-graph per process; each part is encoded after a `push`
and dropped by a `pop` (declaring the rules costs more than optimizing a small part). Distinct
parts are optimized once per process: templates are cached by part signature (`CACHE_SIZE`).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

from luminal.egraph import compat as eg
from luminal.egraph import contained, rules_algebra, rules_fusion, rules_numerics
from luminal.egraph.attention import fuse_attention
from luminal.egraph.encode import encode
from luminal.egraph.extract import Extraction, instantiate
from luminal.egraph.partition import Part, partition
from luminal.egraph.regions import fuse_regions, region_op_counts
from luminal.egraph.schema import program
from luminal.hlir.ops import Node, Op
from luminal.threadflags import gc_paused


@dataclass(frozen=True)
class Phase:
    ruleset: str
    max_iterations: int


# algebra first (folds constants the fusion patterns then see), fusion until nothing changes
# (Sigmoid and Softmax match on the Exp that an earlier iteration made), numerics last
SCHEDULE = (Phase("algebra", 4), Phase("fusion", 8), Phase("numerics", 2))
RULESETS = {rules_algebra.RULESET: rules_algebra.RULES, rules_fusion.RULESET: rules_fusion.RULES,
            rules_numerics.RULESET: rules_numerics.RULES}
MAX_ENODES = 200_000  # per part: stop rewriting beyond this e-graph size
MAX_SECONDS = 10.0  # per part, all phases together
CACHE_SIZE = 512  # optimized templates kept per process, keyed by part signature

_CACHE: collections.OrderedDict = collections.OrderedDict()
_EGRAPHS = threading.local()  # .egraph: this thread's declared e-graph
_LOCK = threading.Lock()


@dataclass
class Template:
    entries: list
    outputs: list
    rules: dict[str, int]
    size: int
    note: str | None = None


def _declared_egraph():
    """One e-graph per thread holding the declarations and rules (declaring them costs more
    than optimizing a small part); each part runs between a push and a pop. Per thread, not per
    process: egglog's EGraph is a pyo3 `unsendable` object, which panics when another thread
    touches or drops it (a model compiled lazily by a second thread, e.g. a staged ONNX
    model's loop body)."""
    egraph = getattr(_EGRAPHS, "egraph", None)
    if egraph is None:
        egraph = eg.new_egraph()
        eg.run(egraph, eg.parse(egraph, program(RULESETS)))
        _EGRAPHS.egraph = egraph
    return egraph


def identity_template(part: Part, note: str | None = None) -> Template:
    index = {id(n): i for i, n in enumerate(part.nodes)}
    slots = {id(n): i for i, n in enumerate(part.slots)}
    entries = [(n.op, n.dtype, n.shape, tuple(("n", index[id(s)]) if id(s) in index else ("s", slots[id(s)])
                                              for s in n.src), n.arg) for n in part.nodes]
    outputs = [("n", o) if o >= 0 else ("s", -1 - o) for o in part.outputs]
    return Template(entries, outputs, {}, 0, note)


def optimize_part(part: Part, times: dict[str, float]) -> Template:
    """Saturate one part under SCHEDULE and extract the cheapest equivalent graph."""
    if not part.nodes or any(o < 0 for o in part.outputs):
        return identity_template(part)
    with _LOCK:  # one part at a time (the template cache and egglog's own state are shared)
        t0 = time.perf_counter()
        egraph = _declared_egraph()
        eg.push(egraph)
        try:
            return _saturate_and_extract(egraph, part, times, t0)
        except BaseException:
            _EGRAPHS.egraph = None  # after an error inside egglog, do not trust that e-graph again
            raise
        finally:
            if getattr(_EGRAPHS, "egraph", None) is egraph:
                eg.pop(egraph)


def _saturate_and_extract(egraph, part: Part, times: dict[str, float], t0: float) -> Template:
    enc = encode(part.nodes, part.slots)
    eg.run(egraph, enc.commands)
    t1 = time.perf_counter()
    times["encode"] += t1 - t0
    fired: collections.Counter = collections.Counter()
    note = None
    for phase in SCHEDULE:
        for _ in range(phase.max_iterations):
            changed, matches = eg.run_ruleset(egraph, phase.ruleset)
            fired.update({k: v for k, v in matches.items() if v})
            if not changed:
                break
            if time.perf_counter() - t0 > MAX_SECONDS:
                note = f"MAX_SECONDS ({MAX_SECONDS}) reached in {phase.ruleset}"
                break
            if sum(eg.function_sizes(egraph).values()) > MAX_ENODES:
                note = f"MAX_ENODES ({MAX_ENODES}) reached in {phase.ruleset}"
                break
        if note:
            break
    t2 = time.perf_counter()
    times["saturate"] += t2 - t1
    ex = Extraction(egraph, enc)
    entries, outputs = ex.template(part.outputs)
    times["extract"] += time.perf_counter() - t2
    return Template(entries, outputs, dict(fired), ex.size, note)


def _template(part: Part, times: dict[str, float]) -> tuple[Template, bool]:
    cached = _CACHE.get(part.signature)
    if cached is not None:
        _CACHE.move_to_end(part.signature)
        return cached, True
    template = contained(lambda: optimize_part(part, times), lambda exc: identity_template(
        part, f"egglog failed on a part, kept unoptimized: {type(exc).__name__}: {exc}"))
    _CACHE[part.signature] = template
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return template, False


def optimize(outputs: list[Node], report) -> list[Node]:
    """The optimized graph computing `outputs`; fills `report` (phases, rules, e-graph size).

    The cyclic garbage collector is paused meanwhile: this pass allocates many small tuples
    and nodes (none in cycles), and inside torch.compile every collection would walk Dynamo's
    whole heap (seconds at 32 layers)."""
    with gc_paused():
        return _optimize(outputs, report)


def _optimize(outputs: list[Node], report) -> list[Node]:
    times = collections.defaultdict(float)
    t0 = time.perf_counter()
    parts = partition(list(outputs))
    times["partition"] = time.perf_counter() - t0
    mapping: dict[int, Node] = {}
    fired: collections.Counter = collections.Counter()
    size, distinct, cached = 0, {}, 0
    splice = 0.0
    for part in parts:
        template, hit = _template(part, times)
        t1 = time.perf_counter()
        if part.signature not in distinct:
            distinct[part.signature] = template
            size += template.size
            cached += hit
            if template.note:
                report.notes.append(template.note)
        fired.update(template.rules)  # every instance gets the rewrites of its template
        slots = [mapping.get(id(s), s) for s in part.slots]
        news = instantiate(template.entries, template.outputs, slots)
        roots = [part.nodes[o] if o >= 0 else part.slots[-1 - o] for o in part.outputs]
        for old, new in zip(roots, news):
            if old.dtype is not new.dtype or old.shape != new.shape:
                raise AssertionError(f"rewriting changed {old} into {new}")
            mapping[id(old)] = new
        splice += time.perf_counter() - t1
    times["splice"] = splice
    t2 = time.perf_counter()
    optimized = [mapping.get(id(n), n) for n in outputs]
    optimized, attentions = fuse_attention(optimized)  # before regions absorb the scale and the mask
    if attentions:
        fired[f"softmax(q@kt+mask)@v = {Op.ATTENTION.title}"] += attentions
    optimized, regions = fuse_regions(optimized)
    times["regions"] = time.perf_counter() - t2
    if regions:
        fired["elementwise chain = FusedElementwise"] += regions
        inside = ", ".join(f"{k} {v}" for k, v in region_op_counts(optimized).items())
        report.notes.append(f"inside the FusedElementwise regions: {inside}")
    report.rules_fired = dict(fired.most_common())
    report.egraph_size = size
    for k in ("partition", "encode", "saturate", "extract", "splice", "regions"):
        report.phases[k] = times.get(k, 0.0)
    report.notes.append(f"{len(parts)} parts, {len(distinct)} distinct ({cached} from the template cache)")
    return optimized
