"""The disk compile cache shared by backends.

One file per entry under a per-user directory (``KERNELBAY_CACHE_DIR``, else the platform's
user cache directory). The cache trusts nothing it did not make:

* Directories it creates are made 0700 from the start (never chmod-ed afterwards). A directory
  the user named is never chmod-ed either: one that another user owns, or that group or others
  can write, is refused with a message saying what to do.
* Every use re-checks: the directory, the two-letter subdirectory and the entry are opened
  without following symbolic links (``O_NOFOLLOW``) and checked on the opened descriptor
  (``fstat``: owner, type, mode); everything after is relative to those descriptors. A
  directory that vanished and was re-created by someone else is therefore seen at once.
* A per-key lock (:meth:`DiskCache.lock`, an ``flock`` on ``<key>.lock`` beside the entry) lets
  one process compile while others with the same key wait for its entry; compiles of other keys
  never wait on it, even when their keys share the two-letter subdirectory.

* Keys hash everything that defines the output -- schema, backend, compiler identity and
  version, target arch, options, full source text, entry names -- never the output itself.
* Entries are written to a temporary file and moved into place with ``os.replace``, so many
  processes may write the same key at once and a reader never sees half a file. They are not
  fsynced: after a power loss a torn entry fails its checksum and is a miss (docs/decisions.md).
* Each entry holds a checksum that is verified on every read; a truncated, corrupt or foreign
  entry is deleted and reported as a miss, never loaded. Metadata is JSON, never pickle.
* A size limit (``KERNELBAY_CACHE_MAX_BYTES``, default 1 GiB) is kept by evicting the least
  recently used entries; reads refresh an entry's time. A write does not scan the directory:
  a running total (``.size`` in the directory: bytes and the time of the last full scan) is
  read, increased by the entry's size and written back; the directory is scanned only when the
  total passes the limit (then entries are evicted) or the last scan is older than
  ``RESCAN_SECONDS`` (which corrects what concurrent writers' races lost or double-counted).

This module is the store (:class:`DiskCache`: read, write, lock) and the process's use of it
(:func:`lookup`, :func:`store`, :func:`locked`, :func:`recheck`); what an entry is (keys, file
layout, checksum) lives in ``_cacheentry``, the size limit and upkeep (totals, eviction,
``info``, ``clear``) in ``_cachespace``, the directory checks in ``_privatedir``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from . import _log, _privatedir
from ._cacheentry import LOCK, SCHEMA, SUFFIX, CacheEntry, decode, encode, make_key
from ._cachespace import DEFAULT_MAX_BYTES, ENV_MAX, RESCAN_SECONDS, CacheSpace
from ._privatedir import _CLOEXEC, _NOFOLLOW, _O_NEW, _O_READ, ENV_DIR, _is_sub
from ._privatedir import unlink_at as _unlink
from .errors import CacheError, SettingError
from .settings import env_bytes

log = logging.getLogger("kernelbay.cache")

__all__ = [
    "CacheEntry",
    "DiskCache",
    "cache_dir",
    "default_cache",
    "locked",
    "lookup",
    "make_key",
    "recheck",
    "store",
    "SCHEMA",
    "DEFAULT_MAX_BYTES",
    "ENV_MAX",
    "RESCAN_SECONDS",
]


def cache_dir() -> str:
    """The cache directory in force (not created)."""
    env = os.environ.get(ENV_DIR)
    if env:
        if "\0" in env:
            raise SettingError(f"{ENV_DIR} holds a NUL character; set it to a directory path")
        return os.path.abspath(os.path.expanduser(env))
    import platformdirs

    return platformdirs.user_cache_dir("kernelbay", appauthor=False)


class DiskCache(CacheSpace):
    """A directory of verified, atomically written compile results."""

    def __init__(self, directory: str | None = None, max_bytes: int | None = None) -> None:
        # Resolved once: a link the user named is followed now; a link swapped in later is not.
        self.directory = os.path.realpath(directory if directory else cache_dir())
        if max_bytes is None:
            max_bytes = env_bytes(ENV_MAX, default=DEFAULT_MAX_BYTES)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def path_for(self, key: str) -> str:
        if not key or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"cache keys are lowercase hex strings, got {key!r}")
        return os.path.join(self.directory, key[:2], key + SUFFIX)

    def subdir(self, name: str) -> str:
        """The path of a private subdirectory (``name``, created 0700, checked like the cache
        itself) for files that are not entries, e.g. shared objects to be loaded.

        :raises CacheError: when the cache directory or the subdirectory fails its checks.
        """
        if _is_sub(name) or not name.replace("-", "").isalnum():
            raise ValueError(f"{name!r} is not a name for a cache subdirectory")
        with self._root() as root:
            assert root is not None
            fd = self._open_sub(root, name, create=True)
            assert fd is not None
            os.close(fd)
        return os.path.join(self.directory, name)

    # --- read and write ---------------------------------------------------------------

    def get(self, key: str) -> CacheEntry | None:
        """The entry for ``key`` if present and intact; a damaged or foreign entry is deleted."""
        path = self.path_for(key)
        name = key + SUFFIX
        with self._root() as root:
            assert root is not None
            sub = self._open_sub(root, key[:2], create=False)
            if sub is None:
                return None
            try:
                try:
                    fd = os.open(name, _O_READ, dir_fd=sub)
                except FileNotFoundError:
                    return None
                except OSError:  # a link (ELOOP) or worse: never followed, removed
                    _unlink(name, sub)
                    return None
                try:
                    st = os.fstat(fd)
                    uid = _privatedir._uid()
                    if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid) or st.st_mode & 0o022:
                        entry = None
                    else:
                        entry = decode(key, path, _read_all(fd, st.st_size))
                        if entry is not None and os.utime in os.supports_fd:
                            try:
                                os.utime(fd)  # least-recently-used order
                            except OSError:
                                pass
                finally:
                    os.close(fd)
                if entry is None:
                    log.info("dropped a damaged, foreign or unsafe entry: %s", path)
                    _unlink(name, sub)
                return entry
            finally:
                os.close(sub)

    def put(self, key: str, payload: bytes, meta: Mapping[str, Any] | None = None) -> str:
        """Store ``payload`` under ``key`` atomically; returns the entry's path.

        Cache write failures (disk full, read-only) are not the user's problem: they are
        swallowed and the compiled result is still used, uncached. A directory that fails its
        checks raises :class:`CacheError`.
        """
        path = self.path_for(key)
        blob = encode(key, payload, meta)
        with self._root() as root:
            assert root is not None
            try:
                sub = self._open_sub(root, key[:2], create=True)
            except OSError as exc:
                if isinstance(exc, CacheError):
                    raise
                return path
            assert sub is not None
            tmp = f".tmp-{secrets.token_hex(8)}{SUFFIX}"
            try:
                fd = os.open(tmp, _O_NEW, 0o600, dir_fd=sub)
                try:
                    with os.fdopen(fd, "wb") as f:
                        f.write(blob)
                    os.replace(tmp, key + SUFFIX, src_dir_fd=sub, dst_dir_fd=sub)
                except BaseException:
                    _unlink(tmp, sub)
                    raise
            except OSError:
                return path
            finally:
                os.close(sub)
            total = self._add_to_total(root, len(blob))
            if total is None or total > self.max_bytes:
                self._evict(keep=path)
        return path

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold ``key``'s own lock: one process compiles it, the others with the same key wait.

        The lock is a file per key (``<key>.lock`` in the key's subdirectory, empty, kept for the
        next compile and removed by ``clear``), so that compiles of different keys never wait on
        each other (a lock per subdirectory made ~half the keys of a 200-config sweep collide).
        Where locking is impossible (no ``fcntl``, a read-only directory) this holds nothing.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fd = -1
        try:
            with self._root() as root:
                assert root is not None
                sub = self._open_sub(root, key[:2], create=True)
                assert sub is not None
                try:
                    fd = os.open(key + LOCK, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=sub)
                finally:
                    os.close(sub)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            log.debug("compile lock for %s not taken: %s", key[:12], exc)
            if fd >= 0:
                os.close(fd)
                fd = -1
        try:
            yield
        finally:
            if fd >= 0:
                os.close(fd)  # releases the flock


def _read_all(fd: int, size: int) -> bytes:
    """The file ``fd`` from where it stands to its end (``size``: what fstat said, a hint: a file
    that grew meanwhile is read to its end). Plain reads: a buffered file object costs four more
    system calls per entry."""
    parts: list[bytes] = []
    while True:
        chunk = os.read(fd, max(size + 1, 1 << 16))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


_default: dict[tuple[str, str | None], DiskCache] = {}
_warned: set[str] = set()


def default_cache() -> DiskCache:
    """The process's cache for the directory and limit currently configured.

    :raises SettingError: when ``KERNELBAY_CACHE_MAX_BYTES`` or ``KERNELBAY_CACHE_DIR`` is malformed.
    """
    k = (cache_dir(), os.environ.get(ENV_MAX))
    c = _default.get(k)
    if c is None:
        c = _default[k] = DiskCache(k[0])
    return c


def _warn(exc: BaseException) -> None:
    msg = str(exc)
    if msg not in _warned:
        _warned.add(msg)
        _log.slow_path(
            "cache",
            f"kernelbay: compiling without the disk cache, so every process compiles its kernels anew: {msg}",
            log,
            stacklevel=4,
        )


#: Called as ``observer(key, hit)`` after every :func:`lookup` while set (the tracer counts
#: disk hits and misses of compiles this way); ``None`` costs nothing.
observer: Callable[[str, bool], None] | None = None


def lookup(key: str) -> tuple[DiskCache | None, CacheEntry | None]:
    """``(cache, entry)`` for ``key`` in the default cache, for callers that must work without one:
    ``(None, None)`` when the cache cannot be used at all (logged once as a warning on the
    ``kernelbay.cache`` logger), ``(cache, None)`` on a miss or an unreadable entry. Pair with
    :func:`store`.

    :raises SettingError: for a malformed setting: a user's mistake is reported, not worked around.
    """
    cache, entry = _lookup(key)
    if observer is not None:
        observer(key, entry is not None)
    return cache, entry


def _lookup(key: str) -> tuple[DiskCache | None, CacheEntry | None]:
    cache = default_cache()
    try:
        hit = cache.get(key)
        log.debug("%s %s", "hit" if hit is not None else "miss", key[:16])
        return cache, hit
    except (CacheError, OSError) as exc:
        _warn(exc)
        return None, None


def store(cache: DiskCache | None, key: str, payload: bytes, meta: Mapping[str, Any] | None = None) -> None:
    """Put ``payload`` in ``cache`` (from :func:`lookup`); a cache that cannot take it is skipped:
    a full disk or a read-only directory costs the next process a rebuild, nothing more."""
    if cache is None:
        return
    try:
        cache.put(key, payload, meta)
    except (CacheError, OSError) as exc:
        _warn(exc)


@contextlib.contextmanager
def locked(cache: DiskCache | None, key: str) -> Iterator[None]:
    """Hold ``key``'s compile lock in ``cache`` (from :func:`lookup`); nothing when there is no cache.

    Use it around "look again, else compile and store", so that N processes on a cold cache
    compile once::

        cache, hit = lookup(key)
        if hit is None:
            with locked(cache, key):
                hit = cache.get(key) if cache else None   # another process may have made it
                ...compile, store(cache, key, image)...
    """
    if cache is None:
        yield
        return
    with cache.lock(key):  # never raises for a lock it cannot take: it holds nothing then
        yield


def recheck(cache: DiskCache | None, key: str) -> CacheEntry | None:
    """``cache.get(key)`` that never raises (the second look inside :func:`locked`)."""
    if cache is None:
        return None
    try:
        return cache.get(key)
    except (CacheError, OSError):
        return None
