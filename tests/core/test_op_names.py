"""Op names are spelled through the `Op` enum (`Op.MAT_MUL.title`), not as string literals, so
that renaming an op breaks at import and not in a silent lookup. An op name is what identifies
an HLIR op: its title ("MatMul", also the egglog constructor's name) or its enum name
("MAT_MUL"). Lower-case words ("add", "exp") are tensor methods and ATen names, not counted. The
op table and the ONNX frontend (whose op types share many HLIR names) are exempt."""

import ast
from pathlib import Path

from luminal.hlir.ops import Op

PACKAGE = Path(__file__).resolve().parents[2] / "luminal"
EXEMPT = ("luminal/hlir/ops.py", "luminal/frontends/onnx/")
NAMES = {op.title for op in Op} | {op.name for op in Op}
MOST = 10  # issue 32's bound; sympy's "Mod" (torch's symbolic shapes, hlir/symbolic.py) counts, though no op


def op_name_literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each string constant of `source` equal to an op name, docstrings aside."""
    tree = ast.parse(source)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in NAMES and id(n) not in docstrings]


def test_the_counter_finds_op_names_outside_docstrings():
    source = '"""MatMul"""\nx = {"SumReduce": 1, "sum": 2}\ny = f"MAX_REDUCE {x}"\nz = ("MAX_REDUCE", Op.ADD.title)\n'
    assert op_name_literals(source) == [(2, "SumReduce"), (4, "MAX_REDUCE")]


def test_at_most_ten_op_name_literals_outside_the_op_table_and_onnx():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if not rel.startswith(EXEMPT):
            found += [f"{rel}:{line} {value!r}" for line, value in op_name_literals(path.read_text())]
    assert len(found) <= MOST, f"{len(found)} op names spelled as strings (spell them Op.X.title):\n" + "\n".join(found)
