"""The public functions behind ``import kernelbay as kb``."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import _fronts
from . import streams as _streams
from ._plugins import Backend, Binding, binding, runtime
from ._select import _by_priority, device, devices, select  # noqa: F401  (device selection lives there)
from .argrules import BY_NAME
from .device import Device, registry
from .errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    UnsupportedError,
)
from .kernel import Kernel
from .memory import Array, Buffer
from .source import Source

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

_new = object.__new__

# Values call their backend through the binding they hold; for a device made by hand or an array
# unpickled in another process they ask these two lookups, installed here (never imported there).
registry.binding = binding
registry.device = lambda name: device(name)

DeviceLike = Device | str | None

# --- backends and devices ---------------------------------------------------------------


def backends() -> list[Backend]:
    """Installed backends (those KERNELBAY_BACKENDS allows), by name.

    Reads entry-point metadata only: no backend is imported until you read a record's
    ``status``, ``reason``, ``priority``, ``languages`` or ``devices``.
    """
    return [runtime.records()[n] for n in sorted(runtime.records())]


def _resolve(device_like: DeviceLike) -> tuple[Device, Binding]:
    dev = device_like if type(device_like) is Device else device(device_like)
    b = runtime.bindings.get(dev.backend)
    return dev, (b if b is not None else binding(dev.backend))


_dtypes: dict[Any, Any] = {}


def _dtype(spec: Any) -> Any:
    """``np.dtype(spec)`` for a numeric dtype, memoised for the hashable specs users repeat
    ("float32", np.int32).

    :raises ArgumentTypeError: for a spec numpy does not know, or a dtype that is not a number
        (object, str, bytes, void/structured, datetime): device memory holds numbers only.
    """
    try:
        return _dtypes[spec]
    except (KeyError, TypeError):  # TypeError: an unhashable spec (a list of fields...)
        pass
    dt = _numeric(_np_dtype(spec), "dtype")
    try:
        if len(_dtypes) < 256:
            _dtypes[spec] = dt
    except TypeError:
        pass
    return dt


def _np_dtype(spec: Any) -> Any:
    import numpy as np

    try:
        return np.dtype(spec)
    except (TypeError, ValueError, SyntaxError) as exc:
        if isinstance(spec, str) and spec in BY_NAME:
            # numpy knows "bfloat16" and the float8s by name only once ml_dtypes (an optional
            # dependency, which jax brings) is imported: import it on this rare path only.
            try:
                import ml_dtypes  # noqa: F401

                return np.dtype(spec)
            except (ImportError, TypeError):
                raise ArgumentTypeError(
                    f"dtype {spec!r} needs the ml_dtypes package (pip install ml-dtypes), which numpy uses for it"
                ) from None
        raise ArgumentTypeError(
            f"dtype {spec!r} is not a numpy dtype ({exc}); use a numeric one such as 'float32', 'int64' or np.uint8"
        ) from None


def _numeric(dt: Any, what: str) -> Any:
    """``dt`` if it is a number: kind bool, integer, float or complex, or one of the dtypes of
    :data:`kernelbay.argrules.DTYPES` that ml_dtypes adds to numpy (bfloat16, the float8s: numpy
    kind ``V``, like records); else a clear refusal."""
    if dt.fields is None and dt.subdtype is None and (dt.kind in "biufc" or dt.name in BY_NAME):
        return dt
    if dt.kind == "V" and dt.fields is None and dt.subdtype is None and not dt.name.startswith("void"):
        # a number type another package added to numpy (ml_dtypes' int4, float4...), not in the table
        raise ArgumentTypeError(
            f"{what} {dt} is not one kernelbay supports: its dtypes are {', '.join(BY_NAME)}; convert the data "
            "first (e.g. astype('int8'))"
        )
    raise ArgumentTypeError(
        f"{what} {dt} is not numeric: kernelbay arrays hold numbers only (bool, integers, floats including "
        "bfloat16 and float8, complex), not objects, strings, records or dates; convert the data first "
        "(e.g. astype('float32'))"
    )


#: More bytes than any device's address space: a size past it is a mistake, said as such.
MAX_NBYTES = 1 << 48


# --- arrays -----------------------------------------------------------------------------


def _shape(shape: Any) -> tuple[int, ...]:
    if type(shape) is int:
        shp: tuple[int, ...] = (shape,)
    else:
        try:
            shp = (operator.index(shape),) if hasattr(shape, "__index__") else tuple(operator.index(s) for s in shape)
        except TypeError:
            raise ArgumentTypeError(
                f"shape must be an int or a sequence of ints, not {shape!r} (2.5 or '4' are not sizes)"
            ) from None
    for s in shp:
        if s < 0:
            raise InvalidArgumentError(f"shape must not have negative sizes, got {shp}")
    return shp


def empty(shape: Any, dtype: Any = "float32", device: DeviceLike = None) -> Array:
    """A new uninitialised array of ``shape`` and ``dtype`` on ``device``."""
    # An allocation hot path, like buffer(): the common spellings (a kb.Device, an int shape, a
    # dtype seen before) take no helper call; the helpers check everything else.
    if type(device) is Device:
        dev = device
        b = runtime.bindings.get(dev.backend)
        if b is None:
            b = binding(dev.backend)
    else:
        dev, b = _resolve(device)
    shp = (shape,) if type(shape) is int and shape >= 0 else _shape(shape)
    try:
        dt = _dtypes[dtype]
    except (KeyError, TypeError):
        dt = _dtype(dtype)
    n = dt.itemsize
    for s in shp:
        n *= s
    if n > MAX_NBYTES:
        raise InvalidArgumentError(
            f"an array of shape {shp} and dtype {dt} would take {n} bytes, more than any device holds"
        )
    h = b.allocate(dev, n)
    a = _new(Array)  # Array(dev, n, h, b, shp, dt) without the __init__ call (see buffer())
    a.device = dev
    a.nbytes = n
    a.handle = h
    a._binding = b
    a.shape = shp
    a.dtype = dt
    return a


def zeros(shape: Any, dtype: Any = "float32", device: DeviceLike = None) -> Array:
    """A new array filled with zeros."""
    import numpy as np

    out = empty(shape, dtype, device)
    g, stream = _streams.route(out.device, None)
    if g is not None:
        g._record_memset(out, 0, out.nbytes, stream)
        return out
    try:
        out._binding.memset(out, 0, out.nbytes, stream)
    except NotImplementedError:
        copy(out, np.zeros(out.shape, out.dtype))
    return out


def buffer(nbytes: int, device: DeviceLike = None) -> Buffer:
    """A new untyped buffer of ``nbytes`` bytes."""
    if (type(nbytes) is not int and not isinstance(nbytes, int)) or nbytes < 0 or nbytes > MAX_NBYTES:
        raise InvalidArgumentError(f"nbytes must be an int from 0 to {MAX_NBYTES}, got {nbytes!r}")
    # The allocation hot path: _resolve inlined, and Buffer(dev, nbytes, h, b) built without its
    # __init__ call (a Python frame, a third of the core's cost here); the slots are the same.
    if type(device) is Device:
        dev = device
        b = runtime.bindings.get(dev.backend)
        if b is None:
            b = binding(dev.backend)
    else:
        dev, b = _resolve(device)
    h = b.allocate(dev, nbytes)
    buf = _new(Buffer)
    buf.device = dev
    buf.nbytes = nbytes
    buf.handle = h
    buf._binding = b
    return buf


def asarray(obj: Any, dtype: Any = None, device: DeviceLike = None) -> Array:
    """An array on ``device`` holding ``obj``'s data.

    ``obj`` may be a kernelbay array (returned as is when already there with that dtype, else
    copied), a numpy array or anything numpy accepts (copied), or a foreign device array
    (CuPy, PyTorch, JAX...) that a backend adopts without a copy through DLPack or the CUDA
    array interface.
    """
    import numpy as np

    if isinstance(obj, Array):
        src = obj
        src.checked_handle()
        dev, _ = _resolve(device if device is not None else src.device)
        same_dtype = dtype is None or _dtype(dtype) == src.dtype
        if dev == src.device and same_dtype:
            return src
        if same_dtype and dev.backend == src.device.backend:  # device to device, no host trip
            return copy(empty(src.shape, src.dtype, dev), src)
        host = to_numpy(src)
        return asarray(host if dtype is None else host.astype(dtype), device=dev)
    if not isinstance(obj, np.ndarray) and (hasattr(obj, "__dlpack__") or hasattr(obj, "__cuda_array_interface__")):
        adopted = _adopt(obj, device)
        if adopted is not None:
            return (
                adopted if dtype is None or _dtype(dtype) == adopted.dtype else asarray(adopted, dtype, adopted.device)
            )
        obj = _foreign_to_host(obj)
    if dtype is not None:
        dtype = _dtype(dtype)
    try:
        host = np.asarray(obj, dtype=dtype, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidArgumentError(
            f"kb.asarray cannot make a numeric array of this {type(obj).__name__}: {exc}. Nested lists must be "
            "rectangular (not ragged) and hold numbers"
        ) from None
    _numeric(host.dtype, "the data's dtype")
    out = empty(host.shape, host.dtype, device)
    out._binding.copy(out, host, host.nbytes, None)
    return out


def _foreign_to_host(obj: Any) -> Any:
    """A foreign array no backend adopted: read it on the host, or say why that is impossible."""
    import numpy as np

    errors = []
    for read in (np.from_dlpack, np.asarray):
        try:
            out = read(obj)
        except Exception as exc:  # each library has its own error types for "not on the host"
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        if out.dtype != object:
            return out
    raise ArgumentTypeError(
        f"kb.asarray cannot take a {type(obj).__module__}.{type(obj).__name__}: no available kernelbay "
        f"backend adopts it and it cannot be read on the host ({'; '.join(errors) or 'not numeric'}). "
        "Install or enable the backend for the device it lives on (e.g. kernelbay-cuda for CUDA "
        "tensors), or move it to the host first"
    )


def _adopt(obj: Any, device_like: DeviceLike) -> Array | None:
    import numpy as np

    if device_like is not None:
        candidates: list[tuple[Device | None, Binding]] = [_resolve(device_like)]
    else:
        candidates = [(None, b) for b in _by_priority() if isinstance(b, Binding)]
    for dev, b in candidates:
        got = b.from_external(obj, dev)
        if got is not None:
            handle, shape, dt = got
            dt = np.dtype(dt)
            target = dev
            if target is None:
                target = getattr(handle, "device", None)
                if not isinstance(target, Device):
                    target = b.devices()[0]
            nbytes = dt.itemsize
            for s in shape:
                nbytes *= s
            return Array(target, nbytes, handle, b, tuple(shape), dt)
    return None


def to_numpy(array: Array) -> np.ndarray:
    """``array``'s contents on the host: a shared view where the backend allows, else a copy."""
    return array.numpy()


