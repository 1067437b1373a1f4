"""Zero-copy interop: ``__cuda_array_interface__`` (v3) and DLPack, out and in (CuPy, PyTorch,
JAX, Numba...)."""

from __future__ import annotations

import ctypes
from typing import Any

import kernelbay as kb
from kernelbay.argrules import BY_DLPACK, BY_NAME
from kernelbay.errors import InvalidArgumentError

from . import _driver
from .allocator import ExternalPointer

__all__ = ["cuda_array_interface", "from_external", "to_dlpack", "dlpack_device"]


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


def _device_of(ptr: int) -> int | None:
    lib = _driver.libcuda()
    v = ctypes.c_int()
    rc = lib.cuPointerGetAttribute(ctypes.byref(v), 9, ctypes.c_uint64(ptr))  # DEVICE_ORDINAL
    return v.value if rc == 0 else None


def from_external(obj: Any, device: Any) -> tuple[Any, tuple[int, ...], Any] | None:
    """The ``kernelbay_from_external`` hook: adopt a CUDA array through its CUDA array interface
    or, failing that, DLPack (kDLCUDA)."""
    import numpy as np  # deferred for speed: importing the plugin stays cheap

    try:
        cai = obj.__cuda_array_interface__
    except (AttributeError, RuntimeError, TypeError):
        return _from_dlpack(obj, device)
    if not isinstance(cai, dict) or "data" not in cai:
        return _from_dlpack(obj, device)
    shape = tuple(int(s) for s in cai["shape"])
    dt: np.dtype = np.dtype(cai["typestr"])
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


# --- DLPack -----------------------------------------------------------------------------
#
# Export borrows numpy's DLPack producer for the bookkeeping and patches the tensor it hands
# out. A capsule destructor and a ``deleter`` written as ctypes callbacks break whenever they
# run with an exception in flight (a frame unwinding, a consumer failing after __dlpack__):
# CPython then raises SystemError and loses the original error. numpy's C destructor and
# deleter save and restore the error state, free their own struct and drop one reference to
# the numpy array they export. So: a numpy array of the right shape whose base holds the
# kernelbay Array is exported, and the DLTensor in its capsule is rewritten (data pointer,
# device, dtype, strides, flags) before anyone sees it. The kernelbay Array lives until the
# consumer calls the deleter, or until the capsule is dropped unconsumed.

KDLCUDA = 2
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# Our own prototypes: setting argtypes on ctypes.pythonapi's shared functions would change
# them for every other library in the process.
_api = ctypes.pythonapi
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))
_DELETER = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)

# Capsule names; module constants, because a capsule keeps a pointer to its name.
LEGACY, VERSIONED = b"dltensor", b"dltensor_versioned"
_USED = {LEGACY: b"used_dltensor", VERSIONED: b"used_dltensor_versioned"}

_BYTE = ctypes.c_uint8()  # the one host byte every element of the stand-in array points at


class _Keep:
    """The base of the stand-in numpy array: keeps the exported kernelbay Array alive."""

    __slots__ = ("array", "__array_interface__")

    def __init__(self, array: Any, shape: tuple[int, ...]) -> None:
        self.array = array
        self.__array_interface__ = {
            "shape": shape,
            "typestr": "|u1",
            "data": (ctypes.addressof(_BYTE), False),
            "strides": (0,) * len(shape),
            "version": 3,
        }


def _dl_dtype(dt: Any) -> tuple[int, int]:
    """(DLDataTypeCode, bits) of a numpy dtype, from the core's table; BufferError for what DLPack cannot say."""
    row = BY_NAME.get(dt.name)
    if row is None or dt.fields is not None or dt.subdtype is not None or not dt.isnative:
        raise BufferError(f"DLPack cannot describe dtype {dt}; copy the array to a numeric dtype first")
    return row.dlpack, 8 * row.size


