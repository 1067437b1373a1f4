from __future__ import annotations

import kernelbay as kb
import pytest


@pytest.fixture(autouse=True)
def tune_cache(tmp_path, monkeypatch):
    """A private cache: each test compiles and times from scratch (the workers inherit it)."""
    d = tmp_path / "kbcache"
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(d))
    return d


@pytest.fixture
def cpu():
    try:
        return kb.device("cpu")
    except kb.KernelbayError as exc:
        pytest.skip(f"the cpu backend is not available here: {exc}")
