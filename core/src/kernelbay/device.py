"""Backends and devices as values: :class:`BackendSpec`, :class:`Device`, :class:`MemoryStats`.

The ground floor of the values. A :class:`Device` announced by its backend's probe carries that
backend's binding (its resolved hooks) and calls it; nothing here imports the registry, device
selection or the public API (they install the two lookups of :data:`registry` instead).
"""

from __future__ import annotations

import types as _pytypes
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import streams as _streams
from .errors import InvalidArgumentError

if TYPE_CHECKING:  # pragma: no cover
    from ._binding import Binding

__all__ = ["BackendSpec", "Device", "MemoryStats", "registry"]


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _pytypes.MappingProxyType(dict(value or {}))


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    # converter=tuple, typed (type checkers cannot infer tuple's element type as a converter)
    return tuple(value)


class _Registry:
    """The two lookups values need from the registry above them, installed there at import
    (:mod:`kernelbay._api`): values never import the registry, selection or API modules.

    A device announced by its backend's probe carries its binding and needs neither; these serve
    a device made by hand (``kb.Device("cpu", 0)``), a device whose runtime was reset since, and
    an array unpickled in another process.
    """

    binding: Callable[[str], Binding]
    device: Callable[[str], Device]

    def __init__(self) -> None:
        def unset(_name: str) -> Any:
            raise RuntimeError("kernelbay's registry is not installed: import kernelbay, not kernelbay.types alone")

        self.binding = self.device = unset


registry = _Registry()


@attrs.frozen
class BackendSpec:
    """What a backend declares about itself (returned by ``kernelbay_backend``).

    :ivar name: the backend's name, equal to its entry-point name (``cuda``, ``cpu``...).
    :ivar priority: higher wins when the user lets kernelbay choose (cuda 300, tpu 200, cpu 100).
        0 or below marks a reference or debug backend: **never chosen unless named** (by
        ``kb.device("pyref")`` or ``KERNELBAY_DEVICE=pyref``); ``*`` and the default selection
        skip it, and a ``NoDeviceError`` names it as one that could be asked for.
    :ivar languages: source languages accepted, most preferred first (``("cuda", "ptx")``).
    :ivar api_version: the core API version the backend was built for
        (:data:`kernelbay.hookspecs.API_VERSION`).
    :ivar description: one line for ``kernelbay info``.
    """

    name: str
    priority: int
    languages: tuple[str, ...] = attrs.field(converter=_str_tuple)
    api_version: int
    description: str = ""

    @property
    def chosen_by_default(self) -> bool:
        """Whether ``*`` and the default selection may pick this backend (``priority > 0``)."""
        return self.priority > 0


@attrs.frozen
class Device:
    """One device of one backend, e.g. ``cuda:0``. Compare and hash by ``(backend, index)``.

    :ivar backend: the backend's name.
    :ivar index: the device's ordinal within its backend.
    :ivar name: a human name ("NVIDIA H100 80GB HBM3", "x86_64, 16 threads").
    :ivar properties: backend-specific facts (compute capability, memory...), read-only.
    """

    backend: str
    index: int = 0
    name: str = attrs.field(default="", eq=False)
    properties: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, eq=False, repr=False)
    # The binding that announced this device (set by the core after the probe, not a value field).
    _binding: Binding | None = attrs.field(default=None, init=False, eq=False, repr=False)

    def __str__(self) -> str:
        return f"{self.backend}:{self.index}"

    def __reduce__(self) -> tuple[Any, ...]:
        # a value: pickles (to a spawn worker...) with its properties as a plain dict
        return (Device, (self.backend, self.index, self.name, dict(self.properties)))

    @property
    def binding(self) -> Binding:
        """The backend's resolved hooks for this device (set by the backend's probe)."""
        b = self._binding
        if b is None or b.retired:  # made by hand, unpickled, or its runtime was reset since
            b = registry.binding(self.backend)
        return b

    def synchronize(self, stream: Any = None) -> None:
        """Block until all work queued on every stream of this device (or on ``stream``) has finished."""
        b = self._binding
        if b is None or b.retired:
            b = registry.binding(self.backend)
        if _streams.intercept:
            _streams.no_capture(self, "synchronize")
        b.synchronize(self, _streams.to_hook(stream))

    def stream(self, priority: int = 0) -> _streams.Stream:
        """A new :class:`kernelbay.Stream` on this device (``with s:`` makes it current here)."""
        return _streams.Stream.create(self, priority)

    @property
    def default_stream(self) -> _streams.Stream:
        """The device's default :class:`kernelbay.Stream` (what ``stream=None`` means)."""
        return _streams.Stream.default(self)

    def graph(self, *, serial: bool = False) -> Any:
        """A :class:`kernelbay.Graph` recording this device's work: ``with dev.graph() as g:``.

        :param serial: replay the steps one after another in recorded order, as a stream
            capture does, instead of letting steps with no data dependency run concurrently.
            A serial graph costs the host less per replay (CUDA: one chain of nodes); a
            concurrent one can finish sooner on the device when its kernels are small.
        """
        if type(serial) is not bool:
            raise InvalidArgumentError(f"serial must be True or False, got {serial!r}")
        return self.binding.new_graph(self, serial)

    def memory_stats(self) -> MemoryStats:
        """The backend's allocator figures for this device (:class:`MemoryStats`)."""
        return self.binding.memory_stats(self)

    def clear_cache(self) -> None:
        """Return memory the backend's allocator keeps cached for reuse to the device."""
        self.binding.clear_cache(self)


@attrs.frozen
class MemoryStats:
    """Allocator figures in bytes. ``limit`` is ``None`` where the backend sets none.

    ``counters`` holds a backend's own cumulative counts (``kernelbay profile`` prints them),
    e.g. cuda's ``cross_stream_frees``: frees that waited on an event because another stream used
    the block.
    """

    active: int
    peak: int
    cached: int
    limit: int | None = None
    counters: dict[str, int] = attrs.field(factory=dict, eq=False)
