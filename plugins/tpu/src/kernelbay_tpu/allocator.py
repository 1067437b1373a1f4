"""Memory: kernelbay buffers as handles to immutable JAX arrays.

A JAX array cannot be written, so a kernelbay array on this backend is a *handle* whose
storage the backend replaces: a copy in, a memset or a launch stores a new JAX array into
``Buffer.handle`` (the launch stores the very array the Pallas call returned: no copy).

Storage layout of a handle:

* an :class:`Unset` placeholder until something is written: ``kb.empty`` allocates nothing,
  and an output-only kernel argument never needs memory of its own;
* for an Array whose dtype JAX holds natively: a JAX array of the Array's shape and dtype;
* otherwise (untyped Buffers, and 64-bit dtypes while jax runs without x64): the raw bytes as
  a ``uint8`` JAX array, so allocation and host copies work for every dtype. Kernels reject
  such dtypes before compiling.
"""

from __future__ import annotations

import sys
from typing import Any

from kernelbay.errors import ArgumentTypeError, InvalidArgumentError
from kernelbay.types import Array, Buffer, Device

from ._driver import jax_device, state

# jax and numpy are imported inside the functions that use them (see _driver): importing the
# backend, to list or select it, must not load jax, which takes seconds.


class Unset:
    """The storage of a buffer nothing has written yet (reads as zeros)."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return f"<kernelbay-tpu: {self.nbytes} bytes, not yet written>"


def allocate(device: Device, nbytes: int) -> Any:
    return Unset(nbytes)


def free(device: Device, handle: Any) -> None:
    # Dropping the reference is the release: JAX frees the buffer when no array refers to it.
    # Deleting it outright would break a JAX array the user handed us with kb.asarray().
    return None


def native(dtype: Any) -> bool:
    """Whether JAX holds ``dtype`` as itself under the current config (no x64: no 64-bit)."""
    import jax
    import numpy as np

    try:
        return np.dtype(jax.dtypes.canonicalize_dtype(dtype)) == np.dtype(dtype)
    except TypeError:
        return False


def layout(buf: Buffer) -> tuple[tuple[int, ...], Any]:
    """The shape and dtype of ``buf``'s JAX storage."""
    import numpy as np

    if isinstance(buf, Array) and native(buf.dtype):
        return buf.shape, buf.dtype
    return (buf.nbytes,), np.dtype(np.uint8)


def host_bytes(buf: Buffer) -> Any:
    """``buf``'s contents as a flat uint8 numpy array (zeros if never written)."""
    import numpy as np

    h = buf.checked_handle()
    if type(h) is Unset:
        return np.zeros(buf.nbytes, np.uint8)
    return np.asarray(h).reshape(-1).view(np.uint8)


def put(buf: Buffer, host: Any) -> None:
    """Store the flat bytes ``host`` (uint8, ``buf.nbytes`` long) as ``buf``'s storage."""
    import jax
    import numpy as np

    shape, dtype = layout(buf)
    arr = np.ascontiguousarray(host).view(dtype).reshape(shape)
    # may_alias=False: the host array stays the caller's; JAX must not share its memory.
    buf.handle = jax.device_put(arr, jax_device(buf.device), may_alias=False)


def copy(dst: Buffer | Any, src: Buffer | Any, nbytes: int, stream: Any) -> None:
    import numpy as np

    if isinstance(dst, Buffer):
        dst.checked_handle()
        if isinstance(src, Buffer):
            if nbytes == dst.nbytes and layout(dst) == layout(src) and type(src.checked_handle()) is not Unset:
                _device_copy(dst, src)
                return
            data = host_bytes(src)[:nbytes]
        else:
            data = np.ascontiguousarray(src).reshape(-1).view(np.uint8)[:nbytes]
        if nbytes == dst.nbytes:
            put(dst, data)
        else:  # a partial copy: read, patch, write back
            whole = host_bytes(dst).copy()
            whole[:nbytes] = data
            put(dst, whole)
        return
    if not isinstance(src, Buffer):
        raise ArgumentTypeError("kernelbay-tpu copies need a kernelbay Buffer on one side")
    out = dst.reshape(-1).view(np.uint8)
    out[:nbytes] = host_bytes(src)[:nbytes]


_copy_fn: Any = None


def _device_copy(dst: Buffer, src: Buffer) -> None:
    # A new buffer, never a shared one: an in-place launch donates (deletes) its argument's
    # storage, which must not take another array's contents with it.
    global _copy_fn
    if _copy_fn is None:
        import jax
        import jax.numpy as jnp

        _copy_fn = jax.jit(jnp.copy)
    dst.handle = _copy_fn(src.handle)


def memset(dst: Buffer, value: int, nbytes: int, stream: Any) -> None:
    import jax.numpy as jnp
    import numpy as np

    dst.checked_handle()
    if value == 0 and nbytes == dst.nbytes:
        shape, dtype = layout(dst)
        dst.handle = jnp.zeros(shape, dtype, device=jax_device(dst.device))
        return
    whole = host_bytes(dst).copy() if nbytes < dst.nbytes else np.empty(dst.nbytes, np.uint8)
    whole[:nbytes] = value
    put(dst, whole)


def materialize(buf: Buffer) -> Any:
    """Give an :class:`Unset` buffer real (zeroed) storage and return it."""
    h = buf.checked_handle()
    if type(h) is Unset:
        memset(buf, 0, buf.nbytes, None)
        h = buf.handle
    return h


# --- interchange ------------------------------------------------------------------------


def from_external(obj: Any, device: Device | None) -> tuple[Any, tuple[int, ...], Any] | None:
    """Adopt a single-device JAX array on one of our devices, without a copy."""
    if sys.modules.get("jax") is None:  # not a JAX array if jax was never imported
        return None
    import jax
    import numpy as np

    if not isinstance(obj, jax.Array) or obj.is_deleted():
        return None
    try:
        devs = obj.devices()
    except Exception:  # a tracer or an abstract array
        return None
    if len(devs) != 1:
        return None
    (d,) = devs
    want = [jax_device(device)] if device is not None else state.jax_devices[:1]
    if d not in want:
        return None
    return obj, tuple(obj.shape), np.dtype(obj.dtype)


def jax_storage(array: Array) -> Any:
    """The JAX array holding ``array`` as its own shape and dtype (for DLPack)."""
    if not native(array.dtype):
        raise InvalidArgumentError(
            f"a {array.dtype} array on {array.device} is stored as raw bytes (jax runs without x64); "
            "export a 32-bit array, or copy it to the host with .numpy()"
        )
    return materialize(array)


def to_dlpack(array: Array, stream: Any, max_version: Any) -> Any:
    # The consumer's max_version is passed on (None asks for the legacy capsule), as the
    # protocol requires; a jax too old to take it exports the legacy capsule, which any
    # consumer accepts.
    storage = jax_storage(array)
    if max_version is None:
        return storage.__dlpack__()
    try:
        return storage.__dlpack__(max_version=tuple(max_version))
    except TypeError:
        return storage.__dlpack__()


def dlpack_device(array: Array) -> tuple[int, int]:
    return jax_storage(array).__dlpack_device__()
