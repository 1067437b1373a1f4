"""The values kernelbay passes between the user, the core and the backends.

Frozen attrs classes for values (:class:`Device`, :class:`Source`, :class:`LaunchConfig`,
:class:`BackendSpec`, :class:`MemoryStats`); ``attrs.define`` for things with state
(:class:`Buffer`, :class:`Array`, :class:`Kernel`). numpy is imported only where an array's
dtype or contents are touched, so ``import kernelbay`` stays cheap.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys as _sys
import types as _pytypes
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import attrs

from .errors import ArgumentTypeError, InvalidArgumentError, UseAfterFreeError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ._plugins import Binding

__all__ = [
    "BackendSpec",
    "Device",
    "Buffer",
    "Array",
    "Source",
    "Kernel",
    "LaunchConfig",
    "MemoryStats",
    "dim3",
]


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _pytypes.MappingProxyType(dict(value or {}))


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    # converter=tuple, typed (type checkers cannot infer tuple's element type as a converter)
    return tuple(value)


# --- backend and device -----------------------------------------------------------------


@attrs.frozen
class BackendSpec:
    """What a backend declares about itself (returned by ``kernelbay_backend``).

    :ivar name: the backend's name, equal to its entry-point name (``cuda``, ``cpu``...).
    :ivar priority: higher wins when the user lets kernelbay choose (cuda 300, tpu 200, cpu 100).
    :ivar languages: source languages accepted, most preferred first (``("cuda", "ptx")``).
    :ivar api_version: the core API version the backend was built for
        (:data:`kernelbay.hookspecs.API_VERSION`).
    :ivar description: one line for ``kernelbay info``.
    """

    name: str
    priority: int
    languages: tuple[str, ...] = attrs.field(converter=_str_tuple)
    api_version: int
    description: str = ""


@attrs.frozen
class Device:
    """One device of one backend, e.g. ``cuda:0``. Compare and hash by ``(backend, index)``.

    :ivar backend: the backend's name.
    :ivar index: the device's ordinal within its backend.
    :ivar name: a human name ("NVIDIA H100 80GB HBM3", "x86_64, 16 threads").
    :ivar properties: backend-specific facts (compute capability, memory...), read-only.
    """

    backend: str
    index: int = 0
    name: str = attrs.field(default="", eq=False)
    properties: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, eq=False, repr=False)

    def __str__(self) -> str:
        return f"{self.backend}:{self.index}"

    def __reduce__(self) -> tuple[Any, ...]:
        # a value: pickles (to a spawn worker...) with its properties as a plain dict
        return (Device, (self.backend, self.index, self.name, dict(self.properties)))

    def synchronize(self, stream: Any = None) -> None:
        """Block until all work queued on every stream of this device (or on ``stream``) has finished."""
        # A sys.modules lookup, not an import statement: `from . import _plugins` costs about
        # 2 µs, more than a wait with nothing in flight should.
        _plugins = _sys.modules.get("kernelbay._plugins") or importlib.import_module("kernelbay._plugins")
        if _streams.intercept and _streams.capturing(self) is not None:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"cannot synchronize {self} while a graph records it; leave the `with` first")
        if type(stream) is _streams.Stream and stream.handle is None:
            stream = None
        _plugins.binding(self.backend).synchronize(self, stream)

    def stream(self, priority: int = 0) -> Any:
        """A new :class:`kernelbay.Stream` on this device (``with s:`` makes it current here)."""
        return _streams.Stream.create(self, priority)

    @property
    def default_stream(self) -> Any:
        """The device's default :class:`kernelbay.Stream` (what ``stream=None`` means)."""
        return _streams.Stream.default(self)

    def graph(self) -> Any:
        """A :class:`kernelbay.Graph` recording this device's work: ``with dev.graph() as g:``."""
        from . import _plugins
        from .graphs import Graph

        return Graph(self, _plugins.binding(self.backend))

    def memory_stats(self) -> MemoryStats:
        """The backend's allocator figures for this device (:class:`MemoryStats`)."""
        from . import _plugins

        return _plugins.binding(self.backend).memory_stats(self)

    def clear_cache(self) -> None:
        """Return memory the backend's allocator keeps cached for reuse to the device."""
        from . import _plugins

        _plugins.binding(self.backend).clear_cache(self)


@attrs.frozen
class MemoryStats:
    """Allocator figures in bytes. ``limit`` is ``None`` where the backend sets none."""

    active: int
    peak: int
    cached: int
    limit: int | None = None


# --- memory -----------------------------------------------------------------------------


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
    _b: Binding = attrs.field(repr=False, alias="binding")

    @property
    def closed(self) -> bool:
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
            self.handle = None
            self._b.free(self.device, h)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _clone(self) -> Buffer:
        """A new buffer on the same device with the same contents (through the backend binding)."""
        b = self._b
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
                self._b.free(self.device, h)
            except Exception:  # interpreter shutdown or a dead device: nothing left to tell
                pass


