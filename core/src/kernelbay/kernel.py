"""Compiled code as values: :class:`Kernel`, :class:`LaunchConfig` and :func:`dim3`.

``Kernel.launch`` is the launch hot path: with no current stream and no graph recording
(:data:`kernelbay.streams.intercept` is zero) it calls the backend's bound launch directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from . import streams as _streams
from .device import Device
from .errors import ArgumentTypeError, InvalidArgumentError, UnsupportedError, UseAfterFreeError
from .source import Source

if TYPE_CHECKING:  # pragma: no cover
    from ._binding import Binding
    from .memory import Buffer

__all__ = ["Kernel", "LaunchConfig", "dim3"]


def _index(v: Any) -> int:
    import operator

    return operator.index(v)


def dim3(value: Any, what: str = "grid") -> tuple[int, int, int]:
    """Normalise a grid or block size (int, or a tuple of 1 to 3 ints) to a 3-tuple.

    Backends call this on the launch path: it is kept to plain Python for speed.

    :raises InvalidArgumentError: for a size of zero or less, or more than three dimensions.
    """
    t = type(value)
    if t is tuple and len(value) == 3 and type(value[0]) is int and type(value[1]) is int and type(value[2]) is int:
        x, y, z = value
    elif t is int:
        x, y, z = value, 1, 1
    else:
        try:  # operator.index: 2.7, 255.9, '4' and inf are refused, never truncated
            dims = [_index(v) for v in (value if isinstance(value, (tuple, list)) else (value,))]
        except TypeError:
            raise ArgumentTypeError(
                f"{what} must be an int or a tuple of 1 to 3 ints, not {value!r} (floats and strings are not "
                "accepted: round explicitly, e.g. math.ceil(n / 256))"
            ) from None
        if not 1 <= len(dims) <= 3:
            raise InvalidArgumentError(f"{what} must have 1 to 3 dimensions, got {len(dims)}: {value!r}")
        x, y, z = (dims + [1, 1])[:3]
    if x < 1 or y < 1 or z < 1:
        raise InvalidArgumentError(f"{what} dimensions must all be >= 1, got {(x, y, z)}")
    return (x, y, z)


def _grid(value: Any) -> tuple[int, int, int]:
    return dim3(value, "grid")


def _block(value: Any) -> tuple[int, int, int] | None:
    return None if value is None else dim3(value, "block")


def _check_shared(_inst: object, _attr: attrs.Attribute, value: int) -> None:
    if not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"shared_mem must be an int >= 0, got {value!r}")


@attrs.frozen
class LaunchConfig:
    """A validated launch geometry, reusable across launches: ``k.launch(config=cfg, args=...)``.

    :ivar grid: blocks in x, y, z.
    :ivar block: threads per block in x, y, z, or ``None`` for the backend's choice.
    :ivar shared_mem: dynamic shared memory per block, in bytes.
    """

    grid: tuple[int, int, int] = attrs.field(converter=_grid)
    block: tuple[int, int, int] | None = attrs.field(default=None, converter=_block)
    shared_mem: int = attrs.field(default=0, validator=_check_shared)


#: How many kernels were closed in this process (see :data:`kernelbay.memory.closes`).
closes = 0


@attrs.define(eq=False, slots=True, weakref_slot=True)
class Kernel:
    """A compiled kernel bound to one device. Launch it with :meth:`launch`.

    :ivar device: the device it was compiled for.
    :ivar source: the source it came from.
    :ivar handle: the backend's compiled object.
    """

    device: Device
    source: Source
    handle: Any
    _binding: Binding = attrs.field(repr=False, alias="binding")

    @property
    def name(self) -> str:
        """The kernel's entry point (``Source.name``), or ``<kernel>`` when the source did not name one."""
        return self.source.name or "<kernel>"

    @property
    def jax(self) -> Any:
        """The kernel as a pure JAX function (arrays in, outputs returned), for backends whose
        compiled kernel offers one (``handle.jax``; the tpu backend's Pallas kernels).

        :raises UnsupportedError: the backend offers no JAX function.
        """
        fn = getattr(self.handle, "jax", None)
        if fn is None:
            raise UnsupportedError(
                f"kernel {self.name!r} on {self.device} has no JAX function; launch it with .launch()"
            )
        return fn

    def launch(
        self,
        grid: Any = None,
        block: Any = None,
        args: Sequence[Any] = (),
        shared_mem: int = 0,
        stream: Any = None,
        *,
        config: LaunchConfig | None = None,
        reads: Sequence[Buffer] | None = None,
        writes: Sequence[Buffer] | None = None,
    ) -> Any:
        """Queue one launch of the kernel on its device.

        :param grid: blocks (int or 1-3 tuple). Required unless ``config`` is given.
        :param block: threads per block; ``None`` lets the backend choose.
        :param args: kernel arguments, in the kernel's order: kernelbay arrays/buffers, numpy
            scalars, or Python numbers where the parameter's size makes them unambiguous.
        :param shared_mem: dynamic shared memory per block in bytes.
        :param stream: a :class:`kernelbay.Stream`, a stream the backend documents, or ``None``
            (the thread's current stream of the device, else its default stream).
        :param config: a :class:`LaunchConfig` instead of grid/block/shared_mem.
        :param reads: / :param writes: inside a graph recording, the buffers the launch reads
            and writes (instead of what the kernel's signature says); ignored outside one.
        :return: the backend's result; inside a graph recording, the recorded
            :class:`kernelbay.graphs.Step`.
        :raises InvalidArgumentError: for a bad geometry or bad arguments.
        :raises LaunchError: if the backend could not launch it.
        """
        if config is not None:
            grid, block, shared_mem = config.grid, config.block, config.shared_mem
        elif grid is None:
            raise InvalidArgumentError(f"launch of {self.name!r} needs grid= (or config=)")
        if self.handle is None:
            raise UseAfterFreeError(f"kernel {self.name!r} on {self.device} was launched after close()")
        if args is None:
            raise ArgumentTypeError(
                f"launch of {self.name!r}: args must be a sequence of arguments (use () for none), not None"
            )
        if _streams.intercept:  # some thread has a current stream or records a graph: streams.route
            return _streams.launch(self, grid, block, args, shared_mem, stream, reads, writes)
        if stream is not None and stream.__class__ is _streams.Stream and (stream.is_default or stream.handle is None):
            stream = None  # no current stream here: the default (or a stream the backend does not see) is None
        return self._binding.launch(self, grid, block, args, shared_mem, stream)

    __call__ = launch

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a compiled kernel ({self.name!r}) cannot be pickled: it is loaded code of this process. Pickle its "
            "kb.Source (kernel.source) and kb.compile it in the other process (the disk cache makes that quick)"
        )

    def __copy__(self) -> Kernel:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Kernel:
        return self

    def _global(self, name: str, host: Any, write: bool) -> int:
        if self.handle is None:
            raise UseAfterFreeError(f"kernel {self.name!r} on {self.device} was used after close()")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"a module global is named by a non-empty str, got {name!r}")
        size = self._binding.module_global(self, name, host, write)
        if size is None:
            raise InvalidArgumentError(
                f"the module of kernel {self.name!r} on {self.device} has no global {name!r}: declare it at "
                'namespace scope (__constant__ or __device__), and extern "C" or in the global namespace'
            )
        return size

    def global_nbytes(self, name: str) -> int:
        """The size in bytes of the ``__constant__``/``__device__`` variable ``name`` of this
        kernel's module.

        :raises InvalidArgumentError: the module has no such variable.
        :raises UnsupportedError: the backend cannot reach module globals.
        """
        return self._global(name, None, False)

    def set_global(self, name: str, value: Any) -> None:
        """Write ``value`` (anything ``numpy.asarray`` takes: give it the variable's dtype) to the
        module variable ``name`` (``cudaMemcpyToSymbol``), after the work queued on the device;
        launches after this see it. ``value`` may be smaller than the variable (its first bytes).

        :raises InvalidArgumentError: no such variable, or ``value`` is larger than it.
        :raises UnsupportedError: the backend cannot reach module globals.
        """
        import numpy as np  # deferred: the core imports numpy where used

        self._global(name, np.ascontiguousarray(value), True)

    def get_global(self, name: str, dtype: Any = "uint8", shape: Any = None) -> Any:
        """The module variable ``name`` as a new numpy array of ``dtype`` (read after the work
        queued on the device). ``shape`` defaults to all of the variable's bytes as ``dtype``.

        :raises InvalidArgumentError: no such variable, or ``shape`` is larger than it.
        :raises UnsupportedError: the backend cannot reach module globals.
        """
        import numpy as np  # deferred: the core imports numpy where used

        dt = np.dtype(dtype)
        if shape is None:
            shape = (self.global_nbytes(name) // dt.itemsize,)
        out = np.empty(shape, dt)
        self._global(name, out, False)
        return out

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` unloaded the kernel (a later launch raises :class:`UseAfterFreeError`)."""
        return self.handle is None

    def close(self) -> None:
        """Release the compiled module (once no other kernel of it is left); launching after
        this raises :class:`UseAfterFreeError`. Closing twice is harmless."""
        if self.handle is not None:
            global closes
            closes += 1
            try:
                self._binding.close_kernel(self)
            finally:
                self.handle = None

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
