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
  directory, never from ``TMPDIR`` (which may be mounted ``noexec``);
* anything missing (no compiler, no ``Python.h``, a free-threaded interpreter, whose lack of
  a GIL the helpers written for it do not expect) raises :class:`NativeUnavailable` with the
  reason: callers keep a pure-Python path and report it (:func:`report`, ``kernelbay info``,
  and the ``kernelbay.native`` logger).

``KERNELBAY_NATIVE=0`` turns every native helper off (the pure-Python paths run instead).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from types import ModuleType

from .concurrency import OnceMap
from .errors import CacheError, KernelbayError

__all__ = [
    "NativeUnavailable",
    "load_extension",
    "disabled",
    "ENV_NATIVE",
    "load_dir",
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
    return _loaded.get_or_make(name, _load, name, source, tuple(flags))


_load_dir: dict[str, str] = {}  # cache directory -> the directory to load from


def load_dir() -> str:
    """A private directory to load shared objects from: ``<cache>/native-load`` (0700, yours).

    Falls back to the temporary directory, with a warning on ``kernelbay.native``, only where
    the cache directory cannot be used.
    """
    import tempfile

    from .cache import cache_dir, default_cache

    where = cache_dir()
    if where in _load_dir:
        return _load_dir[where]
    try:
        d = default_cache().subdir(_LOAD_SUBDIR)
    except (CacheError, OSError) as exc:
        d = tempfile.gettempdir()
        log.warning("loading compiled code from %s: the cache directory cannot be used (%s)", d, exc)
    _load_dir[where] = d
    return d


@contextlib.contextmanager
def private_file(image: bytes, prefix: str, suffix: str) -> Iterator[str]:
    """``image`` written to a new private file in :func:`load_dir` (the path), unlinked after."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=load_dir())
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(image)
        yield path
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


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
                raise NativeUnavailable(f"the built {name} does not load from {load_dir()}: {exc}") from exc
            return mod
    except OSError as exc:
        raise NativeUnavailable(f"cannot write {name} to {load_dir()} to load it: {exc}") from exc
