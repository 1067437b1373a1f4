"""The backend's native helpers (``_launch.c`` and ``_pool.c``) and their pure-Python equivalents.

They hold the two hottest paths: the ``cuLaunchKernel`` call (taking plain ints, without
cuda.bindings' per-call conversions) and the allocator's cached-block pool. The two C sources
form one extension, found in this order:

1. prebuilt: ``kernelbay_cuda._kbcuda_native``, compiled into the platform wheel (and into an
   editable install) by setup.py, used when its ``SOURCE_SHA256`` matches the sources here;
2. built at first use by :func:`kernelbay.native.load_extension` and kept in the disk cache,
   for installs without a prebuilt module (a pure wheel, an sdist built without a compiler) or
   with a stale one (an editable install whose C sources changed since);
3. the Python versions below, with the same behaviour, where neither is possible (no C
   compiler or Python headers, ``KERNELBAY_NATIVE=0``).

:func:`status` says which (``kernelbay info`` shows it; the ``kernelbay.native`` logger logs it).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import threading
from importlib import resources
from typing import Any

from kernelbay import native as _core_native
from kernelbay.native import NativeUnavailable, disabled, load_extension

__all__ = ["module", "status", "origin", "PyPool", "make_pool", "size_class"]

#: The C sources of the extension, in the order they are joined (_launch.c's init adds the types of
#: _pool.c, _graphentry.c and _direct.c through pool_add_type, at the end of _direct.c). setup.py reads
#: this list for the platform wheel's build; _native.c includes the same files.
SOURCES = (
    "_pool.c",
    "_graphentry.c",
    "_direct.c",
    "_launch.c",
    "_timer.c",
    "_cupti.c",
    "_hostcopy.c",
    "_stage.c",
    "_stagerun.c",
)
PREBUILT = "_kbcuda_native"

log = logging.getLogger("kernelbay.native")

_state: list[Any] = []  # [module or None, reason or None, origin], filled once
_loaded: list[Any] = []  # the module once loaded, even while _state turns it off


def _sources() -> str:
    files = resources.files(__name__.rpartition(".")[0])  # this package (__package__ is typed Optional)
    return "\n".join(files.joinpath(f).read_text(encoding="utf-8") for f in SOURCES)


def _prebuilt(src: str | None) -> tuple[Any, str]:
    """The wheel's compiled module, or None and why it is not used."""
    try:
        mod = importlib.import_module(f"{__package__}.{PREBUILT}")
    except ImportError as exc:
        return None, f"no prebuilt module ({exc})"
    if src is not None and getattr(mod, "SOURCE_SHA256", None) != hashlib.sha256(src.encode()).hexdigest():
        return None, "the prebuilt module is older than the C sources beside it"
    return mod, "prebuilt"


def _find() -> tuple[Any, str | None, str]:
    if disabled():
        return None, f"turned off by {_core_native.ENV_NATIVE}", "python"
    try:
        src: str | None = _sources()
    except OSError:
        src = None
    mod, why_not = _prebuilt(src)
    if mod is not None:
        return mod, None, "prebuilt"
    if src is None:
        return None, f"{why_not}, and the C sources {', '.join(SOURCES)} are not installed", "python"
    try:
        return load_extension(PREBUILT, src), None, "built at first use"
    except NativeUnavailable as exc:
        return None, f"{why_not}; {exc}", "python"


def module() -> Any:
    """The extension, or None where it is unavailable (see :func:`status`)."""
    if not _state:
        mod, why, orig = _find()
        if not _state:
            _state[:] = [mod, why, orig]
            if mod is None:
                log.info("cuda: native helpers unavailable, the pure-Python paths run: %s", why)
            else:
                _loaded.append(mod)
                log.info("cuda: native helpers %s", orig)
    return _state[0]


def stream_closed() -> None:
    """Tell the C fast paths that a stream gave its CUstream up, so that none launches on a
    handle it remembered from before (a no-op until the helpers are loaded)."""
    for mod in _loaded:
        mod.stream_closed()


def status() -> str:
    """``"native"``, or ``"python (<reason>)"`` where the C helpers are unavailable."""
    module()
    return "native" if _state[0] is not None else f"python ({_state[1]})"


def origin() -> str:
    """Where the helpers came from: ``"prebuilt"`` (the wheel), ``"built at first use"`` or ``"python"``."""
    module()
    return _state[2] if len(_state) > 2 else ("python" if _state[0] is None else "unknown")


def _report() -> str:
    s = status()
    return f"native ({origin()})" if s == "native" else s


_core_native.register_status("cuda", _report)

SMALL = 8
PAGE = 16 * 1024


