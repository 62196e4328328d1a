"""The import graph of the package: layers import downwards, so no import cycles.

Every `import` counts, lazy ones inside functions too: a lazy import hides a cycle from Python
but not from a reader. The one cycle allowed is the builder's: `Tensor` methods live in mixin
modules that build new `Tensor`s.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "luminal"
ALLOWED = {frozenset({
    "luminal.builder.elementwise", "luminal.builder.functional", "luminal.builder.graph",
    "luminal.builder.indexing", "luminal.builder.linalg", "luminal.builder.reductions", "luminal.builder.tensor",
})}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _targets(mods: dict[str, Path], module: str, node) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = module.split(".") if mods[module].name == "__init__.py" else module.split(".")[:-1]
            pkg = pkg[: len(pkg) - node.level + 1]
            base = ".".join(pkg + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    found = []
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name.startswith("luminal") and name != module and not module.startswith(name + "."):
            found.append(name)  # importing one's own parent package is not a layering edge
    return found


def import_graph(sites: dict[tuple[str, str], str] | None = None) -> dict[str, set[str]]:
    """{module: the modules it imports}; `sites` gets (module, imported) -> "path:line" of the
    first import of each edge."""
    mods = _modules()
    graph = {m: set() for m in mods}
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(mods, module, node):
                    graph[module].add(target)
                    if sites is not None:
                        sites.setdefault((module, target), f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (iterative Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def test_the_walker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_no_import_cycles_but_the_builder_mixins():
    sites = {}
    graph = import_graph(sites)
    unexpected = [c for c in cycles(graph) if c not in ALLOWED]
    edges = ["\n".join(f"  {a} -> {b} ({sites[a, b]})" for a in sorted(c) for b in sorted(graph[a] & c)) for c in unexpected]
    assert not unexpected, "import cycles among luminal modules, by their imports:\n" + "\n\n".join(edges)
