"""Zero-copy interop: ``__cuda_array_interface__`` (v3) out and in (CuPy, PyTorch, Numba...)."""

from __future__ import annotations

import ctypes
from typing import Any

from kernelbay.errors import InvalidArgumentError

from . import _driver
from .allocator import ExternalPointer

__all__ = ["cuda_array_interface", "from_external", "dlpack_device"]


def cuda_array_interface(array: Any) -> dict[str, Any]:
    """The ``kernelbay_cuda_array_interface`` hook. ``stream`` 1 is the legacy default stream,
    where kernelbay queues work unless told otherwise."""
    ptr = array.checked_handle()
    return {
        "shape": tuple(array.shape),
        "typestr": array.dtype.str,
        "data": (int(ptr), False),
        "strides": None,
        "version": 3,
        "stream": 1,
    }


def dlpack_device(array: Any) -> tuple[int, int]:
    return (2, array.device.index)  # kDLCUDA


def _device_of(ptr: int) -> int | None:
    lib = _driver.libcuda()
    v = ctypes.c_int()
    rc = lib.cuPointerGetAttribute(ctypes.byref(v), 9, ctypes.c_uint64(ptr))  # DEVICE_ORDINAL
    return v.value if rc == 0 else None


def from_external(obj: Any, device: Any) -> tuple[Any, tuple[int, ...], Any] | None:
    """The ``kernelbay_from_external`` hook: adopt a CUDA array through its CUDA array interface."""
    import numpy as np

    try:
        cai = obj.__cuda_array_interface__
    except (AttributeError, RuntimeError, TypeError):
        return None
    if not isinstance(cai, dict) or "data" not in cai:
        return None
    shape = tuple(int(s) for s in cai["shape"])
    dt = np.dtype(cai["typestr"])
    if cai.get("descr") and len(cai["descr"]) > 1:
        dt = np.dtype([tuple(d) for d in cai["descr"]])
    strides = cai.get("strides")
    if strides is not None:
        expect, acc = [], dt.itemsize
        for s in reversed(shape):
            expect.append(acc)
            acc *= s
        if tuple(strides) != tuple(reversed(expect)) and 0 not in shape:
            raise InvalidArgumentError(
                f"kb.asarray needs a C-contiguous CUDA array; this {type(obj).__name__} has strides {tuple(strides)}: "
                "make it contiguous first (x.contiguous() in PyTorch, cupy.ascontiguousarray)"
            )
    ptr = int(cai["data"][0] or 0)
    import kernelbay as kb

    devs = [d for d in kb.devices() if d.backend == "cuda"]
    if not devs:
        return None
    idx = _device_of(ptr) if ptr else (device.index if device is not None else 0)
    if idx is None:
        return None
    target = next((d for d in devs if d.index == idx), None)
    if target is None:
        return None
    if device is not None and device.index != idx:
        raise InvalidArgumentError(
            f"the {type(obj).__name__} lives on cuda:{idx}, not on {device}; copy it there first"
        )
    stream = cai.get("stream")
    if stream not in (None, 1):  # make its producer's work visible to our default stream
        _driver.ensure_current(idx)
        _driver.libcuda().cuStreamSynchronize(ctypes.c_void_p(int(stream)))
    handle = ExternalPointer(ptr)
    handle.owner = obj
    handle.device = target
    return handle, shape, dt