def size_class(nbytes: int) -> int:
    """The rounded size of a request above 8 bytes: a power of two under 16 KiB, else whole pages."""
    if nbytes < PAGE:
        return 1 << max(4, (nbytes - 1).bit_length())
    return (nbytes + PAGE - 1) & -PAGE


class PyPool:
    """The pure-Python pool, interchangeable with ``_pool.c``'s ``Pool`` (see there for the
    stream-ordered rules: home streams, uses, blocking streams; the C pool keeps the same
    bookkeeping in bins)."""

    __slots__ = (
        "free_lists",
        "live",
        "homes",
        "stream_lists",
        "uses",
        "blocking",
        "active",
        "peak",
        "cached",
        "_limit",
        "_lock",
    )

    def __init__(self, limit: int = -1) -> None:
        self.free_lists: dict[int, list[int]] = {}
        self.live: dict[int, int] = {}
        self.homes: dict[int, int] = {}
        self.stream_lists: dict[int, dict[int, list[int]]] = {}
        self.uses: dict[int, list[int]] = {}
        self.blocking: set[int] = set()
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

    @property
    def homed(self) -> int:
        return len(self.homes)

    def _take(self, lists: dict[int, list[int]], size: int) -> int:
        lst = lists.get(size)
        if not lst:
            return 0
        p = lst.pop()
        self.live[p] = size
        self.cached -= size
        a = self.active = self.active + size
        if a > self.peak:
            self.peak = a
        return p

    def malloc(self, nbytes: int) -> int:
        if nbytes <= SMALL:
            return 0
        with self._lock:
            return self._take(self.free_lists, size_class(nbytes))

    def malloc_on(self, nbytes: int, home: int) -> int:
        if nbytes <= SMALL:
            return 0
        size = size_class(nbytes)
        with self._lock:
            p = self._take(self.stream_lists.get(home, {}), size)
            if not p and home in self.blocking:
                p = self._take(self.free_lists, size)
            if p:
                self.homes[p] = home
            return p

    def adopt(self, ptr: int, size: int, home: int = 0) -> None:
        with self._lock:
            self.live[ptr] = size
            if home:
                self.homes[ptr] = home
            a = self.active = self.active + size
            if a > self.peak:
                self.peak = a

    def note_use(self, ptr: int, stream: int) -> None:
        if self.homes.get(ptr, 0) == stream:
            return
        with self._lock:
            if ptr in self.live:
                lst = self.uses.setdefault(ptr, [])
                if stream not in lst:
                    lst.append(stream)

    def may_track(self, stream: int) -> bool:
        return stream != 0 or bool(self.homes)

    def take_uses(self, ptr: int) -> list[int]:
        with self._lock:
            return self.uses.pop(ptr, [])

    def set_blocking(self, stream: int, flag: bool) -> None:
        with self._lock:
            if flag:
                self.blocking.add(stream)
            else:
                self.blocking.discard(stream)

    def rehome(self, home: int) -> bool:
        with self._lock:
            gone = [p for p, h in self.homes.items() if h == home]
            for p in gone:
                del self.homes[p]
            lists = self.stream_lists.pop(home, {})
            moved = False
            for size, lst in lists.items():
                if lst:
                    moved = True
                    self.free_lists.setdefault(size, []).extend(lst)
            for p, lst in list(self.uses.items()):
                if home in lst:
                    moved = True
                    lst.remove(home)
                    if not lst:
                        del self.uses[p]
            self.blocking.discard(home)
            return bool(gone) or moved

    def has_home(self, home: int) -> bool:
        return (
            any(self.stream_lists.get(home, {}).values())
            or home in self.homes.values()
            or any(home in lst for lst in self.uses.values())
        )

    def free(self, ptr: int) -> int:
        with self._lock:
            if ptr in self.uses:
                return -2
            size = self.live.pop(ptr, None)
            if size is None:
                return -1
            self.active -= size
            home = self.homes.pop(ptr, 0)
            lists = self.free_lists if not home else self.stream_lists.setdefault(home, {})
            lim = self._limit
            if lim is not None and self.active + self.cached + size > lim:
                return size
            lst = lists.get(size)
            if lst is None:
                lists[size] = [ptr]
            else:
                lst.append(ptr)
            self.cached += size
        return 0

    def take_cached(self) -> list[int]:
        with self._lock:
            lists, self.free_lists = self.free_lists, {}
            streams, self.stream_lists = self.stream_lists, {}
            self.cached = 0
        out = [p for lst in lists.values() for p in lst]
        for sl in streams.values():
            out.extend(p for lst in sl.values() for p in lst)
        return out

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