def _np_dtype(code: int, bits: int, lanes: int) -> Any:
    """The numpy dtype of a DLDataType, or None when kernelbay cannot hold it."""
    import numpy as np  # deferred for speed: importing the plugin stays cheap

    row = BY_DLPACK.get((code, bits))
    if lanes != 1 or row is None:
        return None
    try:
        return np.dtype(row.name)
    except TypeError:  # bfloat16, float8: numpy knows them once ml_dtypes is imported
        try:
            import ml_dtypes  # deferred: optional, and heavy
        except ImportError:
            return None
        return np.dtype(getattr(ml_dtypes, row.name))


def _c_strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]


def _order_for_consumer(index: int, stream: Any) -> None:
    """Make the consumer's ``stream`` wait for work queued on ours (the legacy default stream)."""
    if stream is None or stream in (1, 2, -1):
        # 1 is our own stream; the per-thread default stream (2) is a blocking stream and so
        # orders with the legacy one; -1 asks for no synchronisation.
        return
    if not isinstance(stream, int) or isinstance(stream, bool) or stream <= 0:
        raise InvalidArgumentError(
            f"DLPack stream must be None, 1 (legacy default), 2 (per-thread default), -1 or a CUDA stream "
            f"handle, got {stream!r} (0 is ambiguous and disallowed by the protocol)"
        )
    lib = _driver.libcuda()
    _driver.ensure_current(index)
    ev = ctypes.c_void_p()
    _driver.check(lib.cuEventCreate(ctypes.byref(ev), 2), "cuEventCreate", index)  # DISABLE_TIMING
    try:
        _driver.check(lib.cuEventRecord(ev, None), "cuEventRecord", index)
        _driver.check(lib.cuStreamWaitEvent(ctypes.c_void_p(stream), ev, 0), "cuStreamWaitEvent", index)
    finally:
        lib.cuEventDestroy_v2(ev)  # released once the wait has been satisfied


def to_dlpack(array: Any, stream: Any, max_version: tuple[int, int] | None) -> Any:
    """The ``kernelbay_to_dlpack`` hook: a kDLCUDA capsule sharing ``array``'s memory.

    A versioned, writable capsule (``dltensor_versioned``, flags 0) when ``max_version`` is
    ``(1, 0)`` or later, else the legacy ``dltensor``. ``stream`` per the protocol: ``None``,
    1 and 2 need nothing (kernelbay queues on the legacy default stream, which the per-thread
    default stream orders with); any other handle is made to wait for the work queued so far on
    the default stream (an event, ``cuStreamWaitEvent``), so the consumer does not block.
    """
    import numpy as np  # deferred for speed: importing the plugin stays cheap

    ptr = int(array.checked_handle())
    dt = np.dtype(array.dtype)
    code, bits = _dl_dtype(dt)
    shape = tuple(int(s) for s in array.shape)
    index = array.device.index
    _order_for_consumer(index, stream)
    standin = np.asarray(_Keep(array, shape))
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    if versioned:
        try:
            cap = standin.__dlpack__(max_version=(1, 0))
        except TypeError:  # numpy < 2.1 exports legacy capsules only, which the protocol allows
            versioned, cap = False, standin.__dlpack__()
    else:
        cap = standin.__dlpack__()
    if _is_valid(cap, VERSIONED):
        m = DLManagedTensorVersioned.from_address(_get_pointer(cap, VERSIONED))
        m.version.major, m.version.minor = 1, 0
        m.flags = 0  # writable, not a copy
        t = m.dl_tensor
    else:
        t = DLManagedTensor.from_address(_get_pointer(cap, LEGACY)).dl_tensor
    t.data = ptr
    t.byte_offset = 0
    t.device.device_type, t.device.device_id = KDLCUDA, index
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
    if t.strides:  # NULL already means compact row-major
        for i, s in enumerate(_c_strides(shape)):
            t.strides[i] = s
    return cap


def dlpack_device(array: Any) -> tuple[int, int]:
    """The ``kernelbay_dlpack_device`` hook."""
    return (KDLCUDA, array.device.index)