@attrs.define(eq=False, slots=True, weakref_slot=True)
class Array(Buffer):
    """A C-contiguous typed array in device memory (a :class:`Buffer` with shape and dtype)."""

    shape: tuple[int, ...] = ()
    dtype: np.dtype = None  # type: ignore[assignment]  # always given: a default only to follow shape's

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        """The contents as a numpy array.

        Backends whose memory the host can address (cpu) return a view that shares memory;
        the others return a copy (after waiting for queued work that writes this array).
        """
        import numpy as np

        self.checked_handle()
        view = self._b.host_view(self)
        if view is not None:
            return view
        out = np.empty(self.shape, self.dtype)
        self._b.copy(out, self, self.nbytes, None)
        return out

    def __reduce__(self) -> Any:
        # By value: the contents travel as a host copy and land on the same device (backend and
        # index) in the receiving process.
        return (_array_from_host, (self.numpy().copy(), self.device))

    def _clone(self) -> Array:
        """A new array on the same device with the same contents (through the backend binding)."""
        b = self._b
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
        view = self._b.host_view(self)  # None where the host cannot address the memory
        if view is None:
            if copy is False:
                raise ValueError(f"a NumPy array of an Array on {self.device} needs a copy, and copy=False was given")
            out = np.empty(self.shape, self.dtype)
            self._b.copy(out, self, self.nbytes, None)
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
        return src._b.to_dlpack(src, stream, max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._b.dlpack_device(self)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # AttributeError (so hasattr() is False) on backends that are not CUDA-like.
        try:
            return self._b.cuda_array_interface(self)
        except NotImplementedError as exc:
            raise AttributeError("__cuda_array_interface__") from exc

    def __repr__(self) -> str:
        state = "closed" if self.handle is None else f"{self.nbytes} bytes"
        return f"kernelbay.Array(shape={self.shape}, dtype={self.dtype}, device={self.device}, {state})"


def _array_from_host(host: Any, device: Device) -> Array:
    from ._plugins import binding
    from ._select import device as pick  # the receiving process's own device of that name

    dev = pick(str(device))
    b = binding(dev.backend)
    out = Array(dev, host.nbytes, b.allocate(dev, host.nbytes), b, tuple(host.shape), host.dtype)
    b.copy(out, host, host.nbytes, None)
    return out


# --- code -------------------------------------------------------------------------------

_SUFFIX_LANG = {
    ".cu": "cuda",
    ".cuh": "cuda",
    ".cpp": "c++",
    ".cc": "c++",
    ".cxx": "c++",
    ".ptx": "ptx",
    ".cubin": "cubin",
    ".fatbin": "fatbin",
}
_BINARY_LANGS = {"cubin", "fatbin"}


def _lang(value: object) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"Source lang must be a language name such as 'cuda' or 'c++', not {value!r}")
    return value.lower()


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        raise InvalidArgumentError(
            f"{what} holds a character UTF-8 cannot encode ({text[exc.start]!r}, a lone surrogate, at line "
            f"{line}); sources are UTF-8 text: remove it, or decode the file with errors='replace'"
        ) from None


