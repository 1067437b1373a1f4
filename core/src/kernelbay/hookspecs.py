"""The contract between kernelbay's core and its backends.

A backend is a module (or any object) whose functions are decorated with :data:`hookimpl` and
named after the specs below. Its distribution announces it in the entry-point group
``kernelbay.backends``; the entry-point name is the backend's name::

    [project.entry-points."kernelbay.backends"]
    cpu = "kernelbay_cpu.plugin"

Rules every backend follows:

* A backend's implementations are only ever called for its own devices, kernels and buffers:
  the core routes each call to the one backend that owns the object. Never ask "is this mine?".
* Every hook is called with keyword arguments (pluggy), but on the hot path (allocate, free,
  copy, launch) the core binds the backend's function once and calls it positionally, in the
  order of the spec's parameters. Implement every parameter of a hot-path spec, in order, or
  the core falls back to the slower keyword call.
* Expected failures raise :mod:`kernelbay.errors` types. Anything else is reported as a bug in
  the backend.
* Heavy imports (drivers, jax) happen inside the hooks, not at module import: ``kernelbay_backend``
  must be cheap; ``kernelbay_devices`` is the first hook that may touch a driver.

Hooks marked *optional* may be left out; the core then raises
:class:`~kernelbay.errors.UnsupportedError` when a user asks for that capability.

Extensions (tracers, profilers) register plugins with :func:`kernelbay.register` holding
``wrapper=True`` implementations of any hook; while one is registered, the core routes calls
through pluggy so the wrapper runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from .types import Array, BackendSpec, Buffer, Device, Kernel, MemoryStats, Source

#: The version of this contract. A backend declares the version it was built for in
#: :class:`~kernelbay.types.BackendSpec`; a different version marks it broken.
API_VERSION = 1

hookspec = pluggy.HookspecMarker("kernelbay")
hookimpl = pluggy.HookimplMarker("kernelbay")

#: Hooks the core binds for direct calls (the hot path).
HOT_HOOKS = ("kernelbay_allocate", "kernelbay_free", "kernelbay_copy", "kernelbay_launch")


# --- identity and discovery ------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_backend() -> BackendSpec:
    """Declare the backend: name, priority, accepted languages, API version.

    Called once when the backend is loaded. Must not import drivers or frameworks.

    :return: a :class:`~kernelbay.types.BackendSpec` whose ``name`` equals the entry-point name.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_devices() -> Sequence[Device]:
    """Probe the machine and announce the backend's devices.

    Called once per process, the first time a device of this backend is needed. The probe must
    leave the process able to use the device after a ``fork`` (for CUDA: no context creation).

    :return: the devices, indexed 0..n-1, each a :class:`~kernelbay.types.Device` whose
        ``backend`` is this backend's name.
    :raises BackendUnavailableError: when there is nothing to run on here, with a reason that
        says what is missing and what to do ("no NVIDIA driver found (libcuda.so.1); install a
        driver or set KERNELBAY_DEVICE=cpu").

    .. versionadded:: 0.1
    """


# --- memory -----------------------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_allocate(device: Device, nbytes: int) -> Any:
    """Allocate ``nbytes`` of device memory.

    :param device: one of this backend's devices.
    :param nbytes: the size, >= 0 (the core checks). Zero must work.
    :return: the backend's handle for the memory, stored as ``Buffer.handle``; never ``None``.
    :raises OutOfMemoryError: when the memory cannot be had, with the allocator's figures.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_free(device: Device, handle: Any) -> None:
    """Release memory from :func:`kernelbay_allocate`. Called exactly once per handle.

    May run from a garbage-collection finaliser: must not raise for a live handle.

    :param device: the device it was allocated on.
    :param handle: the handle ``kernelbay_allocate`` returned (or the latest one the backend
        stored into ``Buffer.handle``).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_copy(dst: Buffer | np.ndarray, src: Buffer | np.ndarray, nbytes: int, stream: Any) -> None:
    """Copy ``nbytes`` from ``src`` to ``dst``.

    Each side is either a :class:`~kernelbay.types.Buffer` of this backend or a C-contiguous
    numpy array in host memory; at least one side is a Buffer. The core has already checked
    sizes, dtypes and that both buffers are alive. Copies between two backends are done by the
    core through host memory and never reach this hook.

    :param dst: destination.
    :param src: source.
    :param nbytes: bytes to copy (<= both sizes).
    :param stream: a backend stream, or ``None`` for the device's default stream. A copy into a
        numpy array must have completed when the hook returns.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_memset(dst: Buffer, value: int, nbytes: int, stream: Any) -> None:
    """*Optional.* Set the first ``nbytes`` bytes of ``dst`` to the byte ``value``.

    Backends without it get :func:`kernelbay.zeros` as a copy from a zeroed host array.

    :param dst: a live buffer of this backend.
    :param value: the byte value, 0..255.
    :param nbytes: how many bytes, <= ``dst.nbytes``.
    :param stream: a backend stream, or ``None`` for the default stream.

    .. versionadded:: 0.1
    """


# --- code -------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_compile(device: Device, source: Source) -> Any:
    """Compile (or load) ``source`` for ``device``.

    The core has checked that ``source.lang`` is one of the backend's languages. Backends cache
    compiled modules in process and on disk (:mod:`kernelbay.cache`).

    :param device: the target device.
    :param source: the kernel source.
    :return: the backend's handle for the compiled kernel, stored as ``Kernel.handle``.
    :raises CompileError: with the compiler's full log and the source lines it points at.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_launch(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    """Queue a launch of ``kernel``. The hot path: keep it lean.

    :param kernel: a :class:`~kernelbay.types.Kernel` this backend compiled.
    :param grid: as the user passed it (int or tuple); normalise with
        :func:`kernelbay.types.dim3`.
    :param block: likewise, or ``None`` for the backend's choice.
    :param args: the kernel's arguments, unconverted: kernelbay buffers/arrays, numpy scalars,
        Python numbers, or anything the backend documents.
    :param shared_mem: dynamic shared memory per block, in bytes.
    :param stream: a backend stream, or ``None`` for the default stream.
    :return: anything the backend documents (usually ``None``).
    :raises InvalidArgumentError: for a bad geometry, wrong argument count, size or type, or a
        buffer of another device -- before any native code runs.
    :raises LaunchError: when the launch fails.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_synchronize(device: Device, stream: Any) -> None:
    """Block until queued work has finished.

    :param device: the device.
    :param stream: a backend stream, or ``None`` for all work on the device.
    :raises LaunchError: if queued work failed.

    .. versionadded:: 0.1
    """


