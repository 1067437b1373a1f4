"""The disk compile cache shared by backends.

One file per entry under a per-user directory (``KERNELBAY_CACHE_DIR``, else the platform's
user cache directory), created with mode 0700 and refused if another user owns it.

* Keys hash everything that defines the output -- schema, backend, compiler identity and
  version, target arch, options, full source text, entry names -- never the output itself.
* Entries are written to a temporary file, fsynced and moved into place with ``os.replace``,
  so many processes may write the same key at once and a reader never sees half a file.
* Each entry holds a checksum that is verified on every read; a truncated, corrupt or foreign
  entry is deleted and reported as a miss, never loaded. Metadata is JSON, never pickle.
* A size limit (``KERNELBAY_CACHE_MAX_BYTES``, default 1 GiB) is kept by evicting the least
  recently used entries; reads refresh an entry's time.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .errors import CacheError

__all__ = ["CacheEntry", "DiskCache", "cache_dir", "default_cache", "lookup", "make_key", "store", "SCHEMA"]

#: Bump to invalidate every entry written by older code.
SCHEMA = 1
_MAGIC = b"KBC\x01"
_HEADER = struct.Struct("<4sIQ")  # magic, metadata length, payload length
_DIGEST = 32
ENV_DIR = "KERNELBAY_CACHE_DIR"
ENV_MAX = "KERNELBAY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
_SUFFIX = ".kbc"


def cache_dir() -> str:
    """The cache directory in force (not created)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    import platformdirs

    return platformdirs.user_cache_dir("kernelbay", appauthor=False)


def make_key(
    *,
    backend: str,
    compiler: str,
    compiler_version: str,
    arch: str,
    options: Iterable[str] = (),
    source: str | bytes = "",
    entries: Iterable[str] = (),
    extra: Mapping[str, str] | None = None,
) -> str:
    """A hex key over everything that defines a compiled result."""
    h = hashlib.sha256()

    def put(tag: str, value: str | bytes) -> None:
        data = value.encode() if isinstance(value, str) else value
        h.update(tag.encode() + b"\0" + len(data).to_bytes(8, "little") + data)

    put("schema", str(SCHEMA))
    put("backend", backend)
    put("compiler", compiler)
    put("compiler_version", compiler_version)
    put("arch", arch)
    for o in options:
        put("option", o)
    put("source", source)
    for e in entries:
        put("entry", e)
    for k, v in sorted((extra or {}).items()):
        put("extra:" + k, v)
    return h.hexdigest()


@attrs.frozen
class CacheEntry:
    """A verified entry: the compiled payload and its JSON metadata."""

    key: str
    payload: bytes
    meta: Mapping[str, Any]
    path: str


