"""The contract between kernelbay's core and its backends.

A backend is a module (or any object) whose functions are decorated with :data:`hookimpl` and
named after the specs below. Its distribution announces it in the entry-point group
``kernelbay.backends``; the entry-point name is the backend's name::

    [project.entry-points."kernelbay.backends"]
    cpu = "kernelbay_cpu.plugin"

Rules every backend follows:

* A backend's implementations are only ever called for its own devices, kernels and buffers:
  the core routes each call to the one backend that owns the object. Never ask "is this mine?".
* Each spec below says what it is:

  - **Required**: every backend implements it (listed in :data:`REQUIRED_HOOKS`); a backend
    without one is marked broken when it loads.
  - **Optional**: may be left out; the spec names the fallback the core uses instead (often
    :class:`~kernelbay.errors.UnsupportedError` when a user asks for that capability). The
    fallbacks are written once, in :mod:`kernelbay.fallbacks`, which belongs to this contract.
  - **Hot path**: the core binds the backend's function once and calls it positionally, in the
    order of the spec's parameters (allocate, free, copy, memset, launch). Implement every
    parameter of a hot-path spec, in order, or the core falls back to the slower keyword call
    through pluggy. Every other hook is bound the same way but is not timed.
  - **Direct** (optional, for ``allocate``, ``free``, ``launch`` and ``graph_replay``): the
    implementing function may carry an attribute ``kernelbay_direct``, a function of no arguments that returns a
    callable with the same positional parameters and the same behaviour (typically written in
    C, so that no Python frame runs), or ``None`` to keep the hook itself. The core asks for it
    once the backend's device probe has succeeded (so it may load compiled helpers) and calls
    the result instead of the hook while no extension wraps that hook. An exception from it is
    logged on ``kernelbay.plugins`` and the hook is kept. The conformance suite runs with
    whatever the backend returns. Where ``allocate``, ``free``, ``launch`` or ``graph_replay``
    is direct, the core's own frames around it (``kb.buffer``, ``kb.empty``, ``Buffer.close``,
    ``Kernel.launch``, ``Graph.replay``) run as C too (:mod:`kernelbay._fronts`); the direct
    callable gets the same arguments as the hook would (the device's default
    :class:`kernelbay.Stream` given explicitly may arrive as ``None``: treat both alike), and
    calls the core's C fronts cannot serve reach it through the Python functions as before.
* Expected failures raise :mod:`kernelbay.errors` types. Anything else is reported as a bug in
  the backend.
* Heavy imports (drivers, jax) happen inside the hooks, not at module import: ``kernelbay_backend``
  must be cheap; ``kernelbay_devices`` is the first hook that may touch a driver.

Streams (:mod:`kernelbay.streams`). Every ``stream`` argument of a hook is what the user passed,
with ``None`` resolved to the thread's current stream where one is set: ``None`` (the device's
default stream), a :class:`kernelbay.Stream` of this backend's device (its ``handle`` is what
your ``kernelbay_stream_create`` or ``kernelbay_default_stream`` returned), or any object your
backend documents (CUDA: ``__cuda_stream__``). A :class:`kernelbay.Stream` whose handle is
``None`` (those hooks left out, or returning ``None``) reaches launch, copy, memset and
synchronize as ``None``: such streams are all the device's one in-order stream.

The ordering rules (the conformance suite checks each one and names it when it fails):

* *one stream*: work on one stream runs in the order it was queued.
* *default stream before user streams*: work queued on a user stream starts after the work
  queued earlier on the device's default stream (``stream=None``): a ``kb.zeros`` fill, a copy
  or a launch on the default stream, then a launch on a user stream, must not race.
* *user streams before the default stream*: work queued on the default stream starts after the
  work queued earlier on every user stream of the device (CUDA's legacy default stream with
  blocking streams behaves so; a backend whose queues are independent records an event on each
  user stream and makes the default stream wait for them).
* *host reads*: ``kernelbay_copy`` into a numpy array with ``stream=None``,
  ``kernelbay_host_view``, and ``kernelbay_synchronize`` with ``stream=None`` see every write
  queued before them on every stream of the device.
* *freed memory*: memory freed while queued work may still use it is not handed out again
  before that work is done (:func:`kernelbay_free`), and a loop that frees and allocates more
  than fits at once still runs.
* *events on the default stream*: ``kernelbay_event_record`` is called with the default
  :class:`kernelbay.Stream` too (its ``handle`` is what ``kernelbay_default_stream`` returned, or
  ``None`` without that hook); the event completes when the default stream's earlier work has.
* *failed work*: a failure of queued work is raised as :class:`~kernelbay.errors.LaunchError`
  by the next ``kernelbay_synchronize``, ``kernelbay_event_synchronize`` or
  ``kernelbay_stream_query`` that covers it; ``kernelbay_event_query`` does not block and says
  ``True`` once that work has ended, failed or not (a driver that reports the failure there,
  as CUDA's does, may raise ``LaunchError`` instead).

Graphs (:mod:`kernelbay.graphs`). The core records launches, copies and memsets into
:class:`kernelbay.graphs.Step` values with their dependencies (from the buffers each reads and
writes) and hands them to ``kernelbay_graph_build``; without it a replay runs the steps in order
through the ordinary hooks.

Extensions (tracers, profilers) register plugins with :func:`kernelbay.register` holding
``wrapper=True`` implementations of any hook; while one is registered, the core routes calls
through pluggy so the wrapper runs. A pluggy call costs about 5 us, so a wrapper may also offer
a positional form for the hot path: an attribute ``kernelbay_positional`` on the implementing
function, ``(plugin, inner, binding) -> callable``, returning a function that takes the spec's
parameters positionally and calls ``inner`` with them. When every wrapper of a hook offers one,
the core chains those direct calls instead of calling pluggy (:mod:`kernelbay.tracing` does).
"""

