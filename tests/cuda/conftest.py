from __future__ import annotations

import pytest

pytest.importorskip("kernelbay_cuda", reason="kernelbay-cuda is not installed")
pytest.importorskip("cuda.bindings", reason="cuda-bindings is not installed")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "kbcache"
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(d))
    return d
