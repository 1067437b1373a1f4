"""Streams, events and graphs in the core, against an in-process backend without the optional
hooks (so the core's fallback runs), and the contract in hookspecs.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kernelbay as kb
import numpy as np
import pytest
from kernelbay._plugins import runtime


class PlainBackend:
    """A synchronous host backend with no stream, event or graph hooks; it logs every call."""

    name = "plain"

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    @kb.hookimpl
    def kernelbay_backend(self):
        return kb.BackendSpec("plain", 50, ("python",), kb.API_VERSION, "fallback test backend")

    @kb.hookimpl
    def kernelbay_devices(self):
        return [kb.Device("plain", 0, "plain device")]

    @kb.hookimpl
    def kernelbay_allocate(self, device, nbytes):
        return bytearray(nbytes)

    @kb.hookimpl
    def kernelbay_free(self, device, handle):
        pass

    @kb.hookimpl
    def kernelbay_copy(self, dst, src, nbytes, stream):
        self.log.append(("copy", stream))

        def b(x):
            return np.frombuffer(x.handle, np.uint8) if isinstance(x, kb.Buffer) else x.reshape(-1).view(np.uint8)

        b(dst)[:nbytes] = b(src)[:nbytes]

    @kb.hookimpl
    def kernelbay_compile(self, device, source):
        return source.code

    @kb.hookimpl
    def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
        self.log.append(("launch", stream))
        views = [np.frombuffer(a.handle, a.dtype) if isinstance(a, kb.Array) else a for a in args]
        return kernel.handle(*views)

    @kb.hookimpl
    def kernelbay_synchronize(self, device, stream):
        self.log.append(("sync", stream))


@pytest.fixture(autouse=True)
def isolated_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KERNELBAY_BACKENDS", "")
    monkeypatch.delenv("KERNELBAY_DEVICE", raising=False)
    runtime.reset()  # the default-device choices live in the runtime (i17): reset clears them
    yield
    runtime.reset()


@pytest.fixture
def plain() -> PlainBackend:
    b = PlainBackend()
    runtime.add_backend(b, "plain", "kernelbay-plain")
    return b


@pytest.fixture
def dev(plain: PlainBackend) -> kb.Device:
    return kb.device("plain")
