"""Optional native helpers for backends: a CPython extension built from C source at first use.

A backend whose hot path is a few driver calls can spend more time in Python than in the
driver. This module lets it ship C source (no compiled wheel, no toolkit) and get a module:

* the C compiler is ``$CC``, else the one Python was built with, else ``cc``, ``gcc``, ``clang``;
  the headers are the running interpreter's (``sysconfig``);
* the built extension is kept in the core disk cache, keyed by the source, the flags, the
  compiler binary's identity (path, size, mtime) and the interpreter's ABI, so a fresh process
  loads it without running the compiler (about a millisecond);
* anything missing (no compiler, no ``Python.h``, a free-threaded interpreter, whose lack of
  a GIL the helpers written for it do not expect) raises :class:`NativeUnavailable` with the
  reason: callers keep a pure-Python path and report the reason (``kernelbay info``).

``KERNELBAY_NATIVE=0`` turns every native helper off (the pure-Python paths run instead).
"""

from __future__ import annotations

import os
from types import ModuleType

from .concurrency import OnceMap
from .errors import KernelbayError

__all__ = ["NativeUnavailable", "load_extension", "disabled", "ENV_NATIVE"]

ENV_NATIVE = "KERNELBAY_NATIVE"
_CANDIDATES = ("cc", "gcc", "clang")


class NativeUnavailable(KernelbayError):
    """A native helper cannot be built or loaded here; the message says why."""


def disabled() -> bool:
    """Whether ``KERNELBAY_NATIVE=0`` (or ``false``/``no``/``off``) turned native helpers off."""
    return os.environ.get(ENV_NATIVE, "").strip().lower() in ("0", "false", "no", "off")


_loaded = OnceMap()  # name -> module


def load_extension(name: str, source: str, *, flags: tuple[str, ...] = ("-O2",)) -> ModuleType:
    """The extension module ``name`` (its C source defines ``PyInit_<name>``), built once.

    :raises NativeUnavailable: disabled, or no way to build or load it here (the reason, and
        for a compiler error its log, are in the message).
    """
    return _loaded.get_or_make(name, _load, name, source, tuple(flags))


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
    from .cache import lookup, make_key, store

    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = make_key(
        backend="native-extension",
        compiler=" ".join(argv),
        compiler_version=f"{os.path.realpath(argv[0])}:{st.st_size}:{st.st_mtime_ns}",
        arch=f"{sys.implementation.cache_tag}:{suffix}:{sys.version}",
        options=list(flags),
        source=source,
        entries=[name],
    )
    cache, hit = lookup(key)
    if hit is not None:
        try:
            return _import(name, hit.payload, suffix)
        except NativeUnavailable:
            pass  # a cached image that no longer loads: rebuild it
    image = _build(argv, name, source, flags, include, suffix)
    mod = _import(name, image, suffix)
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
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NativeUnavailable(f"running the C compiler failed ({' '.join(cmd)}): {exc}") from exc
        if r.returncode != 0:
            log = (r.stdout + r.stderr).strip()
            raise NativeUnavailable(f"building {name} failed ({' '.join(cmd)}):\n{log[-4000:]}")
        with open(out, "rb") as f:
            return f.read()


def _import(name: str, image: bytes, suffix: str) -> ModuleType:
    """Import an extension from its bytes: written to a private file, loaded, unlinked."""
    import importlib.machinery
    import importlib.util
    import tempfile

    fd, path = tempfile.mkstemp(prefix=f"kernelbay-{name}-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(image)
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        if spec is None:
            raise NativeUnavailable(f"cannot make an import spec for {name}")
        try:
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        except ImportError as exc:
            raise NativeUnavailable(f"the built {name} does not load: {exc}") from exc
        return mod
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