# The specs are declarations: pluggy reads their signatures and never calls them, so a spec's
# body is its docstring. pyproject.toml turns mypy's empty-body check off for this module.
# pyright: reportReturnType=false

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from .graphs import Step
    from .streams import Event, Stream
    from .types import Array, BackendSpec, Buffer, Device, Kernel, MemoryStats, Source

#: The version of this contract. A backend declares the version it was built for in
#: :class:`~kernelbay.types.BackendSpec` *as a literal* (``api_version=1``), never as this
#: constant, which would compare the core with itself. A different version marks the backend
#: broken, with advice naming what to upgrade: kernelbay for a newer one, the backend for an
#: older one. Hooks added in a later kernelbay release (``.. versionadded::``) are optional and
#: keep this number; a backend that implements them needs that release, which its dependency
#: pin says (``kernelbay>=0.2,<0.3`` for the 0.2 hooks). Version 1 is kernelbay 0.1 and 0.2.
API_VERSION = 1

hookspec = pluggy.HookspecMarker("kernelbay")
hookimpl = pluggy.HookimplMarker("kernelbay")

#: Hooks every backend must implement (each spec's docstring says *Required*).
REQUIRED_HOOKS = (
    "kernelbay_backend",
    "kernelbay_devices",
    "kernelbay_allocate",
    "kernelbay_free",
    "kernelbay_copy",
    "kernelbay_compile",
    "kernelbay_launch",
    "kernelbay_synchronize",
)


