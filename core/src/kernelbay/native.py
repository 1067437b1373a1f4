"""Optional native helpers for backends: C extensions, prebuilt in the wheel or built at first use.

A backend whose hot path is a few driver calls can spend more time in Python than in the
driver, so it ships C helpers. A platform wheel carries them compiled (built by the wheel's
build backend, as CuPy and numba do); this module is the fallback for installs that have none
(an sdist built without a compiler, a pure wheel, a Python the wheel was not built for):

* the C compiler is ``$CC``, else the one Python was built with, else ``cc``, ``gcc``, ``clang``;
  the headers are the running interpreter's (``sysconfig``);
* the built extension is kept in the core disk cache, keyed by the source, the flags, the
  compiler binary's identity (path, size, mtime) and the interpreter's ABI, so a fresh process
  loads it without running the compiler (about a millisecond);
* a failed build is remembered under the same key (a marker entry), so later processes do not
  retry it; a new compiler or source is a new key, and ``kernelbay cache clear`` forgets it;
* a file lock around the build: N cold processes run one build, the others wait and load it;
* shared objects are loaded from :func:`load_dir`, a private 0700 directory in the cache
  directory, never from ``TMPDIR`` (which may be mounted ``noexec``); where that directory
  cannot be written (read-only, disk full, deleted or replaced), the rest of the process uses
  a private 0700 directory of its own under the system temporary directory, with one warning
  saying why (:func:`in_load_dir`);
* anything missing (no compiler, no ``Python.h``, a free-threaded interpreter, whose lack of
  a GIL the helpers written for it do not expect) raises :class:`NativeUnavailable` with the
  reason: callers keep a pure-Python path and report it (:func:`report`, ``kernelbay info``,
  and the ``kernelbay.native`` logger).

``KERNELBAY_NATIVE=0`` turns every native helper off (the pure-Python paths run instead).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TypeVar

from . import _log
from .concurrency import OnceMap
from .errors import CacheError, KernelbayError

__all__ = [
    "NativeUnavailable",
    "load_extension",
    "disabled",
    "ENV_NATIVE",
    "load_dir",
    "in_load_dir",
    "fall_back",
    "private_file",
    "register_status",
    "statuses",
]

ENV_NATIVE = "KERNELBAY_NATIVE"
_CANDIDATES = ("cc", "gcc", "clang")
_LOAD_SUBDIR = "native-load"
log = logging.getLogger("kernelbay.native")


class NativeUnavailable(KernelbayError):
    """A native helper cannot be built or loaded here; the message says why."""


def disabled() -> bool:
    """Whether ``KERNELBAY_NATIVE=0`` (or ``false``/``no``/``off``) turned native helpers off."""
    return os.environ.get(ENV_NATIVE, "").strip().lower() in ("0", "false", "no", "off")


_loaded = OnceMap()  # name -> module
_status_fns: dict[str, Callable[[], str]] = {}


def register_status(backend: str, fn: Callable[[], str]) -> None:
    """Let ``kernelbay info`` ask ``backend`` for its native helpers' state: ``fn()`` returns
    ``"native"``, ``"native (...)"`` or ``"python (<reason>)"``; it may build or load them."""
    _status_fns[backend] = fn


def statuses() -> dict[str, str]:
    """``{backend: state}`` for every backend that registered (see :func:`register_status`)."""
    out = {}
    for name, fn in sorted(_status_fns.items()):
        try:
            out[name] = fn()
        except Exception as exc:  # a report must not fail: say what happened
            out[name] = f"unknown ({type(exc).__name__}: {exc})"
    return out


def load_extension(name: str, source: str, *, flags: tuple[str, ...] = ("-O2",)) -> ModuleType:
    """The extension module ``name`` (its C source defines ``PyInit_<name>``), built once.

    :raises NativeUnavailable: disabled, or no way to build or load it here (the reason, and
        for a compiler error its log, are in the message).
    """
    try:
        return _loaded.get_or_make(name, _load, name, source, tuple(flags))
    except NativeUnavailable as exc:
        if not disabled():  # KERNELBAY_NATIVE=0 asked for the pure-Python paths: nothing to say
            _log.slow_path(
                "native",
                f"kernelbay: native helper {name} unavailable, so a slower pure-Python path runs: "
                f"{str(exc).splitlines()[0]} (`kernelbay info` shows every backend's helpers; "
                f"{ENV_NATIVE}=0 chooses the pure-Python paths without this warning)",
                log,
            )
        raise


_load_dir: dict[str, str] = {}  # cache directory -> the directory to load from
_fallback: str | None = None  # the process's own directory, once the cache's could not be used
_fallback_lock = threading.Lock()
_T = TypeVar("_T")


def load_dir() -> str:
    """A private directory to load shared objects from: ``<cache>/native-load`` (0700, yours),
    or, once that could not be used, this process's own (see :func:`fall_back`)."""
    from .cache import cache_dir, default_cache  # at first use, as in _load: importing native stays cheap

    if _fallback is not None:
        return _fallback
    where = cache_dir()
    d = _load_dir.get(where)
    if d is None:
        try:
            d = _load_dir[where] = default_cache().subdir(_LOAD_SUBDIR)
        except (CacheError, OSError) as exc:
            return fall_back(exc)
    return d