class _Imported:
    """The owner of a consumed DLPack tensor: calls the producer's deleter when dropped."""

    __slots__ = ("ptr", "deleter", "__weakref__")

    def __init__(self, ptr: int, deleter: int | None) -> None:
        self.ptr = ptr
        self.deleter = deleter

    def release(self) -> None:
        d, self.deleter = self.deleter, None
        if d:
            _DELETER(d)(self.ptr)

    def __del__(self) -> None:
        self.release()


def read_capsule(cap: Any) -> tuple[int, tuple[int, int], tuple[int, ...], Any, bool, bool] | None:
    """``(data pointer, (device type, id), shape, numpy dtype or None, contiguous, read-only)``
    of an unconsumed DLPack capsule; None for a major version other than 1."""
    if _is_valid(cap, VERSIONED):
        m = DLManagedTensorVersioned.from_address(_get_pointer(cap, VERSIONED))
        if m.version.major != 1:
            return None
        t, ro = m.dl_tensor, bool(m.flags & _READ_ONLY)
    elif _is_valid(cap, LEGACY):
        t, ro = DLManagedTensor.from_address(_get_pointer(cap, LEGACY)).dl_tensor, False
    else:
        raise BufferError("not an unconsumed DLPack capsule (a capsule can be consumed only once)")
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    contiguous = True
    if t.strides and 0 not in shape:
        want = _c_strides(shape)
        contiguous = all(n == 1 or int(t.strides[i]) == want[i] for i, n in enumerate(shape))
    dt = _np_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    dev = (int(t.device.device_type), int(t.device.device_id))
    return int(t.data or 0) + int(t.byte_offset), dev, shape, dt, contiguous, ro


def consume_capsule(cap: Any) -> _Imported:
    """Mark ``cap`` consumed and return the owner that calls its deleter when dropped."""
    for name, cls in ((VERSIONED, DLManagedTensorVersioned), (LEGACY, DLManagedTensor)):
        if _is_valid(cap, name):
            p = _get_pointer(cap, name)
            owner = _Imported(p, cls.from_address(p).deleter)
            if _set_name(cap, _USED[name]) != 0:  # pragma: no cover - only fails for a non-capsule
                raise BufferError("could not mark the DLPack capsule consumed")
            return owner
    raise BufferError("not an unconsumed DLPack capsule (a capsule can be consumed only once)")


def _from_dlpack(obj: Any, device: Any) -> tuple[Any, tuple[int, ...], Any] | None:
    """Adopt a kDLCUDA ``__dlpack__`` producer (JAX...) without a copy; None to let the core copy."""
    dev_fn = getattr(obj, "__dlpack_device__", None)
    if dev_fn is None or not hasattr(obj, "__dlpack__"):
        return None
    try:
        dev_type, dev_id = (int(v) for v in dev_fn())
    except Exception:
        return None
    if dev_type != KDLCUDA:
        return None
    target = next((d for d in kb.devices() if d.backend == "cuda" and d.index == dev_id), None)
    if target is None:
        return None
    if device is not None and device.index != dev_id:
        raise InvalidArgumentError(
            f"the {type(obj).__name__} lives on cuda:{dev_id}, not on {device}; copy it there first"
        )
    # Stream 1: kernelbay reads on the legacy default stream; the producer makes it wait.
    try:
        try:
            cap = obj.__dlpack__(stream=1, max_version=(1, 0))
        except TypeError:
            cap = obj.__dlpack__(stream=1)
        info = read_capsule(cap)
    except (BufferError, TypeError, ValueError, RuntimeError):
        return None
    if info is None:
        return None
    ptr, dev, shape, dt, contiguous, read_only = info
    # kernelbay arrays are C-contiguous, writable and of a numpy dtype; anything else is copied.
    if dev != (KDLCUDA, dev_id) or dt is None or not contiguous or read_only:
        return None
    handle = ExternalPointer(ptr)
    handle.owner = consume_capsule(cap)
    handle.device = target
    return handle, shape, dt
