from __future__ import annotations

import pytest

pytest.importorskip("kernelbay_cuda", reason="kernelbay-cuda is not installed")
pytest.importorskip("cuda.bindings", reason="cuda-bindings is not installed")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "kbcache"
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(d))
    return d


@pytest.fixture(params=["native", "python"])
def make(request):
    """The allocator's pool class: the native helper's ``Pool``, then the pure-Python one."""
    from kernelbay_cuda import native

    if request.param == "native":
        mod = native.module()
        if mod is None:
            pytest.skip(f"the native helpers are unavailable here: {native.status()}")
        return mod.Pool
    return native.PyPool
