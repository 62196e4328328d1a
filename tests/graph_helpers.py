"""Helpers for tests that put many saved models into one plan (imported as the suite imports
op_cases.py: tests/ is on sys.path)."""

from luminal.hlir.ops import Node, Op, toposort


def renamed_inputs(outputs, prefix):
    """The same graph with every input renamed `prefix + name`, so many models share one plan."""
    new = {}
    for n in toposort(outputs):
        if n.op is Op.INPUT:
            new[id(n)] = Node(Op.INPUT, n.dtype, n.shape, (), prefix + n.arg)
        else:
            new[id(n)] = n.replace(src=tuple(new[id(s)] for s in n.src))
    return [new[id(n)] for n in outputs]
