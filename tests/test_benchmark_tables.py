"""The benchmarks' tables: the latency table's search column appears only when a row has it (`--search`); the training table's header says what its peak leaves out."""

from benchmarks.__main__ import table


def _row(**extra):
    row = {"model": "m", "tokens": 8, "eager_ms": 2.0, "cpu_ms": 1.0, "cpu_vs_eager": 0.5}
    row.update(extra)
    return row


def test_table_without_search_has_no_search_column():
    text = table([_row()])
    header, rule, line = text.splitlines()
    assert "search" not in header
    assert header.count("|") == rule.count("|") == line.count("|")


def test_table_with_search_names_the_choice():
    text = table([_row(cpu_search_ms=0.8, cpu_search_vs_eager=0.4, cpu_search_chosen="gemm=avx512"), _row()])
    header, rule, first, second = text.splitlines()
    assert "search on" in header
    assert "0.80 (0.40): gemm=avx512" in first
    assert "– (–): –" in second  # a row without it: dashes, the columns still line up
    assert header.count("|") == rule.count("|") == first.count("|") == second.count("|")


def test_training_header_says_what_the_peak_leaves_out():
    """`--training`: the peak is read above a level taken after every process imported the same
    compile libraries (`libraries_mb`); the header says so, and a JSON from before says nothing of it."""
    import copy
    import json
    from pathlib import Path

    from benchmarks import training

    result = json.loads((Path(training.__file__).parent / "results" / "training.json").read_text())
    libraries = max(run["libraries_mb"] for row in result["rows"] for run in row["runs"].values())
    assert libraries > 0
    assert f"egglog: {libraries:.0f} MB resident, not counted" in training.render(result)
    older = copy.deepcopy(result)
    for row in older["rows"]:
        for run in row["runs"].values():
            del run["libraries_mb"]
    assert "not counted" not in training.render(older)
    assert set(training.LIBRARIES) >= {"torch._dynamo", "luminal.frontends.torch.dynamo", "egglog"}
