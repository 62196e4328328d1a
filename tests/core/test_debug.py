"""LUMINAL_DEBUG levels, the `luminal` logger, and how compiled graphs show themselves."""

import logging

import numpy as np

import luminal as lm


def _compile(**kw):
    g = lm.Graph("dbg")
    x = g.input("x", ("b", 8))
    g.output(x.softmax(-1))
    return g.compile(**kw)


def test_debug_levels(monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="luminal")
    for lvl, expect, absent in [(1, "compiled 'dbg'", "optimized graph"), (3, "optimized graph", "generated CUDA C"),
                                (4, "generated CUDA C", None)]:
        caplog.clear()
        monkeypatch.setenv("LUMINAL_DEBUG", str(lvl))
        _compile()
        text = caplog.text
        assert expect in text
        if absent:
            assert absent not in text
    monkeypatch.setenv("LUMINAL_DEBUG", "2")
    caplog.clear()
    _compile()
    assert "rules fired:" in caplog.text


def test_silent_without_debug(monkeypatch, caplog):
    monkeypatch.delenv("LUMINAL_DEBUG", raising=False)
    caplog.set_level(logging.INFO, logger="luminal")
    _compile()
    assert "compiled" not in caplog.text


def test_compiled_graph_display_and_report():
    c = _compile()
    html = c._repr_html_()
    assert "luminal compile report" in html and "<table>" in html
    text = str(c.report())
    assert "phases" in text and "before" in text and "after" in text
    assert np.allclose(c(np.zeros((2, 8), np.float32))[0], 1 / 8)
    assert "1 calls" in repr(c)