# --- optional capabilities --------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_host_view(array: Array) -> np.ndarray | None:
    """*Optional.* A numpy array sharing the memory of ``array``, if the host can address it.

    Backends without it get ``.numpy()`` as a copy through :func:`kernelbay_copy`.

    :param array: an array of this backend.
    :return: a numpy view of ``array.shape`` and ``array.dtype``, or ``None`` for "copy instead".

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_close_kernel(kernel: Kernel) -> None:
    """*Optional.* Release what the backend keeps for ``kernel`` (its loaded module).

    Called by :meth:`kernelbay.types.Kernel.close`, once per kernel; the kernel is not launched
    again. A module shared with other live kernels must stay loaded until the last of them is
    closed or collected. Without it, ``close()`` only drops the core's reference. Not on the
    hot path.

    :param kernel: a kernel this backend compiled.
    :return: ``None``.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_memory_stats(device: Device) -> MemoryStats:
    """*Optional.* The allocator's figures for ``device``.

    :param device: one of this backend's devices.
    :return: a :class:`~kernelbay.types.MemoryStats` (bytes active, peak, cached, limit).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_clear_cache(device: Device) -> None:
    """*Optional.* Release the memory the backend keeps cached for reuse.

    :param device: one of this backend's devices.
    :return: nothing; live buffers are untouched.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_from_external(obj: Any, device: Device | None) -> tuple[Any, tuple[int, ...], Any] | None:
    """*Optional.* Adopt a foreign array (DLPack, ``__cuda_array_interface__``...) without a copy.

    Called by :func:`kernelbay.asarray` for objects that are not numpy arrays, for each
    available backend in priority order (or only ``device``'s backend when one is given).

    :param obj: the foreign object.
    :param device: the requested device, or ``None``.
    :return: ``(handle, shape, dtype)`` for a zero-copy view, keeping ``obj`` alive through the
        handle; ``None`` if the object is not this backend's.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_to_dlpack(array: Array, stream: Any, max_version: tuple[int, int] | None) -> Any:
    """*Optional.* Export ``array`` as a DLPack capsule (``Array.__dlpack__``).

    :param array: an array of this backend.
    :param stream: the consumer's stream, as the DLPack protocol passes it.
    :param max_version: the highest DLPack version the consumer understands; ``(1, 0)`` or
        later allows a versioned capsule (which can say the memory is writable), ``None`` asks
        for the legacy capsule.
    :return: a PyCapsule.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_dlpack_device(array: Array) -> tuple[int, int]:
    """*Optional.* ``(device_type, device_id)`` for ``Array.__dlpack_device__``.

    :param array: an array of this backend.
    :return: the DLPack device type (``kDLCPU`` = 1, ``kDLCUDA`` = 2...) and the device ordinal.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_cuda_array_interface(array: Array) -> dict[str, Any]:
    """*Optional.* The ``__cuda_array_interface__`` (v3) dict of ``array``.

    :param array: an array of this backend.
    :return: the interface dict (shape, typestr, data, version 3, stream).
    :raises UnsupportedError: where the memory is not CUDA memory (``hasattr`` is then False).

    .. versionadded:: 0.1
    """
