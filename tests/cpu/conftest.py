from __future__ import annotations

import kernelbay as kb
import pytest
from kernelbay.testing import require_device


@pytest.fixture
def cpu() -> kb.Device:
    return require_device("cpu")


@pytest.fixture(scope="module")
def dev() -> kb.Device:
    """The cpu device, for module-scoped fixtures (compiled kernels) that need it."""
    return require_device("cpu")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> str:
    """A private, empty compile cache directory for this test."""
    d = str(tmp_path / "cache")
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", d)
    return d
