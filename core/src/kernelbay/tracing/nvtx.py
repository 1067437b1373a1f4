"""NVTX ranges around kernelbay's operations, for Nsight Systems (``KERNELBAY_NVTX=1``).

Needs the ``nvtx`` package (``pip install nvtx``); off by default. While on, every compile,
allocate, free, copy, launch, memset and synchronize is a range in the ``kernelbay`` NVTX
domain, named like the spans of :func:`kernelbay.trace` (``launch saxpy``, ``copy HtoD``...),
so an ``nsys profile`` capture shows which kernelbay call queued which CUDA work. Like the
tracer it is an extension plugin of ``wrapper=True`` hooks; its hot-path wrappers carry
positional forms, so it costs two NVTX calls per operation and no pluggy call.
"""

from __future__ import annotations

from typing import Any

from .. import _api
from ..errors import UnsupportedError
from ..hookspecs import hookimpl
from .records import copy_ends

ENV_NVTX = "KERNELBAY_NVTX"
DOMAIN = "kernelbay"

_active: NvtxRanges | None = None


def _nvtx() -> Any:
    try:  # optional (the [nvtx] extra): imported when ranges are turned on
        import nvtx
    except ImportError:
        raise UnsupportedError(
            f"{ENV_NVTX}=1 asks for NVTX ranges, but the nvtx package is not installed; "
            f"install it (pip install nvtx) or unset {ENV_NVTX}"
        ) from None
    return nvtx


class NvtxRanges:
    """The plugin: one NVTX range per kernelbay operation."""

    def __init__(self) -> None:
        nv = _nvtx()
        self.push, self.pop = nv.push_range, nv.pop_range

    def _wrap(self, message: str) -> Any:
        self.push(message, domain=DOMAIN)
        try:
            return (yield)
        finally:
            self.pop(domain=DOMAIN)

    @hookimpl(wrapper=True)
    def kernelbay_compile(self, device: Any, source: Any) -> Any:
        return (yield from self._wrap(f"compile {source.name or '<kernel>'}"))

    @hookimpl(wrapper=True)
    def kernelbay_synchronize(self, device: Any, stream: Any) -> Any:
        return (yield from self._wrap("synchronize"))

    @hookimpl(wrapper=True)
    def kernelbay_memset(self, dst: Any, value: int, nbytes: int, stream: Any) -> Any:
        return (yield from self._wrap("memset"))

    @hookimpl(wrapper=True)
    def kernelbay_launch(self, kernel: Any, grid: Any, block: Any, args: Any, shared_mem: int, stream: Any) -> Any:
        return (yield from self._wrap(f"launch {kernel.name}"))

    @hookimpl(wrapper=True)
    def kernelbay_copy(self, dst: Any, src: Any, nbytes: int, stream: Any) -> Any:
        return (yield from self._wrap(f"copy {copy_ends(dst, src)[1]}"))

    @hookimpl(wrapper=True)
    def kernelbay_allocate(self, device: Any, nbytes: int) -> Any:
        return (yield from self._wrap("allocate"))

    @hookimpl(wrapper=True)
    def kernelbay_free(self, device: Any, handle: Any) -> Any:
        return (yield from self._wrap("free"))


def _positional(label: Any) -> Any:
    """A positional form: ``label(*args)`` names the range."""

    def make(plugin: NvtxRanges, inner: Any, b: Any) -> Any:
        push, pop = plugin.push, plugin.pop

        def call(*args: Any) -> Any:
            push(label(*args), domain=DOMAIN)
            try:
                return inner(*args)
            finally:
                pop(domain=DOMAIN)

        return call

    return make


def _copy_label(dst: Any, src: Any, nbytes: int, stream: Any) -> str:
    return f"copy {copy_ends(dst, src)[1]}"


def _install(cls: Any) -> None:
    """Attach the positional forms to the hook implementations (as the tracer does with .hot's)."""
    cls.kernelbay_launch.kernelbay_positional = _positional(lambda k, *a: f"launch {k.name}")
    cls.kernelbay_copy.kernelbay_positional = _positional(_copy_label)
    cls.kernelbay_allocate.kernelbay_positional = _positional(lambda *a: "allocate")
    cls.kernelbay_free.kernelbay_positional = _positional(lambda *a: "free")


_install(NvtxRanges)


def enable() -> NvtxRanges:
    """Turn NVTX ranges on (what ``KERNELBAY_NVTX=1`` does at import).

    :raises UnsupportedError: when the nvtx package is not installed.
    """
    global _active
    if _active is None:
        plugin = NvtxRanges()
        _api.register(plugin, name="kernelbay-nvtx")
        _active = plugin
    return _active


def disable() -> None:
    """Turn NVTX ranges off."""
    global _active
    if _active is not None:
        _api.unregister(_active)
        _active = None
