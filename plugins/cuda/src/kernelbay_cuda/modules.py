"""Loaded modules: loading, sharing between kernels, the bounded in-process cache, release.

* ``kb.compile`` of a source this process compiled already returns the kernel it made then
  (the cache, keyed by device and ``Source``); kernels whose images are byte-identical share
  one loaded module.
* Each module counts the kernels ``kb.compile`` handed out and not yet closed. ``Kernel.close()``
  (hook ``kernelbay_close_kernel``) of the last of them takes the module's kernels out of the
  cache and unloads it (``cuModuleUnload``) after ``cuCtxSynchronize`` of its device's context:
  whatever a launch queued on any stream of that context (a graph replay too) has finished
  before its code goes away. While a stream capture is recorded the driver refuses both calls
  (and may end the capture): the unload is tried again at the next compile or close.
* The cache keeps at most :data:`MAX_KERNELS` kernels; past that the least recently compiled
  leaves it. A kernel that left the cache stays usable by whoever holds it; its module is
  unloaded once nothing refers to it any more, at the next compile or close, after the same
  synchronisation. A kernel and its generated launch function refer to each other, so only the
  cyclic collector frees them: it runs after every :data:`COLLECT_EVERY` kernels the cache lets
  go, so a process that never calls ``close()`` (an autotuner) keeps at most about
  ``MAX_KERNELS + COLLECT_EVERY`` modules loaded, besides those it holds.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import gc
import logging
import os
import threading
import weakref
from typing import Any

from kernelbay.errors import CompileError, InvalidArgumentError, UseAfterFreeError

from . import _driver
from .images import Image

log = logging.getLogger("kernelbay.cuda")

__all__ = ["MAX_KERNELS", "COLLECT_EVERY", "Module", "KernelCache", "module_counts", "gpu_free_bytes"]

#: Kernels the in-process cache keeps for repeated ``kb.compile`` calls (the cpu backend's bound).
MAX_KERNELS = 256
#: Run the cyclic collector after this many kernels left the cache.
COLLECT_EVERY = 32

# A stream capture in progress forbids cuCtxSynchronize / cuModuleUnload (CUDA_ERROR_STREAM_CAPTURE_*,
# CUDA_ERROR_CAPTURED_EVENT): the unload is tried again later.
_CAPTURE = frozenset(range(900, 909))

# Modules no longer referenced, waiting to be unloaded: (device index, CUmodule, pid). Appended
# by Module.__del__, which may run inside the collector on any thread, so it takes no lock.
_pending: collections.deque[tuple[int, int, int]] = collections.deque()
_counts = {"loaded": 0, "unloaded": 0, "unload_failed": 0}
_count_lock = threading.Lock()


def _count(what: str) -> None:
    with _count_lock:
        _counts[what] += 1


class Module:
    """A module loaded into one device's primary context.

    :ivar users: kernels of it that ``kb.compile`` handed out and that were not closed.
    :ivar kernels: the backend's kernels made from it (to disarm them once it is unloaded).
    """

    def __init__(self, device_index: int, image: Image) -> None:
        _driver.ensure_current(device_index)
        lib = _driver.libcuda()
        self.device_index = device_index
        self.image = image
        self.handle: int | None = None
        self.users = 0
        self.kernels: weakref.WeakSet[Any] = weakref.WeakSet()
        self.pid = os.getpid()
        size = 1 << 16
        info = ctypes.create_string_buffer(size)
        errbuf = ctypes.create_string_buffer(size)
        # CU_JIT_INFO_LOG_BUFFER(3), ..._SIZE_BYTES(4), CU_JIT_ERROR_LOG_BUFFER(5), ..._SIZE_BYTES(6)
        opts = (ctypes.c_int * 4)(3, 4, 5, 6)
        vals = (ctypes.c_void_p * 4)(ctypes.addressof(info), size, ctypes.addressof(errbuf), size)
        mod = ctypes.c_void_p()
        data = ctypes.create_string_buffer(image.data, len(image.data))
        rc = lib.cuModuleLoadDataEx(ctypes.byref(mod), data, 4, opts, vals)
        if rc:
            jit = errbuf.value.decode(errors="replace") or info.value.decode(errors="replace")
            if rc in _driver.STICKY or _driver.dead_reason(device_index):
                _driver.check(rc, f"loading a module on cuda:{device_index}", device_index)
            raise CompileError(
                f"the CUDA driver could not load the {image.kind} module ({image.arch or 'given binary'}) on "
                f"cuda:{device_index}: {_driver.error_name(rc)}",
                log=jit,
            )
        self.handle = mod.value
        _count("loaded")
        self.jit_log = info.value.decode(errors="replace")

    def function(self, symbol: str) -> int:
        fn = ctypes.c_void_p()
        rc = _driver.libcuda().cuModuleGetFunction(ctypes.byref(fn), ctypes.c_void_p(self.handle), symbol.encode())
        if rc:
            raise InvalidArgumentError(
                f"kernel {symbol!r} is not in the module on cuda:{self.device_index} "
                f"({_driver.error_name(rc)}); check Source.name"
            )
        return fn.value  # type: ignore[return-value]  # a function found is never NULL

    def global_copy(self, name: str, host: Any, write: bool) -> int | None:
        """The ``kernelbay_module_global`` hook's work: ``cuModuleGetGlobal``, then (with ``host``)
        a blocking copy after ``cuCtxSynchronize``. The variable's size, or None when absent."""
        lib = _driver.libcuda()
        idx = self.device_index
        _driver.ensure_current(idx)
        dptr, size = ctypes.c_uint64(), ctypes.c_size_t()
        rc = lib.cuModuleGetGlobal_v2(
            ctypes.byref(dptr), ctypes.byref(size), ctypes.c_void_p(self.handle), name.encode()
        )
        if rc:
            if rc == 500:  # CUDA_ERROR_NOT_FOUND
                return None
            _driver.check(rc, f"cuModuleGetGlobal({name!r}) on cuda:{idx}", idx)
        if host is None:
            return size.value
        if host.nbytes > size.value:
            raise InvalidArgumentError(
                f"module global {name!r} on cuda:{idx} has {size.value} bytes; {'writing' if write else 'reading'} "
                f"{host.nbytes} bytes ({host.dtype}{list(host.shape)}) overruns it: give a smaller value or shape"
            )
        _driver.check(lib.cuCtxSynchronize(), f"synchronizing cuda:{idx} before copying global {name!r}", idx)
        if write:
            rc = lib.cuMemcpyHtoD_v2(
                ctypes.c_uint64(dptr.value), ctypes.c_void_p(host.ctypes.data), ctypes.c_size_t(host.nbytes)
            )
        else:
            rc = lib.cuMemcpyDtoH_v2(
                ctypes.c_void_p(host.ctypes.data), ctypes.c_uint64(dptr.value), ctypes.c_size_t(host.nbytes)
            )
        _driver.check(rc, f"copying module global {name!r} on cuda:{idx}", idx)
        return size.value

    def take_handle(self) -> int | None:
        """The module handle, which this object then no longer owns (disarms its kernels)."""
        h, self.handle = self.handle, None
        for k in list(self.kernels):
            disarm(k)
        return h

    def __del__(self) -> None:
        h = self.handle
        if h is not None:
            self.handle = None
            _pending.append((self.device_index, h, self.pid))