def _nbytes_dtype(x: Any, side: str) -> tuple[int, Any]:
    import numpy as np

    if isinstance(x, Buffer):
        x.checked_handle()
        return x.nbytes, getattr(x, "dtype", None)
    if isinstance(x, np.ndarray):
        return x.nbytes, _numeric(x.dtype, f"copy {side} dtype")
    raise ArgumentTypeError(
        f"copy {side} must be a kernelbay Array/Buffer or a numpy array, not {type(x).__name__}; "
        "convert it with kb.asarray() or np.asarray() first"
    )


def copy(dst: Any, src: Any, stream: Any = None) -> Any:
    """Copy ``src`` into ``dst`` and return ``dst``.

    Either side may be a kernelbay array/buffer or a numpy array (at least one must be
    kernelbay's). Copies between devices of two backends go through host memory.

    :raises InvalidArgumentError: when the sizes or dtypes differ.
    :raises UseAfterFreeError: when either side was closed.
    """
    import numpy as np

    dn, dd = _nbytes_dtype(dst, "destination")
    sn, sd = _nbytes_dtype(src, "source")
    if dn != sn:
        raise InvalidArgumentError(
            f"copy between different sizes: destination has {dn} bytes{_desc(dst)}, source has {sn} bytes{_desc(src)}"
        )
    if dd is not None and sd is not None and dd != sd:
        raise InvalidArgumentError(
            f"copy between different dtypes: destination is {dd}, source is {sd}; convert with "
            "kb.asarray(x, dtype=...) or numpy's astype first"
        )
    dbuf, sbuf = isinstance(dst, Buffer), isinstance(src, Buffer)
    if not dbuf and not sbuf:
        raise ArgumentTypeError("copy needs at least one kernelbay Array/Buffer; use numpy to copy host to host")
    if _streams.intercept:  # a current stream, or a graph recording
        g, stream = _streams.route(dst.device if dbuf else src.device, stream)
        if g is not None:
            _record_copy(g, dst, src, dn, stream, dbuf, sbuf)
            return dst
    elif stream is not None and stream.__class__ is _streams.Stream and stream.handle is None:
        stream = None  # a stream the backend does not see: its hooks take None
    if dbuf and sbuf:
        if dst._binding is src._binding:
            dst._binding.copy(dst, src, dn, stream)
        else:  # two backends: through the host
            tmp = np.empty(dn, np.uint8)
            src._binding.copy(tmp, src, dn, stream)
            dst._binding.copy(dst, tmp, dn, stream)
        return dst
    if dbuf:
        host = np.asarray(src, order="C")
        dst._binding.copy(dst, host, dn, stream)
        return dst
    if dst.flags.c_contiguous and dst.flags.writeable:
        src._binding.copy(dst, src, dn, stream)
    elif not dst.flags.writeable:
        raise InvalidArgumentError("copy destination numpy array is read-only")
    else:
        tmp = np.empty(dst.shape, dst.dtype)
        src._binding.copy(tmp, src, dn, stream)
        dst[...] = tmp
    return dst


