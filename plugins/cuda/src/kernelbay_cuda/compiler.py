"""The compile and close hooks: kernels per ``(device, Source)`` through the in-process cache.

``kb.compile`` returns the kernel this process made for the same source on the same device
(:class:`.modules.KernelCache`), else one made anew: its image compiled (CUDA C++ by NVRTC,
:mod:`.nvrtc`; a Triton function by Triton, :mod:`.triton_kernels`) or given (PTX, cubin,
fatbin), loaded into a module shared by identical images (:mod:`.modules`), and made a
:class:`.kernel.CudaKernel`, which is ready to launch. ``Kernel.close()`` releases it (the last
user of a module unloads it).
"""

from __future__ import annotations

import threading
from typing import Any

from kernelbay.errors import InvalidArgumentError, UseAfterFreeError
from kernelbay.types import Device, Source

from . import _driver
from .images import Image, parse_ptx_params
from .kernel import CudaKernel
from .modules import KernelCache, gpu_free_bytes, module_counts
from .nvrtc import compile_image, entry_names, typed_params
from .packing import layout
from .triton_kernels import compile_triton

__all__ = [
    "cache",
    "compile_kernel",
    "compile_to_cache",
    "close_kernel",
    "module_global",
    "set_max_kernels",
    "module_stats",
    "gpu_free_bytes",
]

#: The kernels ``kb.compile`` handed out, by ``(device index, Source)``.
cache = KernelCache()

#: Triton's compiler is not known to be safe in several threads at once.
_triton_lock = threading.Lock()


def set_max_kernels(bound: int) -> None:
    """Set the in-process cache's bound (default :data:`.modules.MAX_KERNELS`, 256)."""
    if type(bound) is not int or bound < 1:
        raise InvalidArgumentError(f"the kernel cache bound must be an int >= 1, got {bound!r}")
    cache.bound = bound


def compile_kernel(device: Device, source: Source) -> CudaKernel:
    """The ``kernelbay_compile`` hook: a kernel from the in-process cache, else compiled (the
    disk cache, NVRTC or Triton) or given, loaded, and ready to launch.

    The compile runs outside the cache's lock, so another thread's cache hit never waits for it
    (NVRTC itself compiles one program at a time per process; the disk cache's per-key lock makes
    one of two threads or processes with the same key compile it). Triton compiles one at a time
    (:data:`_triton_lock`).
    """
    key = (device.index, source)
    with cache.lock:
        k = cache.hit(key)
    if k is not None:
        return k
    _driver.check_alive(device.index)
    if source.lang == "triton":
        with _triton_lock:
            image, expr, settings = _image_for(device, source)
    else:
        image, expr, settings = _image_for(device, source)
    with cache.lock:
        k = cache.hit(key)  # another thread made it meanwhile
        if k is None:
            mod = cache.module(device.index, image)
            symbol = image.lowered.get(expr, expr)
            raw = image.params.get(symbol)
            params = layout(typed_params(raw, image.kinds.get(symbol))) if raw is not None else None
            k = CudaKernel(device, mod, expr, symbol, params, settings)
            dropped = cache.add(key, k)
        else:
            dropped = 0
    cache.after_drops(dropped)
    return k


def compile_to_cache(device: Device, source: Source) -> None:
    """The ``kernelbay_compile_to_cache`` hook: CUDA C++ through NVRTC, a Triton function through
    Triton (for the device's compute capability), into the disk cache, with no driver context
    and no module (a compile worker stays cheap); PTX, cubin and fatbin have nothing to compile."""
    if source.lang == "cuda":
        compile_image(source, tuple(device.properties["compute_capability"]))
    elif source.lang == "triton":
        with _triton_lock:
            compile_triton(source, tuple(device.properties["compute_capability"]))


def close_kernel(kernel: Any) -> None:
    """The ``kernelbay_close_kernel`` hook: one user fewer of the kernel's module; the last one
    takes its kernels out of the cache and unloads it once the device has finished the work
    queued before (see :mod:`.modules`)."""
    cache.release(kernel.handle)


def module_global(kernel: Any, name: str, host: Any, write: bool) -> int | None:
    """The ``kernelbay_module_global`` hook: a ``__constant__``/``__device__`` variable of the
    kernel's module read or written from the host (see :meth:`.modules.Module.global_copy`)."""
    mod = kernel.handle.module
    if mod.handle is None:
        raise UseAfterFreeError(f"the module of kernel {kernel.name!r} on {kernel.device} was unloaded")
    return mod.global_copy(name, host, write)


def _image_for(device: Device, source: Any) -> tuple[Image, str, dict[str, Any]]:
    """The module image, the kernel to launch, and launch settings (Triton's; else empty)."""
    cc = tuple(device.properties["compute_capability"])
    lang = source.lang
    if lang == "cuda":
        entry, _ = entry_names(source)
        return compile_image(source, cc), entry, {}
    if lang == "triton":
        return compile_triton(source, cc)
    data = source.code if isinstance(source.code, bytes) else source.code.encode()
    params: dict[str, list[tuple[int, int, str]]] = {}
    if lang == "ptx":
        text = data.decode(errors="replace")
        params = parse_ptx_params(text)
        if not data.endswith(b"\0"):
            data += b"\0"
    name = source.name
    if name is None:
        if len(params) == 1:
            name = next(iter(params))
        else:
            raise InvalidArgumentError(
                f"a {lang} source needs Source(..., name='kernel_symbol') to say which kernel to launch"
            )
    return Image(data=data, kind=lang, params=params), name, {}


def module_stats() -> dict[str, int]:
    """Modules this process loaded and has not unloaded (nor given up), those waiting to be
    unloaded, unloads the driver refused, and the kernel cache's size and bound."""
    return {**module_counts(), "kernel_cache": len(cache), "kernel_cache_bound": cache.bound}
