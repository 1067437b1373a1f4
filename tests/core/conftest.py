"""Core unit tests run against in-process fake backends only (installed ones are hidden)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import kernelbay as kb
import numpy as np
import pytest
from kernelbay._plugins import runtime


class FakeBackend:
    """A minimal, correct backend: host memory in bytearrays, Python-function kernels."""

    def __init__(self, name: str = "fake", priority: int = 50, ndev: int = 1, languages=("python",)):
        self.name, self.priority, self.ndev, self.languages = name, priority, ndev, tuple(languages)
        self.calls: list[str] = []
        self.freed = 0

    @kb.hookimpl
    def kernelbay_backend(self):
        return kb.BackendSpec(self.name, self.priority, self.languages, kb.API_VERSION, "fake for tests")

    @kb.hookimpl
    def kernelbay_devices(self):
        return [kb.Device(self.name, i, f"{self.name} device {i}") for i in range(self.ndev)]

    @kb.hookimpl
    def kernelbay_allocate(self, device, nbytes):
        return bytearray(nbytes)

    @kb.hookimpl
    def kernelbay_free(self, device, handle):
        self.freed += 1

    @kb.hookimpl
    def kernelbay_copy(self, dst, src, nbytes, stream):
        def b(x):
            return np.frombuffer(x.handle, np.uint8) if isinstance(x, kb.Buffer) else x.reshape(-1).view(np.uint8)

        b(dst)[:nbytes] = b(src)[:nbytes]

    @kb.hookimpl
    def kernelbay_compile(self, device, source):
        if source.code == "bad":
            raise kb.CompileError("fake compile failed", log="error: bad", source="bad", lines={1})
        return source.code

    @kb.hookimpl
    def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
        self.calls.append("launch")
        return kernel.handle(*args)

    @kb.hookimpl
    def kernelbay_synchronize(self, device, stream):
        self.calls.append("sync")


class UnavailableBackend(FakeBackend):
    @kb.hookimpl
    def kernelbay_devices(self):
        raise kb.BackendUnavailableError("no fake chip found; set KERNELBAY_DEVICE=fake")


@pytest.fixture(autouse=True)
def isolated_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KERNELBAY_BACKENDS", "")
    monkeypatch.delenv("KERNELBAY_DEVICE", raising=False)
    runtime.reset()
    runtime.default_devices.clear()
    yield
    runtime.reset()
    runtime.default_devices.clear()


@pytest.fixture
def add_backend() -> Callable[..., Any]:
    def add(plugin: object, name: str | None = None, distribution: str | None = None):
        name = name or plugin.name
        runtime.add_backend(plugin, name, distribution or f"kernelbay-{name}")
        return plugin

    return add


@pytest.fixture
def fake(add_backend) -> FakeBackend:
    return add_backend(FakeBackend())