class DiskCache:
    """A directory of verified, atomically written compile results."""

    def __init__(self, directory: str | None = None, max_bytes: int | None = None) -> None:
        self.directory = os.path.abspath(directory) if directory else cache_dir()
        if max_bytes is None:
            raw = os.environ.get(ENV_MAX)
            try:
                max_bytes = int(raw) if raw else DEFAULT_MAX_BYTES
            except ValueError:
                raise CacheError(f"{ENV_MAX}={raw!r} is not a number of bytes") from None
        self.max_bytes = max_bytes
        self._ready = False
        self._lock = threading.Lock()

    # --- directory --------------------------------------------------------------------

    def _ensure_dir(self) -> None:
        if self._ready:
            return
        d = self.directory
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            st = os.stat(d)
        except OSError as exc:
            raise CacheError(
                f"cannot create the kernelbay cache directory {d!r}: {exc.strerror}; "
                f"set {ENV_DIR} to a writable directory"
            ) from exc
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(f"kernelbay cache path {d!r} is not a directory; set {ENV_DIR} elsewhere")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise CacheError(
                f"kernelbay cache directory {d!r} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); "
                f"refusing to load code from it. Set {ENV_DIR} to a directory of your own"
            )
        if st.st_mode & 0o077:
            try:
                os.chmod(d, 0o700)
            except OSError:
                pass
        self._ready = True

    def path_for(self, key: str) -> str:
        if not key or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"cache keys are lowercase hex strings, got {key!r}")
        return os.path.join(self.directory, key[:2], key + _SUFFIX)

    # --- read and write ---------------------------------------------------------------

    def get(self, key: str) -> CacheEntry | None:
        """The entry for ``key`` if present and intact; a damaged entry is deleted."""
        self._ensure_dir()
        path = self.path_for(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return None
        entry = self._decode(key, path, data)
        if entry is None:
            self._discard(path)
            return None
        try:
            os.utime(path)  # least-recently-used order
        except OSError:
            pass
        return entry

    @staticmethod
    def _decode(key: str, path: str, data: bytes) -> CacheEntry | None:
        if len(data) < _HEADER.size + _DIGEST:
            return None
        magic, mlen, plen = _HEADER.unpack_from(data)
        if magic != _MAGIC or _HEADER.size + mlen + plen + _DIGEST != len(data):
            return None
        body = data[_HEADER.size : -_DIGEST]
        if hashlib.sha256(body).digest() != data[-_DIGEST:]:
            return None
        try:
            meta = json.loads(body[:mlen].decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        if not isinstance(meta, dict) or meta.get("key") != key or meta.get("schema") != SCHEMA:
            return None
        return CacheEntry(key=key, payload=bytes(body[mlen:]), meta=meta.get("meta", {}), path=path)

    def put(self, key: str, payload: bytes, meta: Mapping[str, Any] | None = None) -> str:
        """Store ``payload`` under ``key`` atomically; returns the entry's path.

        Cache write failures (disk full, read-only) are not the user's problem: they are
        swallowed and the compiled result is still used, uncached.
        """
        self._ensure_dir()
        path = self.path_for(key)
        head = json.dumps({"schema": SCHEMA, "key": key, "meta": dict(meta or {})}, sort_keys=True).encode()
        body = head + payload
        blob = _HEADER.pack(_MAGIC, len(head), len(payload)) + body + hashlib.sha256(body).digest()
        sub = os.path.dirname(path)
        try:
            os.makedirs(sub, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=_SUFFIX, dir=sub)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                self._discard(tmp)
                raise
        except OSError:
            return path
        self._evict(keep=path)
        return path

    @staticmethod
    def _discard(path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass

    # --- housekeeping -----------------------------------------------------------------

    def entries(self) -> list[tuple[str, int, float]]:
        """``(path, size, last use)`` of every entry."""
        out: list[tuple[str, int, float]] = []
        try:
            subs = os.listdir(self.directory)
        except OSError:
            return out
        for sub in subs:
            d = os.path.join(self.directory, sub)
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for n in names:
                if n.endswith(_SUFFIX) and not n.startswith(".tmp-"):
                    p = os.path.join(d, n)
                    try:
                        st = os.stat(p)
                    except OSError:
                        continue
                    out.append((p, st.st_size, st.st_mtime))
        return out

    def _evict(self, keep: str | None = None) -> None:
        with self._lock:
            items = self.entries()
            total = sum(s for _, s, _ in items)
            if total <= self.max_bytes:
                return
            for p, s, _ in sorted(items, key=lambda e: e[2]):
                if p == keep:
                    continue
                self._discard(p)
                total -= s
                if total <= self.max_bytes:
                    break

    def info(self) -> dict[str, Any]:
        items = self.entries()
        return {
            "directory": self.directory,
            "entries": len(items),
            "bytes": sum(s for _, s, _ in items),
            "max_bytes": self.max_bytes,
        }

    def clear(self) -> int:
        """Delete every entry; returns how many."""
        items = self.entries()
        for p, _, _ in items:
            self._discard(p)
        return len(items)


_default: dict[tuple[str, str | None], DiskCache] = {}


def default_cache() -> DiskCache:
    """The process's cache for the directory and limit currently configured."""
    k = (cache_dir(), os.environ.get(ENV_MAX))
    c = _default.get(k)
    if c is None:
        c = _default[k] = DiskCache(k[0])
    return c


#: Called as ``observer(key, hit)`` after every :func:`lookup` while set (the tracer counts
#: disk hits and misses of compiles this way); ``None`` costs nothing.
observer: Callable[[str, bool], None] | None = None


def lookup(key: str) -> tuple[DiskCache | None, CacheEntry | None]:
    """``(cache, entry)`` for ``key`` in the default cache, for callers that must work without one:
    ``(None, None)`` when the cache cannot be used at all, ``(cache, None)`` on a miss or an
    unreadable entry. Pair with :func:`store`."""
    cache, entry = _lookup(key)
    if observer is not None:
        observer(key, entry is not None)
    return cache, entry


def _lookup(key: str) -> tuple[DiskCache | None, CacheEntry | None]:
    try:
        cache = default_cache()
    except (CacheError, OSError):
        return None, None
    try:
        return cache, cache.get(key)
    except (CacheError, OSError):
        return cache, None


def store(cache: DiskCache | None, key: str, payload: bytes, meta: Mapping[str, Any] | None = None) -> None:
    """Put ``payload`` in ``cache`` (from :func:`lookup`); a cache that cannot take it is skipped:
    a full disk or a read-only directory costs the next process a rebuild, nothing more."""
    if cache is None:
        return
    try:
        cache.put(key, payload, meta)
    except (CacheError, OSError):
        pass