def _released(name: str, device: str, *_args: Any) -> None:
    raise UseAfterFreeError(f"kernel {name!r} on {device} was launched after close(): its module is unloaded")


def disarm(k: Any) -> None:
    """Make every launch entry of the backend kernel ``k`` refuse (its module is going away);
    this also breaks the kernel's reference cycle with its generated launch function."""
    k.entry = functools.partial(_released, k.name, str(k.device))
    if k.inner_entry is not None:
        k.inner_entry = k.entry
    k.other_threads = {}


def unload(device_index: int, handle: int, pid: int) -> bool:
    """Synchronise the device's context, then unload ``handle``. False when a stream capture
    forbids it now (try again later). A dead context or a forked child has nothing to unload.

    :raises LaunchError: the synchronisation met an earlier kernel's failure (the context is dead).
    """
    if pid != os.getpid() or _driver.dead_reason(device_index) is not None:
        return True
    lib = _driver.libcuda()
    _driver.ensure_current(device_index)
    rc = lib.cuCtxSynchronize()
    if rc in _CAPTURE:
        return False
    if rc:
        _driver.check(rc, f"synchronizing cuda:{device_index} before unloading a module", device_index)
    rc = lib.cuModuleUnload(ctypes.c_void_p(handle))
    if rc in _CAPTURE:
        return False
    if rc:  # nothing a caller could do: the handle is given up
        log.debug("cuModuleUnload on cuda:%d: %s", device_index, _driver.error_name(rc))
    _count("unload_failed" if rc else "unloaded")
    return True


