"""Fixtures of the fronts' tests: the counted backend probed (which puts the fronts in place),
its device, and a kernel of every scalar kind."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import kernelbay as kb
import pytest
from kernelbay import _fronts
from kernelbay import streams as _streams

from .support import Counted, store


@pytest.fixture
def be(add_backend) -> Iterator[Counted]:
    # streams.intercept counts current streams and graphs being captured: while it is not 0,
    # the fronts hand every call to the Python functions. What earlier tests in this process
    # left (a thread still inside `with stream:`) belongs to them, not to this test: it is set
    # aside for the test and what changed meanwhile is added back.
    gc.collect()
    left = _streams.intercept
    _streams.intercept = 0
    try:
        b = add_backend(Counted())
        kb.device("counted")  # the probe: the direct callables go in, and with them the fronts
        if not _fronts.active():
            pytest.skip(f"the C fronts cannot be used here: {_fronts.status()}")
        yield b
    finally:
        _fronts.use(True)
        _streams.intercept += left


@pytest.fixture
def dev(be: Counted) -> kb.Device:
    return kb.device("counted")


@pytest.fixture
def k(dev: kb.Device) -> kb.Kernel:
    return kb.compile(kb.Source(store, lang="python", name="store"), dev)
