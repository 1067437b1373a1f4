"""The cpu backend's compile hooks: a process cache of loaded kernel modules over :mod:`.build`.

Roles, one module each: :mod:`.analysis` (what a source uses, text rewrites), :mod:`.flags`
(g++ flags), :mod:`.build` (translation unit, launcher, disk cache), :mod:`.cxx` (running the
compiler), :mod:`.deps` (files a build read), and this module (loaded modules, unloading).
"""

from __future__ import annotations

import collections
import ctypes
import gc
import threading
import weakref
from typing import TYPE_CHECKING, Any

from kernelbay.types import Device, Kernel, Source

from . import _driver, _runtime
from .build import build
from .deps import stamp
from .launcher import KernelHandle

if TYPE_CHECKING:
    from ._worker_client import RemoteModule


def _dlclose(handle: int) -> None:
    try:
        from _ctypes import dlclose

        dlclose(handle)
    except (ImportError, OSError):  # pragma: no cover - not POSIX, or already gone
        pass


class Module:
    """A loaded shared object and its kernels by entry name.

    The shared object is unloaded (``dlclose``) when the last reference to it goes: the module
    cache's and every kernel's (each :class:`KernelHandle` holds the library).
    """

    def __init__(
        self,
        lib: ctypes.CDLL,
        names: list[str],
        source: Source,
        deps: dict[str, str] | None = None,
        remote: RemoteModule | None = None,
        runners: dict[str, str] | None = None,
        notes: dict[str, str] | None = None,
    ) -> None:
        self.lib = lib
        #: (mtime, size) of each file outside the source the compiler read: a changed one rebuilds.
        self.stamps = {p: stamp(p) for p in deps or ()}
        lib.kb_error_message.restype = ctypes.c_char_p
        lib.kb_fault_address.restype = ctypes.c_void_p
        _runtime.attach(lib)
        lib.kb_set_threads(_driver.threads())
        lib.kb_set_timeout(ctypes.c_long(_driver.timeout_ms()))
        runners = runners or {}
        if source.lang == "cuda":
            lib.kb_set_fiber_stack(ctypes.c_longlong(_driver.fiber_stack()))
        self.kernels = {
            n: KernelHandle(lib, i, n, source.lang, runners.get(n) == "run_fibers") for i, n in enumerate(names)
        }
        for n, h in self.kernels.items():  # how it runs, for `kernelbay profile` (hookspecs: kernelbay_compile)
            h.profile_note = (notes or {}).get(n)
        # Not at interpreter exit: OpenMP's threads and C++ thread-exit handlers may still reach
        # the module's code then, and the process is ending anyway.
        weakref.finalize(lib, _dlclose, lib._handle).atexit = False
        if remote is not None:  # isolated mode: the worker runs the launches
            for i, h in enumerate(self.kernels.values()):
                h.fn = remote.launch_function(i, h.name, h.kinds, h.sizes)


#: Modules kept loaded for ``kb.compile`` calls that repeat a source. Past this many, the least
#: recently compiled is dropped from the cache (and unloaded once no kernel of it is left), so a
#: process may compile without limit (an autotuner) without running out of memory mappings.
MAX_MODULES = 256
_COLLECT_EVERY = 32


class _ModuleCache:
    """A bounded LRU map (source, device index) -> Module; each module is built once."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._mods: collections.OrderedDict[object, Module] = collections.OrderedDict()
        self._dropped = 0

    def _note_dropped(self, n: int) -> None:
        # A ctypes library is in a reference cycle with the functions it caches, so only the
        # cyclic collector frees it (and dlcloses it): collect every so many drops, which bounds
        # the modules waiting to be unloaded without paying a collection per kernel.
        self._dropped += n
        if self._dropped >= _COLLECT_EVERY:
            self._dropped = 0
            gc.collect()

    def get_or_make(self, key: object, source: Source) -> Module:
        with self._lock:
            mod = self._mods.get(key)
            if mod is not None and mod.stamps and any(stamp(p) != st for p, st in mod.stamps.items()):
                mod = None  # a header it was built from changed
            if mod is None:
                b = build(source)
                mod = self._mods[key] = Module(b.lib, b.names, source, b.deps, b.remote, b.runners, b.notes)
                dropped = 0
                while len(self._mods) > self.bound:
                    self._mods.popitem(last=False)
                    dropped += 1
                if dropped:
                    self._note_dropped(dropped)
            else:
                self._mods.move_to_end(key)
            return mod

    def drop_lib(self, lib: object) -> None:
        with self._lock:
            keys = [k for k, m in self._mods.items() if m.lib is lib]
            for k in keys:
                del self._mods[k]
        self._note_dropped(max(len(keys), 1))

    def __len__(self) -> int:
        return len(self._mods)


_modules = _ModuleCache(MAX_MODULES)


def compile_source(device: Device, source: Source) -> KernelHandle:
    """The compiled kernel for ``source`` (from the process cache, the disk cache, or the compiler)."""
    mod = _modules.get_or_make((source, device.index), source)
    _runtime.install_interrupt()
    name = source.name.strip() if source.name else next(iter(mod.kernels))
    return mod.kernels[name]


def close_kernel(kernel: Kernel) -> None:
    """Drop the process cache's reference to the module of ``kernel`` (its handle): once no
    kernel of it is left, the shared object is unloaded."""
    _modules.drop_lib(kernel.handle.lib)


def module_global(kernel: Kernel, name: str, host: Any, write: bool) -> int | None:
    """The ``kernelbay_module_global`` hook: a ``__constant__``/``__device__`` variable at file
    scope of the kernel's source, through the accessor the build generated for it
    (``kb_global_<name>``), after the device's queued work. None when there is no such variable."""
    from kernelbay.errors import InvalidArgumentError, UnsupportedError

    from . import streams

    h = kernel.handle
    if _driver.isolated():
        raise UnsupportedError(
            "module globals on cpu with KERNELBAY_CPU_ISOLATE=1 (or checked mode): the kernels run in a worker "
            "process whose variables the host cannot reach; unset it to read or write them"
        )
    if not name.isidentifier():
        return None
    try:
        fn = getattr(h.lib, f"kb_global_{name}")
    except AttributeError:
        return None
    fn.restype = ctypes.c_void_p
    size = ctypes.c_longlong()
    addr = fn(ctypes.byref(size))
    if host is None:
        return size.value
    if host.nbytes > size.value:
        raise InvalidArgumentError(
            f"module global {name!r} on {kernel.device} has {size.value} bytes; {'writing' if write else 'reading'} "
            f"{host.nbytes} bytes ({host.dtype}{list(host.shape)}) overruns it: give a smaller value or shape"
        )
    streams.synchronize(kernel.device, None)  # after the work queued on the device
    if write:
        ctypes.memmove(addr, host.ctypes.data, host.nbytes)
    else:
        ctypes.memmove(host.ctypes.data, addr, host.nbytes)
    return size.value
