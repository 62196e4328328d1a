"""Fixtures of the compile cache's tests (test_compile_cache.py, test_compile_cache_export.py)."""

import pytest

from luminal import compile_cache


@pytest.fixture
def cache(tmp_path, monkeypatch, one_library):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LUMINAL_COMPILE_CACHE", "1")
    monkeypatch.delenv("LUMINAL_CACHE_MAX_MB", raising=False)
    return tmp_path / compile_cache.FOLDER
