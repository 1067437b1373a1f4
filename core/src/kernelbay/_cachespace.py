"""The room a disk cache takes: its entries listed, the running total of their size, eviction of
the least recently used past the limit, and ``kernelbay cache info``/``clear``.

A write does not scan the directory: a running total (``.size``: bytes and the time of the last
full scan) is read, increased by the entry's size and written back; the directory is scanned
only when the total passes the limit (then entries are evicted) or the last scan is older than
:data:`RESCAN_SECONDS` (which corrects what concurrent writers' races lost or double-counted).
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from typing import Any

from . import _privatedir
from ._cacheentry import LOCK, SIZE, SUFFIX
from ._privatedir import _O_NEW, _O_READ, PrivateDir, _is_sub
from ._privatedir import unlink_at as _unlink
from .errors import CacheError

log = logging.getLogger("kernelbay.cache")

__all__ = ["DEFAULT_MAX_BYTES", "ENV_MAX", "RESCAN_SECONDS", "CacheSpace"]

ENV_MAX = "KERNELBAY_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
#: A running total older than this is recomputed by a full scan at the next write.
RESCAN_SECONDS = 600.0


class CacheSpace(PrivateDir):
    """The size accounting and upkeep of :class:`kernelbay.cache.DiskCache`."""

    max_bytes: int
    _lock: threading.Lock

    def _walk(self, root: int) -> Iterator[tuple[str, str, os.stat_result]]:
        """``(subdirectory, name, lstat)`` of every entry file, links never followed."""
        for sub in sorted(os.listdir(root)):
            if not _is_sub(sub):
                continue
            try:
                fd = self._open_sub(root, sub, create=False)
            except (CacheError, OSError):
                continue
            if fd is None:
                continue
            try:
                for n in os.listdir(fd):
                    if n.endswith(SUFFIX) and not n.startswith(".tmp-"):
                        try:
                            st = os.stat(n, dir_fd=fd, follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISREG(st.st_mode):
                            yield sub, n, st
            finally:
                os.close(fd)

    def entries(self) -> list[tuple[str, int, float]]:
        """``(path, size, last use)`` of every entry."""
        with self._root(create=False) as root:
            if root is None:
                return []
            return [(os.path.join(self.directory, s, n), st.st_size, st.st_mtime) for s, n, st in self._walk(root)]

    def _read_total(self, root: int) -> tuple[int, float] | None:
        try:
            fd = os.open(SIZE, _O_READ, dir_fd=root)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                total, scanned = f.read(64).split()
            return int(total), float(scanned)
        except (OSError, ValueError):
            return None

    def _write_total(self, root: int, total: int, scanned: float) -> None:
        tmp = f".tmp-{secrets.token_hex(8)}.size"
        try:
            fd = os.open(tmp, _O_NEW, 0o600, dir_fd=root)
            with os.fdopen(fd, "wb") as f:
                f.write(f"{total} {scanned:.3f}\n".encode())
            os.replace(tmp, SIZE, src_dir_fd=root, dst_dir_fd=root)
        except OSError:
            _unlink(tmp, root)

    def _add_to_total(self, root: int, nbytes: int) -> int | None:
        """The running total after adding ``nbytes``; None when a full scan is due."""
        with self._lock:
            got = self._read_total(root)
            # The scan time is written to the millisecond, rounded: a store within half a
            # millisecond of the scan reads it as slightly in the future, which is no reason to
            # rescan; one more than a second ahead (a clock set back) is.
            if got is None or not -1.0 < time.time() - got[1] < RESCAN_SECONDS:
                return None
            total = got[0] + nbytes
            self._write_total(root, total, got[1])
            return total

    def _evict(self, keep: str | None = None) -> None:
        """Scan the directory: set the running total, and evict least recently used entries
        while it is over the limit."""
        with self._lock, self._root() as root:
            assert root is not None
            t0 = time.perf_counter()
            scanned = time.time()
            items = list(self._walk(root))
            total = sum(st.st_size for _, _, st in items)
            evicted = 0
            if total > self.max_bytes:
                for s, n, st in sorted(items, key=lambda e: e[2].st_mtime):
                    if os.path.join(self.directory, s, n) == keep:
                        continue
                    fd = self._open_sub(root, s, create=False)
                    if fd is not None:
                        _unlink(n, fd)
                        os.close(fd)
                    total -= st.st_size
                    evicted += 1
                    if total <= self.max_bytes:
                        break
            self._write_total(root, total, scanned)
            log.debug(
                "scanned %d entries (%d bytes after evicting %d) in %.1f ms",
                len(items),
                total,
                evicted,
                (time.perf_counter() - t0) * 1e3,
            )
            if evicted:
                log.info("evicted %d least recently used entries to stay under %d bytes", evicted, self.max_bytes)

    def info(self) -> dict[str, Any]:
        """What ``kernelbay cache info`` shows: where, whether usable (and why not), how much.

        Never raises for an unusable directory: ``usable`` is False and ``problem`` says why.
        """
        out: dict[str, Any] = {"directory": self.directory, "exists": os.path.isdir(self.directory)}
        try:
            items = self.entries()
        except (CacheError, OSError) as exc:
            out.update(usable=False, problem=str(exc))
            items = []
        else:
            out.update(usable=True, problem=None)
        out["owner_ok"] = None  # not there yet: it will be made 0700, yours
        if out["exists"]:
            st, uid = os.stat(self.directory), _privatedir._uid()
            out["owner_ok"] = uid is None or (st.st_uid == uid and not st.st_mode & 0o022)
        out["writable"] = os.access(self.directory if out["exists"] else _existing_parent(self.directory), os.W_OK)
        if out["usable"] and not out["writable"]:
            out.update(usable=False, problem=f"{self.directory!r} is not writable: compile results are not kept")
        out.update(entries=len(items), bytes=sum(s for _, s, _ in items), max_bytes=self.max_bytes)
        return out

    def clear(self) -> int:
        """Delete every entry (and stray links, temporary and lock files); returns how many entries.

        Links are removed, never followed.

        :raises CacheError: when something could not be deleted, saying how much and why.
        """
        removed = 0
        failed: list[str] = []
        with self._root(create=False) as root:
            if root is None:
                return 0
            for sub in os.listdir(root):
                if not _is_sub(sub):
                    continue
                try:
                    st = os.stat(sub, dir_fd=root, follow_symlinks=False)
                    if not stat.S_ISDIR(st.st_mode):  # a link or a file where a subdirectory belongs
                        os.unlink(sub, dir_fd=root)
                        continue
                    fd = self._open_sub(root, sub, create=False)
                except (CacheError, OSError) as exc:
                    failed.append(f"{sub}: {exc}")
                    continue
                if fd is None:
                    continue
                try:
                    for n in os.listdir(fd):
                        if not (n.endswith(SUFFIX) or n.endswith(LOCK)):
                            continue
                        try:
                            os.unlink(n, dir_fd=fd)
                        except FileNotFoundError:
                            continue
                        except OSError as exc:
                            failed.append(f"{sub}/{n}: {exc.strerror}")
                            continue
                        removed += n.endswith(SUFFIX) and not n.startswith(".tmp-")
                finally:
                    os.close(fd)
            _unlink(SIZE, root)  # the running total starts again from a scan
        if failed:
            raise CacheError(
                f"could not clear the kernelbay cache {self.directory!r}: {len(failed)} item(s) remain "
                f"({'; '.join(failed[:3])}{'...' if len(failed) > 3 else ''}); {removed} entries were deleted. "
                "Check the directory's permissions"
            )
        return removed


def _existing_parent(path: str) -> str:
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
