"""The backend's native helpers (``_launch.c`` and ``_pool.c``) and their pure-Python equivalents.

The two C sources are joined into one extension (one build, one cache entry, one load),
built at first use through :func:`kernelbay.native.load_extension` and kept
in the disk cache. They hold the two hottest paths: the ``cuLaunchKernel`` call (taking plain
ints, without cuda.bindings' per-call conversions) and the allocator's cached-block pool.
Where they cannot be built (no C compiler or Python headers, ``KERNELBAY_NATIVE=0``) the
Python versions below run instead, with the same behaviour; :func:`status` says which.
"""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any

from kernelbay.native import NativeUnavailable, load_extension

__all__ = ["module", "status", "PyPool", "make_pool", "size_class"]

#: The C sources of the extension, in the order they are joined (_launch.c's init adds _pool.c's type).
SOURCES = ("_pool.c", "_launch.c")

SMALL = 8
PAGE = 16 * 1024

_state: list[Any] = []  # [module or None, reason or None], filled once


def module() -> Any:
    """The built extension, or None where it is unavailable (see :func:`status`)."""
    if not _state:
        try:
            files = resources.files(__package__)
            src = "\n".join(files.joinpath(f).read_text(encoding="utf-8") for f in SOURCES)
            mod, why = load_extension("_kbcuda_native", src), None
        except NativeUnavailable as exc:
            mod, why = None, str(exc)
        except OSError as exc:  # the C source is missing from the installation
            mod, why = None, f"the C sources {', '.join(SOURCES)} cannot be read: {exc}"
        if not _state:
            _state[:] = [mod, why]
    return _state[0]


def status() -> str:
    """``"native"``, or ``"python (<reason>)"`` where the C helpers are unavailable."""
    module()
    return "native" if _state[0] is not None else f"python ({_state[1]})"


def size_class(nbytes: int) -> int:
    """The rounded size of a request above 8 bytes: a power of two under 16 KiB, else whole pages."""
    if nbytes < PAGE:
        return 1 << max(4, (nbytes - 1).bit_length())
    return (nbytes + PAGE - 1) & -PAGE


class PyPool:
    """The pure-Python pool, interchangeable with ``_pool.c``'s ``Pool`` (see there)."""

    __slots__ = ("free_lists", "live", "active", "peak", "cached", "_limit", "_lock")

    def __init__(self, limit: int = -1) -> None:
        self.free_lists: dict[int, list[int]] = {}
        self.live: dict[int, int] = {}
        self.active = self.peak = self.cached = 0
        self._limit: int | None = None if limit < 0 else limit
        self._lock = threading.Lock()

    @property
    def limit(self) -> int | None:
        return self._limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        if value is not None and value < 0:
            raise ValueError("limit must be >= 0 or None")
        self._limit = value

    def malloc(self, nbytes: int) -> int:
        if nbytes <= SMALL:
            return 0
        size = size_class(nbytes)
        with self._lock:
            lst = self.free_lists.get(size)
            if not lst:
                return 0
            p = lst.pop()
            self.live[p] = size
            self.cached -= size
            a = self.active = self.active + size
            if a > self.peak:
                self.peak = a
        return p

    def adopt(self, ptr: int, size: int) -> None:
        with self._lock:
            self.live[ptr] = size
            a = self.active = self.active + size
            if a > self.peak:
                self.peak = a

    def free(self, ptr: int) -> int:
        with self._lock:
            size = self.live.pop(ptr, None)
            if size is None:
                return -1
            self.active -= size
            lim = self._limit
            if lim is not None and self.active + self.cached + size > lim:
                return size
            lst = self.free_lists.get(size)
            if lst is None:
                self.free_lists[size] = [ptr]
            else:
                lst.append(ptr)
            self.cached += size
        return 0

    def take_cached(self) -> list[int]:
        with self._lock:
            lists, self.free_lists = self.free_lists, {}
            self.cached = 0
        return [p for lst in lists.values() for p in lst]

    def add_active(self, n: int) -> None:
        with self._lock:
            a = self.active = self.active + n
            if a > self.peak:
                self.peak = a

    def size_of(self, ptr: int) -> int | None:
        return self.live.get(ptr)

    def stats(self) -> tuple[int, int, int]:
        return self.active, self.peak, self.cached

    def reset_peak(self) -> None:
        self.peak = self.active


def make_pool(limit: int | None) -> Any:
    """A pool for one device: the native one where available."""
    mod = module()
    lim = -1 if limit is None else limit
    return mod.Pool(lim) if mod is not None else PyPool(lim)
