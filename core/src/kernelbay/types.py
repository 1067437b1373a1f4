"""The values kernelbay passes between the user, the core and the backends, in one import.

Frozen attrs classes for values (:class:`Device`, :class:`Source`, :class:`LaunchConfig`,
:class:`BackendSpec`, :class:`MemoryStats`); ``attrs.define`` for things with state
(:class:`Buffer`, :class:`Array`, :class:`Kernel`). They live in :mod:`kernelbay.device`,
:mod:`kernelbay.memory`, :mod:`kernelbay.kernel` and :mod:`kernelbay.source`; backends import
them from here.
"""

from __future__ import annotations

from .device import BackendSpec, Device, MemoryStats
from .kernel import Kernel, LaunchConfig, dim3
from .memory import Array, Buffer
from .source import Source

__all__ = [
    "Array",
    "BackendSpec",
    "Buffer",
    "Device",
    "Kernel",
    "LaunchConfig",
    "MemoryStats",
    "Source",
    "dim3",
]