def _check_headers(_inst: object, _attr: attrs.Attribute, value: Mapping[str, Any]) -> None:
    """Header names are relative paths inside the build directory: no absolute or ``..`` names."""
    for name, text in value.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise ArgumentTypeError(
                f"Source headers map names (str) to text (str), got {name!r}: {type(text).__name__}"
            )
        parts = name.replace("\\", "/").split("/")
        if (
            not name
            or "\0" in name
            or name.startswith(("/", "\\"))
            or (len(name) > 1 and name[1] == ":")
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise InvalidArgumentError(
                f"Source header name {name!r} is not a plain relative path: header names are what "
                '#include "name" says, such as "util.h" or "sub/util.h", with no absolute path, empty, "." '
                'or ".." parts; pass other directories with -I options instead'
            )
        _check_text(text, f"Source header {name!r}")


# Validators as functions passed to attrs.field(), not @field.validator methods: type checkers
# see a field as its value's type and cannot follow the decorator.
def _check_code(_inst: object, _attr: attrs.Attribute, value: object) -> None:
    if not isinstance(value, (str, bytes)) and not callable(value):
        raise ArgumentTypeError(f"Source code must be str, bytes or a function, not {type(value).__name__}")
    if isinstance(value, str):
        _check_text(value, "Source code")


def _check_lang(_inst: object, _attr: attrs.Attribute, value: str) -> None:
    if not value:
        raise InvalidArgumentError("Source lang must be a language name such as 'cuda' or 'c++'")


@attrs.frozen
class Source:
    """Kernel source in one language.

    :ivar code: the text (``str``), a binary image (``bytes``, for ``cubin``/``fatbin``), or a
        Python function (``pallas``; a ``@triton.jit`` function for ``triton``).
    :ivar lang: the language: ``cuda``, ``c++``, ``ptx``, ``cubin``, ``fatbin``, ``pallas``, or
        whatever a third-party backend accepts.
    :ivar name: the kernel's entry name (``None``: the backend's default, where it has one).
    :ivar options: compiler options, passed through (``-DN=4``, ``--std=c++17``, ``-O2``...).
    :ivar headers: extra header files by include name, for ``#include "name"``.
    :ivar name_expressions: template instantiations to compile, e.g. ``("axpy<float>",)``;
        launch one with ``kernel = kb.compile(src)["axpy<float>"]``... see the backend docs.
    :ivar meta: language-specific settings (Pallas output-only and in-place arguments, block
        specs...), read-only.
    """

    code: str | bytes | Callable[..., Any] = attrs.field(validator=_check_code)
    lang: str = attrs.field(converter=_lang, validator=_check_lang)
    name: str | None = None
    options: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    headers: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_mapping, hash=False, validator=_check_headers
    )
    name_expressions: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    meta: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, hash=False)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], lang: str | None = None, **kwargs: Any) -> Source:
        """Read a source file; ``lang`` defaults from the suffix (.cu, .cpp, .ptx, .cubin...)."""
        path = os.fspath(path)
        suffix = os.path.splitext(path)[1].lower()
        if lang is None:
            if suffix not in _SUFFIX_LANG:
                raise InvalidArgumentError(
                    f"cannot tell the language of {path!r} from its suffix; pass lang= "
                    f"(known suffixes: {', '.join(sorted(_SUFFIX_LANG))})"
                )
            lang = _SUFFIX_LANG[suffix]
        try:
            if lang.lower() in _BINARY_LANGS:
                with open(path, "rb") as fb:
                    code: str | bytes = fb.read()
            else:
                with open(path, encoding="utf-8") as ft:
                    code = ft.read()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read kernel source {path!r}: {exc.strerror}") from exc
        return cls(code, lang=lang, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # a value: pickles with its mappings as plain dicts (a Pallas function by reference)
        return (
            _make_source,
            (self.code, self.lang, self.name, self.options, dict(self.headers), self.name_expressions, dict(self.meta)),
        )

    @property
    def text(self) -> str:
        """The code as text (binary images and functions give an empty string)."""
        return self.code if isinstance(self.code, str) else ""

    def digest(self) -> str:
        """A sha256 over everything that defines the compiled result, for cache keys.

        A Python function (Pallas) has no stable text: it is keyed by its identity instead and
        is not meant for the disk cache. A ``triton`` function is keyed by its source text
        (``fn.src``) and ``meta`` (its signature and constexprs define the compiled result).
        """
        h = hashlib.sha256()
        code = self.code
        if isinstance(code, str):
            h.update(b"s" + code.encode())
        elif isinstance(code, bytes):
            h.update(b"b" + code)
        elif self.lang == "triton" and isinstance(src := getattr(code, "src", None), str):
            h.update(b"t" + src.encode() + repr(sorted(self.meta.items())).encode())
        else:
            h.update(f"f{getattr(code, '__module__', '')}.{getattr(code, '__qualname__', '')}:{id(code)}".encode())
        for part in (
            self.lang,
            self.name or "",
            *self.options,
            *[f"{k}\0{v}" for k, v in sorted(self.headers.items())],
            *self.name_expressions,
        ):
            h.update(b"\0" + part.encode())
        return h.hexdigest()


def _index(v: Any) -> int:
    import operator

    return operator.index(v)


def _make_source(
    code: Any, lang: str, name: Any, options: Any, headers: Any, name_expressions: Any, meta: Any
) -> Source:
    return Source(code, lang, name, options, headers, name_expressions, meta)


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
    _b: Binding = attrs.field(repr=False, alias="binding")

    @property
    def name(self) -> str:
        return self.source.name or "<kernel>"

    @property
    def jax(self) -> Any:
        """The kernel as a pure JAX function (arrays in, outputs returned), for backends whose
        compiled kernel offers one (``handle.jax``; the tpu backend's Pallas kernels).

        :raises UnsupportedError: the backend offers no JAX function.
        """
        fn = getattr(self.handle, "jax", None)
        if fn is None:
            from .errors import UnsupportedError

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
        if _streams.intercept:  # some thread has a current stream or records a graph
            return _streams.launch(self, grid, block, args, shared_mem, stream, reads, writes)
        if stream is not None and stream.__class__ is _streams.Stream and stream.is_default:
            stream = None  # no current stream here: the device's default is what None means
        return self._b.launch(self, grid, block, args, shared_mem, stream)

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

    @property
    def closed(self) -> bool:
        return self.handle is None

    def close(self) -> None:
        """Release the compiled module (once no other kernel of it is left); launching after
        this raises :class:`UseAfterFreeError`. Closing twice is harmless."""
        if self.handle is not None:
            try:
                self._b.close_kernel(self)
            finally:
                self.handle = None

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Last: streams imports this module's classes (the hot path reads _streams.intercept).
from . import streams as _streams  # noqa: E402