def flush_pending() -> None:
    """Unload the modules nothing refers to any more (see :func:`unload`)."""
    retry = []
    while _pending:
        try:
            item = _pending.popleft()
        except IndexError:  # another thread took the last one
            break
        try:
            done = unload(*item)
        except BaseException:
            retry.append(item)
            _pending.extend(retry)
            raise
        if not done:
            retry.append(item)
    _pending.extend(retry)


class KernelCache:
    """The in-process cache: ``(device index, Source) -> backend kernel``, least recently
    compiled first, at most ``bound`` entries; and the loaded modules by image bytes."""

    def __init__(self, bound: int = MAX_KERNELS) -> None:
        self.bound = bound
        self.lock = threading.Lock()
        self.kernels: collections.OrderedDict[tuple[int, Any], Any] = collections.OrderedDict()
        # A module lives as long as a kernel of it does: an evicted one is not kept by this map.
        self.modules: weakref.WeakValueDictionary[tuple[int, bytes], Module] = weakref.WeakValueDictionary()
        self._dropped = 0

    def hit(self, key: tuple[int, Any]) -> Any:
        """The cached kernel for ``key`` (one more user of its module), or None. Under ``lock``."""
        k = self.kernels.get(key)
        if k is None or k.module.handle is None:
            return None
        self.kernels.move_to_end(key)
        k.module.users += 1
        return k

    def module(self, device_index: int, image: Image) -> Module:
        """The loaded module for ``image`` (shared with kernels of identical images). Under ``lock``."""
        mkey = (device_index, image.data)
        mod = self.modules.get(mkey)
        if mod is None or mod.handle is None:
            mod = self.modules[mkey] = Module(device_index, image)
        return mod

    def add(self, key: tuple[int, Any], k: Any) -> int:
        """Cache ``k`` (handed out once); the number of kernels the bound pushed out. Under ``lock``."""
        k.module.users += 1
        k.module.kernels.add(k)
        self.kernels[key] = k
        dropped = 0
        while len(self.kernels) > self.bound:
            self.kernels.popitem(last=False)
            dropped += 1
        return dropped

    def after_drops(self, n: int) -> None:
        """After ``n`` kernels left the cache (outside ``lock``): collect every so many, then
        unload what nothing refers to any more."""
        if n:
            self._dropped += n
            if self._dropped >= COLLECT_EVERY:
                self._dropped = 0
                gc.collect()
        if _pending:
            flush_pending()

    def release(self, k: Any) -> None:
        """``Kernel.close()``: one user of ``k``'s module fewer; the last one unloads it."""
        mod = k.module
        with self.lock:
            if mod.users > 0:
                mod.users -= 1
            if mod.users or mod.handle is None:
                return
            for key in [key for key, v in self.kernels.items() if v.module is mod]:
                del self.kernels[key]
            mkey = (mod.device_index, mod.image.data)
            if self.modules.get(mkey) is mod:
                del self.modules[mkey]
            h = mod.take_handle()
        if h is not None and not unload(mod.device_index, h, mod.pid):
            _pending.append((mod.device_index, h, mod.pid))
        self.after_drops(0)  # disarm broke its kernels' cycles: no collection needed

    def __len__(self) -> int:
        return len(self.kernels)


def module_counts() -> dict[str, int]:
    """Modules this process loaded and has not unloaded (nor given up), unloads the driver
    refused, and modules waiting to be unloaded."""
    return {
        "modules_loaded": _counts["loaded"] - _counts["unloaded"] - _counts["unload_failed"],
        "unload_failures": _counts["unload_failed"],
        "modules_pending_unload": len(_pending),
    }


def gpu_free_bytes(device_index: int) -> int:
    """Free device memory as the driver reports it (``cuMemGetInfo``)."""
    _driver.ensure_current(device_index)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    _driver.check(_driver.libcuda().cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    return free.value
