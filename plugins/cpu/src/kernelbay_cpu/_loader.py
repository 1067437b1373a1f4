"""Loading a compiled object into the process: written to a private file (the cache's load
directory, not TMPDIR, which may be noexec), ``dlopen``ed, unlinked; and keeping the OpenMP
runtime a kernel module brings in loaded for good (its worker threads stay parked inside it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator

from kernelbay.errors import CompileError
from kernelbay.native import private_file

from . import _threads


def load_library(image: bytes, kernel: bool = True) -> ctypes.CDLL:
    """dlopen a shared object from its bytes: written to a private file in the cache directory
    (:func:`kernelbay.native.load_dir`, not TMPDIR, which may be noexec), loaded, unlinked.

    ``kernel``: a kernel module, which may bring in an OpenMP runtime (then set up and pinned,
    see :func:`_pin_openmp`); False for the backend's own objects built without OpenMP (the
    runtime library, the graph runner)."""
    # OpenMP's runtime reads its wait policy from the environment once, when the first module
    # loads it: set it for that load only (no child process inherits it), unless the user did.
    # Where another library of the process loaded it already, the setting reaches nothing.
    env = _threads.openmp_env() if kernel and not _pinned else {}
    try:
        with _load_lock, _scoped_env(env), private_file(image, "kernelbay-cpu-", ".so") as path:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_LOCAL", 0) | getattr(os, "RTLD_NOW", 2))
            if kernel:
                _pin_openmp(lib)
    except OSError as exc:  # private_file names the cause (disk full, permission); dlopen its own
        raise CompileError(f"the compiled kernel module could not be loaded: {exc}") from exc
    return lib


_load_lock = threading.Lock()


@contextlib.contextmanager
def _scoped_env(env: dict[str, str]) -> Iterator[None]:
    if not env:
        yield
        return
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: OpenMP runtimes a kernel module brings in (GCC's, LLVM's, Intel's). Their worker threads stay
#: parked inside the library after a launch: unloaded with the last kernel module (Kernel.close,
#: the module cache's bound), it would leave those threads in unmapped code, and the process
#: would crash. Each is pinned (never unloaded) once a module has loaded it.
_THREAD_LIBRARIES = ("libgomp.so.1", "libomp.so.5", "libomp.so", "libiomp5.so")
#: what is pinned: a library name, or ``"kb_pin_openmp"`` where modules pinned their own
_pinned: dict[str, ctypes.CDLL | None] = {}


def _pin_openmp(lib: ctypes.CDLL) -> None:
    """Pin the OpenMP runtime ``lib`` uses: the module does it itself (``kb_pin_openmp``, which
    finds the runtime by a function's address); where it cannot, each of :data:`_THREAD_LIBRARIES`
    already loaded is pinned by name (``RTLD_NOLOAD``: each name not loaded costs a search of the
    library path, ~0.1 ms)."""
    try:
        pinned = lib.kb_pin_openmp()
    except AttributeError:
        pinned = -1
    if pinned == 1:
        _pinned["kb_pin_openmp"] = None
    elif pinned < 0:
        _pin_thread_libraries()


def _pin_thread_libraries() -> None:
    mode = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_NODELETE", 0x1000) | getattr(os, "RTLD_NOW", 2)
    for name in _THREAD_LIBRARIES:
        if name not in _pinned:
            try:
                _pinned[name] = ctypes.CDLL(name, mode=mode)  # only if already loaded (RTLD_NOLOAD)
            except OSError:
                pass  # not loaded by any module yet