def cause(exc: BaseException) -> str:
    """What went wrong with a directory, in words a user acts on (disk full, permission...)."""
    n = getattr(exc, "errno", None)
    if n == errno.ENOSPC:
        return "the disk is full (No space left on device)"
    if n == getattr(errno, "EDQUOT", -1):
        return "the disk quota is exceeded"
    if n == errno.EROFS:
        return "the file system is read-only"
    if n in (errno.EACCES, errno.EPERM):
        return "permission denied (a read-only directory?)"
    if n == errno.ENOENT:
        return "the directory was deleted"
    return str(exc)


def fall_back(exc: BaseException) -> str:
    """Stop using the cache's load directory for the rest of the process: make a private
    directory of the process's own (under the system temporary directory, 0700, removed at
    exit), say why once (``warnings.warn`` and the ``kernelbay.native`` logger), return it.

    :raises OSError: where that directory cannot be made either (the cause named).
    """
    global _fallback
    import atexit
    import shutil
    import tempfile

    with _fallback_lock:
        if _fallback is None:
            try:
                d = tempfile.mkdtemp(prefix=f"kernelbay-{os.getpid()}-")  # 0700, this user's
            except OSError as exc2:
                raise OSError(
                    exc2.errno,
                    f"the cache directory cannot be used ({cause(exc)}) and neither can the temporary directory "
                    f"{tempfile.gettempdir()} ({cause(exc2)}); free space or set KERNELBAY_CACHE_DIR or TMPDIR",
                ) from exc2
            atexit.register(shutil.rmtree, d, True)
            where = getattr(exc, "filename", None)
            msg = (
                f"kernelbay: the cache directory cannot be used to load compiled code ({cause(exc)}"
                f"{f': {where}' if where else ''}); "
                f"this process loads it from its own private directory {d} instead, and compiles what it "
                "cannot read from the cache"
            )
            if isinstance(exc, CacheError) and _log.warned("cache"):
                log.warning("%s", msg)  # the same cause was the process's one warning already
            else:
                _log.slow_path(None, msg, log, stacklevel=4)  # once: _fallback is set below
            _fallback = d
        return _fallback


def in_load_dir(fn: Callable[[str], _T]) -> _T:
    """``fn(load_dir())``; where that raises ``OSError`` in the cache's directory (read-only, disk
    full, deleted), ``fn`` once more in the process's own directory (:func:`fall_back`).

    :raises OSError: where the second try fails too, naming the cause.
    """
    d = load_dir()
    try:
        return fn(d)
    except OSError as exc:
        if d == _fallback:
            raise OSError(exc.errno, f"cannot write to {d}: {cause(exc)}") from exc
        d = fall_back(exc)
    try:
        return fn(d)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write to {d}: {cause(exc)}") from exc


#: a new file of this process's own (what ``tempfile.mkstemp`` opens, 0600 below): never an
#: existing one, never through a link
_O_PRIVATE = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def _write_private(image: bytes, prefix: str, suffix: str, d: str) -> str:
    # os.open and a random name, not tempfile.mkstemp: its first call in a process (seeding its
    # name generator) costs ~0.2 ms of a fresh process's disk-cache hit, which loads two objects.
    for _ in range(100):
        path = os.path.join(d, f"{prefix}{os.urandom(8).hex()}{suffix}")
        try:
            fd = os.open(path, _O_PRIVATE, 0o600)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 64 random bits
        raise FileExistsError(errno.EEXIST, f"no new file name in {d}")
    try:
        view = memoryview(image)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)
    return path


@contextlib.contextmanager
def private_file(image: bytes, prefix: str, suffix: str) -> Iterator[str]:
    """``image`` written to a new private file in :func:`load_dir` (the path), unlinked after.

    :raises OSError: where neither the cache's directory nor the fallback takes it (the cause named).
    """
    path = in_load_dir(functools.partial(_write_private, image, prefix, suffix))
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _compiler() -> list[str]:
    import shlex
    import shutil
    import sysconfig

    env = os.environ.get("CC", "").strip()
    tried = []
    if env:
        argv = shlex.split(env)
        if shutil.which(argv[0]):
            return [shutil.which(argv[0]) or argv[0], *argv[1:]]
        tried.append(f"CC={env!r}")
    built_with = (sysconfig.get_config_var("CC") or "").split()
    for exe in ([built_with[0]] if built_with else []) + list(_CANDIDATES):
        path = shutil.which(exe)
        if path:
            return [path]
        tried.append(exe)
    raise NativeUnavailable(f"no C compiler found (tried {', '.join(tried)}); install gcc or set CC")


