"""The benchmark's latency table: the search column appears only when a row has it (`--search`)."""

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
