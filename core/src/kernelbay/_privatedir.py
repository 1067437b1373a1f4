"""A directory only its owner can change, used through descriptors (the disk cache's footing).

Every use opens the directory (and a subdirectory) with ``O_NOFOLLOW`` and checks the opened
descriptor with ``fstat``: a directory kernelbay creates is made 0700 from the start; one the
user named is never ``chmod``-ed, and is refused when another user owns it or group/others can
write it. Callers then work relative to the descriptors (``dir_fd``), so nothing swapped in
under the path afterwards (a link, a directory re-created by someone else) is ever followed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from .errors import CacheError

ENV_DIR = "KERNELBAY_CACHE_DIR"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_O_READ = os.O_RDONLY | _NOFOLLOW | _CLOEXEC
_O_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _is_sub(name: str) -> bool:
    return len(name) == 2 and all(c in "0123456789abcdef" for c in name)


def unlink_at(name: str, dir_fd: int) -> None:
    """Remove ``name`` (a link itself, never its target); a failure is ignored."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


class PrivateDir:
    """The checks and descriptor-relative opening of a private directory and its subdirectories."""

    directory: str

    # --- directories: opened without following links, checked on the descriptor -----------

    def _refuse(self, what: str) -> CacheError:
        return CacheError(f"kernelbay cache directory {self.directory!r}: {what}")

    def _check_dir(self, fd: int, path: str) -> None:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            raise self._refuse(f"{path!r} is not a directory; set {ENV_DIR} elsewhere")
        uid = _uid()
        if uid is not None and st.st_uid != uid:
            raise self._refuse(
                f"{path!r} belongs to uid {st.st_uid}, not to you (uid {uid}); refusing to load code from it. "
                f"Set {ENV_DIR} to a directory of your own"
            )
        if uid is not None and st.st_mode & 0o022:
            who = "group and others" if st.st_mode & 0o022 == 0o022 else ("group" if st.st_mode & 0o020 else "others")
            raise self._refuse(
                f"{path!r} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o}); kernelbay does not load code "
                f"from a directory others can change, and does not change the mode of a directory you chose. "
                f"Run `chmod go-w {path}` or set {ENV_DIR} to a private directory (kernelbay creates its own 0700)"
            )

    def _open_root(self, create: bool) -> int | None:
        d = self.directory
        for attempt in (0, 1):
            try:
                fd = os.open(d, _O_DIR)
            except FileNotFoundError:
                if not create or attempt:
                    return None
                try:
                    os.makedirs(os.path.dirname(d), exist_ok=True)
                    os.mkdir(d, 0o700)  # 0700 from the start; the umask can only take bits away
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise self._refuse(
                        f"cannot create it: {exc.strerror}; set {ENV_DIR} to a writable directory"
                    ) from exc
                continue
            except OSError as exc:
                if os.path.islink(d):
                    raise self._refuse(
                        f"it was replaced by a symbolic link (to {os.readlink(d)!r}) after this process resolved "
                        f"it; kernelbay does not follow it. Remove the link or set {ENV_DIR}"
                    ) from exc
                if isinstance(exc, NotADirectoryError):
                    raise self._refuse(f"it is not a directory; set {ENV_DIR} elsewhere") from exc
                raise self._refuse(f"cannot open it: {exc.strerror}; set {ENV_DIR} to a directory of your own") from exc
            try:
                self._check_dir(fd, d)
            except BaseException:
                os.close(fd)
                raise
            return fd
        return None

    @contextlib.contextmanager
    def _root(self, create: bool = True) -> Iterator[int | None]:
        fd = self._open_root(create)
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def _open_sub(self, root: int, name: str, create: bool) -> int | None:
        try:
            fd = os.open(name, _O_DIR, dir_fd=root)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.mkdir(name, 0o700, dir_fd=root)
            except FileExistsError:
                pass
            fd = os.open(name, _O_DIR, dir_fd=root)
        except OSError as exc:
            raise self._refuse(
                f"its subdirectory {name!r} is a symbolic link or not a directory; kernelbay does not write "
                "through links. Run `kernelbay cache clear` to remove it"
            ) from exc
        try:
            self._check_dir(fd, os.path.join(self.directory, name))
        except BaseException:
            os.close(fd)
            raise
        return fd