def _record_copy(g: Any, dst: Any, src: Any, n: int, stream: Any, dbuf: bool, sbuf: bool) -> None:
    """A copy inside a graph recording: the host side is used as it is at each replay."""
    if dbuf and sbuf and dst._binding is not src._binding:
        raise UnsupportedError("a graph cannot record a copy between two backends; copy before or after it")
    host = src if not sbuf else dst if not dbuf else None
    if host is not None and not (host.flags.c_contiguous and (sbuf is False or host.flags.writeable)):
        raise InvalidArgumentError(
            "a graph records copies to and from C-contiguous (and, as destination, writable) numpy arrays only; "
            "pass np.ascontiguousarray(...)"
        )
    g._record_copy(dst, src, n, stream)


def _desc(x: Any) -> str:
    shape = getattr(x, "shape", None)
    return "" if shape is None else f" (shape {tuple(shape)}, dtype {getattr(x, 'dtype', None)})"


# --- code -------------------------------------------------------------------------------


def compile(source: Source | Sequence[Source], device: DeviceLike = None) -> Kernel:
    """Compile a kernel for ``device``.

    :param source: one :class:`Source`, or alternatives in several languages; the first whose
        language the device's backend accepts is used.
    :raises InvalidArgumentError: when the backend accepts none of the sources' languages.
    :raises CompileError: with the compiler's log and the source lines it points at.
    """
    dev, b = _resolve(device)
    sources: Iterable[Source] = (source,) if isinstance(source, Source) else tuple(source)
    langs = b.spec.languages if b.spec is not None else ()
    chosen = None
    for s in sources:
        if not isinstance(s, Source):
            raise ArgumentTypeError(f"kb.compile takes kb.Source objects, not {type(s).__name__}")
        if s.lang in langs:
            chosen = s
            break
    if chosen is None:
        given = ", ".join(sorted({s.lang for s in sources})) or "none"
        raise InvalidArgumentError(
            f"backend {b.name!r} ({dev}) accepts the languages {', '.join(langs)}; the source(s) given "
            f"are in: {given}. Add a Source in one of its languages, or pick another device"
        )
    return Kernel(dev, chosen, b.compile(dev, chosen), b)


# --- extensions -------------------------------------------------------------------------


def register(plugin: object, name: str | None = None) -> None:
    """Register an extension plugin (e.g. ``wrapper=True`` hooks that trace every launch)."""
    runtime.register(plugin, name)


def unregister(plugin: object) -> None:
    """Remove an extension registered with :func:`register`."""
    runtime.unregister(plugin)


# The C fronts of kb.buffer and kb.empty (and of Kernel.launch, Buffer.close) go in when a backend
# offers direct callables: they need these functions as their Python twins, and this namespace
# to put themselves in (kernelbay._fronts).
_fronts.offer(
    globals(),
    buffer=buffer,
    empty=empty,
    runtime=runtime,
    dtypes=_dtypes,
    max_nbytes=MAX_NBYTES,
    binding_class=Binding,
)