# --- identity and discovery ------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_backend() -> BackendSpec:
    """*Required.* Declare the backend: name, priority, accepted languages, API version.

    Called once when the backend is loaded. Must not import drivers or frameworks.

    :return: a :class:`~kernelbay.types.BackendSpec` whose ``name`` equals the entry-point name.
        A reference or debug backend declares ``priority`` 0 or below: it is never chosen
        unless named (``*`` and the default selection skip it).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_devices() -> Sequence[Device]:
    """*Required.* Probe the machine and announce the backend's devices.

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
    """*Required, hot path.* Allocate ``nbytes`` of device memory.

    :param device: one of this backend's devices.
    :param nbytes: the size, >= 0 (the core checks). Zero must work.
    :return: the backend's handle for the memory, stored as ``Buffer.handle``; never ``None``.
    :raises OutOfMemoryError: when the memory cannot be had, with the allocator's figures.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_free(device: Device, handle: Any) -> None:
    """*Required, hot path.* Release memory from :func:`kernelbay_allocate`. Called once per handle.

    May run from a garbage-collection finaliser: must not raise for a live handle. Memory that
    work queued on a stream may still use must not be handed out again before that work is done
    (stream-ordered memory: keep the block aside until an event recorded at free completes).
    A driver that defers releases itself until queued work ends (OpenCL's ``clReleaseMemObject``)
    satisfies this by releasing at once: the driver keeps the memory aside for you. Either way
    memory freed is available again once the work that used it ends: an allocation after frees
    must not fail for memory the backend is still holding (the suite allocates 256 MiB, 4 MiB at
    a time, freeing each).

    :param device: the device it was allocated on.
    :param handle: the handle ``kernelbay_allocate`` returned (or the latest one the backend
        stored into ``Buffer.handle``).

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_copy(dst: Buffer | np.ndarray, src: Buffer | np.ndarray, nbytes: int, stream: Any) -> None:
    """*Required, hot path.* Copy ``nbytes`` from ``src`` to ``dst``, in order on ``stream``.

    Each side is either a :class:`~kernelbay.types.Buffer` of this backend or a C-contiguous
    numpy array in host memory; at least one side is a Buffer. The core has already checked
    sizes, dtypes and that both buffers are alive. Copies between two backends are done by the
    core through host memory and never reach this hook.

    :param dst: destination.
    :param src: source.
    :param nbytes: bytes to copy (<= both sizes).
    :param stream: ``None`` (the default stream), a :class:`~kernelbay.Stream`, or a stream the
        backend documents. A copy into a numpy array must have completed when the hook returns,
        on any stream (queue it, then wait for it); with ``stream=None`` it also sees every write
        queued before it on every stream. A copy from a numpy array may read it at any time
        until the copy has run on its stream (hold a reference until then; the cpu backend's
        asynchronous streams read it then, cuda's staged path before returning): users wait for
        the stream before writing to that array.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_memset(dst: Buffer, value: int, nbytes: int, stream: Any) -> None:
    """*Optional, hot path.* Set the first ``nbytes`` bytes of ``dst`` to the byte ``value``.

    Backends without it get :func:`kernelbay.zeros` as a copy from a zeroed host array.

    :param dst: a live buffer of this backend.
    :param value: the byte value, 0..255.
    :param nbytes: how many bytes, <= ``dst.nbytes``.
    :param stream: as for :func:`kernelbay_copy`.

    .. versionadded:: 0.1
    """


# --- code -------------------------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_compile(device: Device, source: Source) -> Any:
    """*Required.* Compile (or load) ``source`` for ``device``.

    The core has checked that ``source.lang`` is one of the backend's languages. Backends cache
    compiled modules in process and on disk (:mod:`kernelbay.cache`).

    A user may call it from several threads at once (the conformance suite does).

    :param device: the target device.
    :param source: the kernel source.
    :return: the backend's handle for the compiled kernel, stored as ``Kernel.handle``. It may
        carry ``profile_note``, a short string saying how the kernel runs (the cpu backend:
        its runner and why), which ``kernelbay profile`` prints beside the kernel's figures.
    :raises CompileError: with the compiler's full log and the source lines it points at.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_launch(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> Any:
    """*Required, hot path.* Queue a launch of ``kernel`` on ``stream``. Keep it lean.

    :param kernel: a :class:`~kernelbay.types.Kernel` this backend compiled.
    :param grid: as the user passed it (int or tuple); normalise with
        :func:`kernelbay.types.dim3`.
    :param block: likewise, or ``None`` for the backend's choice.
    :param args: the kernel's arguments, unconverted: kernelbay buffers/arrays, numpy scalars,
        Python numbers, or anything the backend documents. A :class:`kernelbay.Array` is a
        :class:`kernelbay.Buffer` with ``dtype`` and ``shape``; ``checked_handle()`` of either is
        the backend's handle (from :func:`kernelbay_allocate`) for the whole allocation. A value
        for a scalar parameter whose type the backend knows (a C parameter, an annotated Python
        one) is checked with :func:`kernelbay.argrules.check_scalar`, the one table of kinds,
        sizes and ranges every backend applies: out of range is ``InvalidArgumentError``; the
        wrong kind or size, ``None``, and a 0-d array (of any dtype: pass ``arr.item()`` or
        ``arr[()]``) are ``ArgumentTypeError``.
    :param shared_mem: dynamic shared memory per block, in bytes.
    :param stream: as for :func:`kernelbay_copy`.
    :return: anything the backend documents (usually ``None``).
    :raises InvalidArgumentError: for a bad geometry, wrong argument count, size or type, or a
        buffer of another device -- before any native code runs.
    :raises LaunchError: when the launch fails.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_synchronize(device: Device, stream: Any) -> None:
    """*Required.* Block until queued work has finished.

    :param device: the device.
    :param stream: a stream (as for :func:`kernelbay_copy`), or ``None`` for all work on every
        stream of the device.
    :raises LaunchError: if queued work failed.

    .. versionadded:: 0.1
    """


# --- optional capabilities --------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_host_view(array: Array) -> np.ndarray | None:
    """*Optional.* A numpy array sharing the memory of ``array``, if the host can address it.

    Backends without it get ``.numpy()`` as a copy through :func:`kernelbay_copy`. The view is a
    host read: first wait for every write queued on any stream of the device.

    :param array: an array of this backend.
    :return: a numpy view of ``array.shape`` and ``array.dtype``, or ``None`` for "copy instead".

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_host_empty(device: Device, nbytes: int) -> np.ndarray | None:
    """*Optional.* A new host array of ``nbytes`` bytes that a copy from ``device`` will fill.

    The core asks for it where it makes the host array a device-to-host copy lands in
    (``Array.numpy()``, ``np.asarray(array)``, ``np.array(array)``) when there is no host
    view, and then calls :func:`kernelbay_copy` into it with ``stream=None``. A backend returns
    memory its copies fill fastest (CUDA: page-locked memory from a pool). The array goes to
    the user as an ordinary numpy array: writable, C-contiguous, owned by the user as long as
    any view of it lives, and safe to keep after the device is gone (no use of it may need the
    backend again). The fallback (left out, or ``None`` returned): ``np.empty``.

    :param device: the device the copy comes from.
    :param nbytes: the size in bytes (the core views it as the array's shape and dtype).
    :return: a 1-d ``uint8`` numpy array of exactly ``nbytes`` bytes, or ``None``.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_compile_to_cache(device: Device, source: Source) -> None:
    """*Optional* (fallback: :func:`kernelbay_compile`, its handle dropped). Compile ``source`` for ``device`` into the disk cache only, so that a later
    ``kernelbay_compile`` of the same source in any process finds it there.

    ``kernelbay precompile`` and the tuner's compile phase call it in worker processes, one
    compile after another per process. Implement it when a compile can skip what a launch
    needs: the cuda backend runs NVRTC (and Triton) here without creating a driver context or
    loading a module, which makes a worker process cost an import instead of an import and a
    context. Not on the hot path.

    Implementing it also promises that a compile of a *function* source (``Source.code`` a
    Python function, e.g. Triton's) lands on disk where another process finds it: the tuner
    then compiles such sources in its pool too (the function passed by module and name). With
    the fallback, function sources compile in the tuner's timing worker, one after another. The
    conformance suite checks the promise on the backend's ``function_source()``: compiled in a
    spawned worker, then found on disk by ``kb.compile`` in the suite's process
    (docs/authoring-a-backend.md, section 8).

    :param device: the target device (its properties give the target, e.g. the compute
        capability).
    :param source: the kernel source, in one of the backend's languages (the core checks).
    :return: ``None``.
    :raises CompileError: as :func:`kernelbay_compile` does.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_close_kernel(kernel: Kernel) -> None:
    """*Optional* (fallback: nothing; ``close()`` only drops the core's reference). Release what
    the backend keeps for ``kernel`` (its loaded module).

    Called by :meth:`kernelbay.types.Kernel.close`, once per kernel; the kernel is not launched
    again (the core refuses, and so does a graph that recorded it). A module shared with other
    live kernels must stay loaded until the last of them is closed or collected. Launches
    already queued must still run: release the code only once they have finished (the cuda
    backend synchronizes the kernel's context, ``cuCtxSynchronize``, before ``cuModuleUnload``;
    a cpu launch queued on a stream holds the library, unloaded after the last reference goes).
    Without it, ``close()`` only drops the core's reference. Not on the hot path.

    :param kernel: a kernel this backend compiled.
    :return: ``None``.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_memory_stats(device: Device) -> MemoryStats:
    """*Optional* (fallback: ``UnsupportedError``). The allocator's figures for ``device``.

    :param device: one of this backend's devices.
    :return: a :class:`~kernelbay.types.MemoryStats` (bytes active, peak, cached, limit); blocks
        freed but kept aside until a stream's work is done count as cached. ``counters`` may
        hold the backend's own cumulative counts, which ``kernelbay profile`` prints beside the
        allocator's figures: say there what costs time that a user can avoid (cuda counts frees
        that waited on cross-stream events). A counter is named in ``snake_case``
        (``[a-z][a-z0-9_]*``), its value is a non-negative ``int`` (not ``bool``) that never
        decreases while the process runs (a counter present once stays present), and the
        backend documents each name in its README. A backend with none returns an empty
        mapping (the default). The conformance suite checks all but the documentation.

    .. versionadded:: 0.1
    .. versionchanged:: 0.2 ``MemoryStats.counters``.
    """


@hookspec(firstresult=True)
def kernelbay_clear_cache(device: Device) -> None:
    """*Optional* (fallback: ``UnsupportedError``). Release the memory kept cached for reuse.

    :param device: one of this backend's devices.
    :return: nothing; live buffers are untouched.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_from_external(obj: Any, device: Device | None) -> tuple[Any, tuple[int, ...], Any] | None:
    """*Optional* (fallback: ``None``). Adopt a foreign array (DLPack, CUDA array interface) without a copy.

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
    """*Optional* (fallback: ``UnsupportedError``). Export ``array`` as a DLPack capsule (``__dlpack__``).

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
    """*Optional* (fallback: ``UnsupportedError``). ``(device_type, device_id)`` for ``__dlpack_device__``.

    :param array: an array of this backend.
    :return: the DLPack device type (``kDLCPU`` = 1, ``kDLCUDA`` = 2...) and the device ordinal.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def kernelbay_cuda_array_interface(array: Array) -> dict[str, Any]:
    """*Optional* (fallback: no attribute). The ``__cuda_array_interface__`` (v3) dict of ``array``.

    :param array: an array of this backend.
    :return: the interface dict (shape, typestr, data, version 3, stream).
    :raises UnsupportedError: where the memory is not CUDA memory (``hasattr`` is then False).

    .. versionadded:: 0.1
    """


# --- streams and events (optional; see kernelbay.streams) --------------------------------


@hookspec(firstresult=True)
def kernelbay_default_stream(device: Device) -> Any:
    """*Optional* (fallback: ``None``). The handle of ``device``'s default stream.

    Stored as ``dev.default_stream.handle``; the core never closes it.

    :param device: one of this backend's devices.
    :return: the backend's object for the default stream (CUDA: a stream object with handle 0).

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_stream_create(device: Device, priority: int) -> Any:
    """*Optional* (fallback: ``None``, every stream is the device's one in-order stream).

    Create a stream: work queued on it runs in order, and may overlap work on other streams.
    Called by ``dev.stream(priority)``; the result is stored as ``kb.Stream.handle``.

    :param device: one of this backend's devices.
    :param priority: the user's priority, lower is more urgent; ignore it if you have none.
    :return: the backend's stream object. It should release itself when collected.
    :raises OutOfMemoryError: when no stream can be had.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_stream_destroy(device: Device, handle: Any) -> None:
    """*Optional* (fallback: nothing). Release a stream from :func:`kernelbay_stream_create`.

    Called once, by ``Stream.close()``; work already queued on it must still complete.

    :param device: the stream's device.
    :param handle: what ``kernelbay_stream_create`` returned.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_stream_query(device: Device, stream: Stream) -> bool:
    """*Optional* (fallback: synchronize the device, then ``True``). Whether ``stream`` is idle.

    :param device: the stream's device.
    :param stream: a :class:`~kernelbay.Stream` of this backend.
    :return: ``True`` when all work queued on it has finished; must not block.
    :raises LaunchError: if queued work failed.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_stream_wait(device: Device, stream: Stream, event: Event) -> None:
    """*Optional* (fallback: nothing; with one in-order stream the order already holds).

    Make work queued on ``stream`` after this call wait until ``event`` completes, without
    blocking the host.

    :param device: the device of both.
    :param stream: a :class:`~kernelbay.Stream` of this backend.
    :param event: a :class:`~kernelbay.Event` of this backend (its ``handle`` is yours).

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_event_record(device: Device, stream: Stream) -> Any:
    """*Optional* (fallback: wait for the device, keep the host time; the event is complete).

    Record an event on ``stream``: it completes when the work queued there so far has.

    :param device: the stream's device.
    :param stream: a :class:`~kernelbay.Stream` of this backend; the default stream too
        (``stream.is_default``), whose ``handle`` is ``kernelbay_default_stream``'s result or
        ``None`` where that hook is left out.
    :return: the backend's event object, stored as ``kb.Event.handle``.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_event_synchronize(device: Device, event: Event) -> None:
    """*Optional* (fallback: nothing, events are complete). Block until ``event`` completes.

    :param device: the event's device.
    :param event: a :class:`~kernelbay.Event` of this backend.
    :raises LaunchError: if the work before it failed.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_event_query(device: Device, event: Event) -> bool:
    """*Optional* (fallback: ``True``). Whether ``event`` has completed, without blocking.

    :param device: the event's device.
    :param event: a :class:`~kernelbay.Event` of this backend.
    :return: ``True`` once the work before it has ended, succeeded or failed (the failure is
        raised by the next synchronize); must not block. A driver that reports the failure
        here may raise :class:`~kernelbay.errors.LaunchError` instead.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_event_elapsed(device: Device, start: Event, end: Event) -> float:
    """*Optional* (fallback: the host times of the fallback's records). Time between events.

    The core has waited for ``end``.

    :param device: the events' device.
    :param start: the earlier event.
    :param end: the later event (completed).
    :return: milliseconds from ``start`` to ``end``.
    :raises UnsupportedError: for events that cannot be timed.

    .. versionadded:: 0.2
    """


# --- graphs (optional; see kernelbay.graphs) ---------------------------------------------


@hookspec(firstresult=True)
def kernelbay_kernel_access(kernel: Kernel) -> Sequence[str | None] | None:
    """*Optional* (fallback: ``None``, every buffer argument is read and written).

    How ``kernel`` uses each parameter, for graph dependencies.
    :func:`kernelbay.csource.pointer_access` reads it from C-like source text.

    :param kernel: a kernel this backend compiled.
    :return: one entry per *kernel parameter*, in the kernel's parameter order (which is the
        order of a launch's ``args``): ``"r"`` (only read, e.g. a pointer to ``const``), ``"w"``,
        ``"rw"``, or ``None`` for a value; or ``None`` when unknown.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_graph_build(device: Device, steps: Sequence[Step]) -> Any:
    """*Optional* (fallback: ``None``, each replay runs the steps in order through launch, copy
    and memset on the replay's stream).

    Build a native graph from recorded steps. A step may start once the steps in its ``deps``
    have finished; steps without a path between them may run concurrently. Convert arguments
    now: a replay should cost no Python per step. Called again (after
    :func:`kernelbay_graph_destroy`) when the dependencies change.

    :param device: the device the steps were recorded on.
    :param steps: :class:`~kernelbay.graphs.Step` values in recorded order (a valid order of
        their ``deps``); a step's buffers stay open while the graph is replayed (the core checks).
        A step's fields: ``index`` (its position among *all* steps), ``kind`` (``"launch"``,
        ``"copy"``, ``"memset"``), ``stream``, ``deps`` (indices of earlier steps), ``reads``,
        ``writes``; a launch's ``kernel``, ``grid``, ``block``, ``args``, ``shared_mem`` (as the
        user gave them: ``block`` may be ``None``); a copy's ``dst``, ``src`` (either may be a
        host numpy array), ``nbytes``; a memset's ``dst``, ``value``, ``nbytes``.
    :return: the backend's graph object, or ``None`` to use the fallback for these steps.
    :raises UnsupportedError: / :raises InvalidArgumentError: as launch, copy and memset would.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_graph_replay(device: Device, graph: Any, stream: Any) -> None:
    """*Optional* (fallback: never called; needed when :func:`kernelbay_graph_build` returns a
    graph). Queue one replay.

    The replay as a whole is ordered on ``stream``: it starts after work queued there before,
    and work queued there after waits for all of it.

    :param device: the graph's device.
    :param graph: what ``kernelbay_graph_build`` returned.
    :param stream: as for :func:`kernelbay_copy`.
    :raises LaunchError: when the replay cannot be queued or (synchronous backends) fails.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_graph_update(device: Device, graph: Any, step: Step) -> bool:
    """*Optional* (fallback: ``False``, the core destroys and builds the graph again).

    A launch step got new arguments (``step.args``) of the same kernel and geometry, and the
    same buffers read and written (else the core rebuilds). Change them in place. The user's
    ``g.update(i, ...)`` counts *launches* only (``g.kernels[i]``), while ``step.index`` counts
    every step, copies and memsets included: find your node by ``step.index`` (or by the Step
    itself), never by ``i``.

    :param device: the graph's device.
    :param graph: what ``kernelbay_graph_build`` returned.
    :param step: the changed launch step.
    :return: ``True`` when updated in place; ``False`` to have the graph rebuilt.
    :raises InvalidArgumentError: for arguments the kernel cannot take.

    .. versionadded:: 0.2
    """


@hookspec(firstresult=True)
def kernelbay_graph_destroy(device: Device, graph: Any) -> None:
    """*Optional* (fallback: nothing). Release a graph from :func:`kernelbay_graph_build`.

    May run from a finaliser; replays already queued must still complete.

    :param device: the graph's device.
    :param graph: what ``kernelbay_graph_build`` returned.

    .. versionadded:: 0.2
    """


# --- module globals ---------------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_module_global(kernel: Kernel, name: str, host: np.ndarray | None, write: bool) -> int | None:
    """*Optional* (fallback: ``UnsupportedError`` naming the backend). Read or write a
    ``__constant__`` or ``__device__`` variable of ``kernel``'s module from the host (what
    ``cudaMemcpyToSymbol`` and CuPy's ``RawModule.get_global`` do), for
    :meth:`kernelbay.Kernel.set_global` and :meth:`~kernelbay.Kernel.get_global`. Not hot path.

    The copy is ordered after all work queued on ``kernel``'s device and has finished when this
    returns (launches queued afterwards see a written value). The core checks nothing about
    sizes: the backend raises :class:`~kernelbay.errors.InvalidArgumentError` when ``host`` is
    larger than the variable.

    :param kernel: a kernel this backend compiled (not closed).
    :param name: the variable's symbol (a global-namespace C++ variable's name is its symbol).
    :param host: ``None`` to ask only for the size; else a C-contiguous numpy array, the bytes
        to write (``write``) or the buffer to read into (its first ``host.nbytes`` bytes).
    :param write: copy host to device (``True``) or device to host (``False``).
    :return: the variable's size in bytes, or ``None`` when the module has no such symbol.

    .. versionadded:: 0.2
    """


# --- tracing ----------------------------------------------------------------------------


@hookspec(firstresult=True)
def kernelbay_device_timer() -> Any:
    """*Optional* (fallback: ``None``, the trace has host spans only). An object that times this
    backend's launches and copies on the device, for :func:`kernelbay.trace`.

    Called once per backend by each trace, when it starts (never on the hot path while tracing
    is off). Backends without it get host spans only: the trace shows when each call was made
    and how long it took on the host, and no device track.

    The object has two methods; both run only while a trace is recording:

    * ``mark(device, stream) -> Any``: called just before and just after the backend's launch
      or copy hook (and so on the hot path while tracing: keep it to a few hundred nanoseconds).
      Returns an opaque mark, e.g. a CUDA event recorded on ``stream``, or ``None`` where it
      cannot mark; it must not raise (the launch it watches reports its own errors).
    * ``span(start, end) -> tuple[int, int] | None``: the device-side begin and end of the work
      between two marks, in :func:`time.perf_counter_ns` units of this process (map device
      clocks onto it). Called off the hot path, in batches and when the trace is written; may
      block until that work has finished. ``None`` when it cannot tell (either mark may be
      ``None``). Each mark is passed to ``span`` at most once, so it can be recycled there.
    * optionally ``resolve(starts, ends, host_t0s) -> (begins, ends)``: ``span`` for a whole
      batch in one call (lists of marks, and the host clock at each call's start, to which a
      begin is clamped); returns two lists, ``None`` where unknown. Without it the tracer calls
      ``span`` per pair.
    * optionally ``host_clock = True``: the marks already are the device span's ends in
      :func:`time.perf_counter_ns` units (a timer that waits for the work in ``mark``, as the
      tpu backend's does), so ``span`` is never called.
    * optionally ``synchronous = True``: the work has finished when the backend's call returns
      (the cpu backend), so the device span is the call itself; neither method is called.
    * optionally ``close() -> None``: called once when the trace that asked for the timer ends,
      after its last ``resolve``/``span``; release what the timer holds for a trace (the cuda
      backend's CUPTI timer turns CUPTI's activities off). The next trace calls this hook
      again. An error it raises is logged on ``kernelbay.trace``, not raised. A timer keeps no
      other link to the tracer: a backend never imports the tracing package.

    Marks should be numbers (event handles, clock values): the tracer keeps them until the
    next batch, and objects there would keep garbage collection busy.

    ``stream`` is what the user passed (``None`` for the default stream); ``device`` is the
    buffer's or kernel's device.

    :return: the timer object, or ``None`` when the backend cannot time device work here.
    A timer that cannot work returns ``None`` (this hook raises nothing). A timer method that raises
        drops device timing for the rest of the trace (logged on ``kernelbay.trace``).

    .. versionadded:: 0.2
    """