def _load(name: str, source: str, flags: tuple[str, ...]) -> ModuleType:
    import sys
    import sysconfig

    if disabled():
        raise NativeUnavailable(f"turned off by {ENV_NATIVE}={os.environ[ENV_NATIVE]!r}")
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        raise NativeUnavailable("this is a free-threaded Python build; the native helpers rely on the GIL")
    include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(include, "Python.h")):
        raise NativeUnavailable(f"Python's C headers are missing ({include}/Python.h): install python3-dev")
    argv = _compiler()
    st = os.stat(argv[0])
    from .cache import locked, lookup, make_key, recheck, store

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key_of = functools.partial(
        make_key,
        backend="native-extension",
        compiler=" ".join(argv),
        compiler_version=f"{os.path.realpath(argv[0])}:{st.st_size}:{st.st_mtime_ns}",
        arch=f"{sys.implementation.cache_tag}:{suffix}:{sys.version}",
        options=list(flags),
        source=source,
        entries=[name],
    )
    key = key_of()
    failed_key = key_of(extra={"outcome": "build-failed"})
    cache, hit = lookup(key)
    if hit is not None:
        mod = _try_import(name, hit.payload, suffix)
        if mod is not None:
            log.debug("%s: loaded from the cache (%s)", name, hit.path)
            return mod
    with locked(cache, key):  # N cold processes: one builds, the others wait and load its result
        hit = recheck(cache, key)
        if hit is not None and (mod := _try_import(name, hit.payload, suffix)) is not None:
            log.debug("%s: loaded from the cache after waiting for another process's build", name)
            return mod
        failed = recheck(cache, failed_key)
        if failed is not None:
            why = failed.payload.decode(errors="replace")
            raise NativeUnavailable(
                f"building {name} failed earlier with this compiler and source; not retried "
                f"(`kernelbay cache clear` retries). It said: {why}"
            )
        t0 = time.perf_counter()
        try:
            image = _build(argv, name, source, flags, include, suffix)
            mod = _import(name, image, suffix)
        except NativeUnavailable as exc:
            store(cache, failed_key, str(exc).encode(), {"kind": "native-extension-failure", "name": name})
            log.warning("%s: %s (remembered; the pure-Python path runs)", name, str(exc).splitlines()[0])
            raise
        log.info("%s: built in %.0f ms with %s", name, (time.perf_counter() - t0) * 1e3, argv[0])
        store(cache, key, image, {"kind": "native-extension", "name": name})
        return mod


def _build(argv: list[str], name: str, source: str, flags: tuple[str, ...], include: str, suffix: str) -> bytes:
    import subprocess
    import sysconfig
    import tempfile

    plat = sysconfig.get_paths().get("platinclude") or include
    with tempfile.TemporaryDirectory(prefix="kernelbay-native-") as d:
        src = os.path.join(d, f"{name}.c")
        out = os.path.join(d, name + suffix)
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        incs = ["-I", include] + (["-I", plat] if plat != include else [])
        cmd = [*argv, *flags, "-shared", "-fPIC", *incs, src, "-o", out]
        log.debug("%s: running %s", name, " ".join(cmd))
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NativeUnavailable(f"running the C compiler failed ({' '.join(cmd)}): {exc}") from exc
        if r.returncode != 0:
            out_log = (r.stdout + r.stderr).strip()
            raise NativeUnavailable(f"building {name} failed ({' '.join(cmd)}):\n{out_log[-4000:]}")
        with open(out, "rb") as f:
            return f.read()


def _try_import(name: str, image: bytes, suffix: str) -> ModuleType | None:
    try:
        return _import(name, image, suffix)
    except NativeUnavailable as exc:
        log.info("%s: the cached build does not load (%s); building again", name, exc)
        return None


def _import(name: str, image: bytes, suffix: str) -> ModuleType:
    """Import an extension from its bytes: written to a private file in :func:`load_dir`, loaded, unlinked."""
    import importlib.machinery
    import importlib.util

    try:
        with private_file(image, f"kernelbay-{name}-", suffix) as path:
            loader = importlib.machinery.ExtensionFileLoader(name, path)
            spec = importlib.util.spec_from_file_location(name, path, loader=loader)
            if spec is None:
                raise NativeUnavailable(f"cannot make an import spec for {name}")
            try:
                mod = importlib.util.module_from_spec(spec)
                loader.exec_module(mod)
            except ImportError as exc:
                raise NativeUnavailable(f"the built {name} does not load from {os.path.dirname(path)}: {exc}") from exc
            return mod
    except OSError as exc:
        raise NativeUnavailable(f"cannot write {name} to a directory to load it from: {exc}") from exc
