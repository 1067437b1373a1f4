"""Fixtures for the tpu backend's own tests: interpret mode on the CPU for this directory."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("kernelbay_tpu", reason="kernelbay-tpu is not installed")
pytest.importorskip("jax", reason="jax is not installed")


@pytest.fixture(autouse=True, scope="module")
def _interpret() -> Any:
    from kernelbay_tpu.testing import interpret_mode

    with interpret_mode():
        yield


@pytest.fixture
def dev() -> Any:
    import kernelbay as kb

    return kb.device("tpu")
