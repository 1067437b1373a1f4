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
    gc.collect()  # streams of earlier tests' backends without stream hooks, which raise streams.intercept
    assert _streams.intercept == 0
    b = add_backend(Counted())
    kb.device("counted")  # the probe: the direct callables go in, and with them the fronts
    if not _fronts.active():
        pytest.skip(f"the C fronts cannot be used here: {_fronts.status()}")
    yield b
    _fronts.use(True)


@pytest.fixture
def dev(be: Counted) -> kb.Device:
    return kb.device("counted")


@pytest.fixture
def k(dev: kb.Device) -> kb.Kernel:
    return kb.compile(kb.Source(store, lang="python", name="store"), dev)
