"""The process-wide native runtime (``include/kb_cpu_rt.cpp``): Ctrl-C cancellation, fatal-signal
reports naming the kernel, launches in a ``fork()``ed child, and the pool of threads that runs a
launch's blocks (Linux; OpenMP elsewhere).

It is a small shared object built once with the kernels' compiler (kept in the disk cache like
a kernel) and loaded before the first kernel module; each module then gets its interface through
``kb_set_runtime``. When it cannot be built, kernels run as before: no cancellation, no report.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

from kernelbay.cache import lookup, make_key, store

from . import _driver, _headers, _loader, _threads, buildmemo

log = logging.getLogger("kernelbay.cpu")

#: "0" turns the runtime off (no Ctrl-C cancellation, fault report or fork care): for comparisons.
ENV_RUNTIME = "KERNELBAY_CPU_RUNTIME"
SOURCE = "kb_cpu_rt.cpp"
HEADER = "kb_cpu_rt.h"
_FLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread"]
_LIBS = ["-ldl"]  # dlsym/dladdr (in libc itself from glibc 2.34)
#: KERNELBAY_CPU_WAIT=spin: how many times a pool worker polls for the next launch before it
#: sleeps (a pause instruction each: some milliseconds, about what OpenMP's threads spin).
SPIN_POLLS = 100_000

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_api: int | None = None
_failed = False


def _texts() -> dict[str, str]:
    return _headers.texts((SOURCE, HEADER))


def _key(tc: _driver.Toolchain, argv: tuple[str, ...], backend: str, source: str, extra: dict[str, str]) -> str:
    return make_key(
        backend=backend,
        compiler=" ".join(argv),
        compiler_version=tc.version,
        arch=os.uname().machine,
        options=[*_FLAGS, *_LIBS],
        source=source,
        extra=extra,
    )


def _build(tc: _driver.Toolchain) -> bytes:
    argv = _driver.plain_argv(tc)
    # First under the stamp of the package's files (which holds the runtime's sources): a fresh
    # process finds it without reading and hashing 37 kB of source (~0.25 ms); the stamp is
    # computed for the kernel's build memo anyway. Then under the sources' text: an edit
    # elsewhere in the package changes the stamp, not the runtime, and costs no rebuild.
    stamped = _key(tc, argv, "cpu-runtime-stamped", "", {"package": buildmemo.package_stamp()})
    cache, hit = lookup(stamped)
    if hit is not None:
        return hit.payload
    texts = _texts()
    key = _key(tc, argv, "cpu-runtime", texts[SOURCE], {"header": texts[HEADER]})
    cache, hit = lookup(key)
    image = hit.payload if hit is not None else _compile(argv, texts)
    if hit is None:
        store(cache, key, image, {"kind": "cpu-runtime"})
    store(cache, stamped, image, {"kind": "cpu-runtime"})
    return image


def _compile(argv: tuple[str, ...], texts: dict[str, str]) -> bytes:
    import subprocess  # only where a compiler runs: importing the plugin stays light
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelbay-cpu-rt-") as d:
        for n, t in texts.items():
            with open(os.path.join(d, n), "w", encoding="utf-8") as f:
                f.write(t)
        out = os.path.join(d, "kb_cpu_rt.so")
        r = subprocess.run(
            [*argv, *_FLAGS, SOURCE, *_LIBS, "-o", out], cwd=d, capture_output=True, text=True, timeout=300
        )
        if r.returncode != 0:
            raise OSError(f"building the cpu runtime failed: {(r.stdout + r.stderr).strip()[:800]}")
        with open(out, "rb") as f:
            return f.read()


def image() -> bytes:
    """The runtime's shared object (for the isolated mode's worker)."""
    return _build(_driver.toolchain())


def api() -> int | None:
    """The address of the runtime's interface for ``kb_set_runtime``, loading it on first use
    (None where it could not be built: kernels then run without it)."""
    global _lib, _api, _failed
    if _api is not None or _failed:
        return _api
    with _lock:
        if os.environ.get(ENV_RUNTIME, "").strip().lower() in ("0", "off", "no", "false"):
            _failed = True  # asked for: kernels run as without the runtime
            return None
        if _api is None and not _failed:
            try:
                lib = _loader.load_library(_build(_driver.toolchain()), kernel=False)
                lib.kb_rt_api.restype = ctypes.c_void_p
                lib.kb_rt_install_fatal()
                lib.kb_rt_install_fork()
                lib.kb_rt_set_spin(ctypes.c_long(SPIN_POLLS if _threads.wait_policy() == "spin" else 0))
                _lib, _api = lib, lib.kb_rt_api()
            except Exception as exc:  # the backend works without it: say why, once
                _failed = True
                log.warning("kernelbay: the cpu runtime (Ctrl-C, fault reports, fork) is off: %s", exc)
        install_interrupt()
    return _api


def install_interrupt() -> None:
    """Put the Ctrl-C handler in front of the current SIGINT handler, unless it already is, or
    SIGINT is ignored or has its default action. Called at each compile: a handler that the
    program installs later (``signal.signal``) replaces it until the next compile. A handler
    another library installs in front of it later is left in front (it may chain to ours;
    going in front of it again would make the two call each other)."""
    if _lib is not None:
        _lib.kb_rt_install_interrupt()


def attach(lib: ctypes.CDLL) -> None:
    """Give a freshly loaded kernel module the runtime."""
    a = api()
    if a is not None:
        lib.kb_set_runtime(ctypes.c_void_p(a))
