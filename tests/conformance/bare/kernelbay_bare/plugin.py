"""The required hooks only, pyref's functions: the conformance suite run on this backend checks
that the core's fallback of every optional hook gives the results the hooks must give."""

from __future__ import annotations

import kernelbay as kb
from kernelbay import hookimpl
from kernelbay_pyref import allocator, launcher

kernelbay_allocate = hookimpl(allocator.allocate)
kernelbay_free = hookimpl(allocator.free)
kernelbay_copy = hookimpl(allocator.copy)
kernelbay_compile = hookimpl(launcher.compile)
kernelbay_launch = hookimpl(launcher.launch)


@hookimpl
def kernelbay_backend() -> kb.BackendSpec:
    return kb.BackendSpec(
        name="bare",
        priority=0,
        languages=("python",),
        api_version=1,
        description="pyref without optional hooks (tests the core's fallbacks)",
    )


@hookimpl
def kernelbay_devices() -> list[kb.Device]:
    return [kb.Device("bare", 0, "Python interpreter, no optional hooks")]


@hookimpl
def kernelbay_synchronize(device: kb.Device, stream: object) -> None:
    return None
