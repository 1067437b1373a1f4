"""Device memory as values with state: :class:`Buffer` and :class:`Array`.

Each holds its backend's binding and calls it (allocate, free, copy, host view, DLPack); numpy is
imported only where an array's contents are touched, so ``import kernelbay`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import attrs

from .device import Device, registry
from .errors import UseAfterFreeError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ._binding import Binding

__all__ = ["Array", "Buffer"]


#: How many buffers were closed in this process: a recorded graph re-checks its buffers at replay
#: only when this moved since its last check (one compare per replay, not one per buffer).
closes = 0


@attrs.define(eq=False, slots=True, weakref_slot=True)
class Buffer:
    """Untyped device memory owned by kernelbay.

    Freed by :meth:`close`, on leaving a ``with`` block, or when collected. Any use after
    ``close()`` raises :class:`~kernelbay.errors.UseAfterFreeError`.

    :ivar device: where the memory lives.
    :ivar nbytes: its size.
    :ivar handle: the backend's own object for the memory (a pointer, a ctypes buffer, a JAX
        array...). Backends may replace it (the TPU backend swaps in a kernel's result).
    """

    device: Device
    nbytes: int
    handle: Any
    _binding: Binding = attrs.field(repr=False, alias="binding")

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` freed the memory (any later use raises :class:`UseAfterFreeError`)."""
        return self.handle is None

    def checked_handle(self) -> Any:
        """The backend handle; raises :class:`UseAfterFreeError` once closed."""
        h = self.handle
        if h is None:
            raise UseAfterFreeError(f"{type(self).__name__} on {self.device} was used after close()")
        return h

    def close(self) -> None:
        """Give the memory back to the backend. Closing twice is harmless."""
        h = self.handle
        if h is not None:
            global closes
            closes += 1
            self.handle = None
            self._binding.free(self.device, h)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _clone(self) -> Buffer:
        """A new buffer on the same device with the same contents (through the backend binding)."""
        b = self._binding
        self.checked_handle()
        out = Buffer(self.device, self.nbytes, b.allocate(self.device, self.nbytes), b)
        b.copy(out, self, self.nbytes, None)
        return out

    def __copy__(self) -> Buffer:
        # Two objects owning one allocation would free it twice: a copy copies the memory.
        return self._clone()

    def __deepcopy__(self, memo: dict[int, Any]) -> Buffer:
        return self._clone()

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a kernelbay {type(self).__name__} cannot be pickled: it is device memory of this process. "
            "Pickle a kb.Array (it travels by value), or the numpy data (buf contents via kb.copy)"
        )

    def __del__(self) -> None:
        h = self.handle
        if h is not None:
            self.handle = None
            try:
                self._binding.free(self.device, h)
            except Exception:  # interpreter shutdown or a dead device: nothing left to tell
                pass


@attrs.define(eq=False, slots=True, weakref_slot=True)
class Array(Buffer):
    """A C-contiguous typed array in device memory (a :class:`Buffer` with shape and dtype)."""

    shape: tuple[int, ...] = ()
    dtype: np.dtype = None  # type: ignore[assignment]  # always given: a default only to follow shape's

    @property
    def size(self) -> int:
        """The number of elements: the product of :attr:`shape` (1 for a 0-d array)."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def ndim(self) -> int:
        """The number of dimensions, ``len(shape)``."""
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        """The contents as a numpy array.

        Backends whose memory the host can address (cpu) return a view that shares memory;
        the others return a copy (after waiting for queued work that writes this array).
        """
        self.checked_handle()
        view = self._binding.host_view(self)
        if view is not None:
            return view
        out = self._host_out()
        self._binding.copy(out, self, self.nbytes, None)
        return out

    def _host_out(self) -> np.ndarray:
        """A new host array of this array's shape and dtype for a copy from the device: the
        backend's own host memory where it offers some (``kernelbay_host_empty``), else np.empty."""
        import numpy as np

        raw = self._binding.host_empty(self.device, self.nbytes)
        if raw is None:
            return np.empty(self.shape, self.dtype)
        return raw.view(self.dtype).reshape(self.shape)

    def __reduce__(self) -> Any:
        # By value: the contents travel as a host copy and land on the same device (backend and
        # index) in the receiving process.
        return (_array_from_host, (self.numpy().copy(), self.device))

    def _clone(self) -> Array:
        """A new array on the same device with the same contents (through the backend binding)."""
        b = self._binding
        self.checked_handle()
        out = Array(self.device, self.nbytes, b.allocate(self.device, self.nbytes), b, self.shape, self.dtype)
        b.copy(out, self, self.nbytes, None)
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """NumPy's protocol (NumPy 2 semantics, as ``np.asarray``/``np.array`` call it).

        ``copy=None``: a view where the host can address the memory (cpu), else a copy;
        ``copy=True``: always a new array that does not share memory (``np.array(a)``,
        ``np.copy(a)``); ``copy=False``: a view or ``ValueError``. ``dtype`` converts (a copy
        unless it is the array's own dtype).
        """
        import numpy as np

        self.checked_handle()
        same = dtype is None or np.dtype(dtype) == self.dtype
        view = self._binding.host_view(self)  # None where the host cannot address the memory
        if view is None:
            if copy is False:
                raise ValueError(f"a NumPy array of an Array on {self.device} needs a copy, and copy=False was given")
            out = self._host_out()
            self._binding.copy(out, self, self.nbytes, None)
            return out if same else out.astype(dtype)
        if not same:
            if copy is False:
                raise ValueError(f"converting {self.dtype} to {np.dtype(dtype)} needs a copy, and copy=False was given")
            return view.astype(dtype)
        return view.copy() if copy else view

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d kernelbay Array")
        return self.shape[0]

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        """Export through DLPack (the array API's protocol): zero-copy unless ``copy=True``, or
        ``dl_device`` asks for the host (``(1, 0)``, a copy unless the array lives there)."""
        src: Any = self
        if dl_device is not None and tuple(dl_device) != tuple(self.__dlpack_device__()):
            if tuple(dl_device)[:1] != (1,):
                raise BufferError(
                    f"cannot export an array of {self.device} to DLPack device {tuple(dl_device)}: only this "
                    "array's own device and the host (1, 0) are possible"
                )
            if copy is False:
                raise BufferError(f"exporting an array of {self.device} to the host needs a copy, and copy=False")
            host = self.numpy()
            return host.__dlpack__() if max_version is None else host.__dlpack__(max_version=max_version)
        if copy:
            src = self._clone()
        return src._binding.to_dlpack(src, stream, max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._binding.dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # AttributeError (so hasattr() is False) on backends that are not CUDA-like.
        try:
            return self._binding.cuda_array_interface(self)
        except NotImplementedError as exc:
            raise AttributeError("__cuda_array_interface__") from exc

    def __repr__(self) -> str:
        state = "closed" if self.handle is None else f"{self.nbytes} bytes"
        return f"kernelbay.Array(shape={self.shape}, dtype={self.dtype}, device={self.device}, {state})"


def _array_from_host(host: Any, device: Device) -> Array:
    dev = registry.device(str(device))  # the receiving process's own device of that name
    b = dev.binding
    out = Array(dev, host.nbytes, b.allocate(dev, host.nbytes), b, tuple(host.shape), host.dtype)
    b.copy(out, host, host.nbytes, None)
    return out
