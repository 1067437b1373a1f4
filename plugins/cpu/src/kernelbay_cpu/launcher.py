"""Launch compiled kernels: argument conversion into the ``void**`` array, and the grid checks.

Each kernel keeps one ctypes slot per parameter and a ``void*`` array pointing at them, built
once; a launch writes the arguments into the slots and calls the native launcher (which
releases the GIL). A second thread launching the same kernel meanwhile gets its own slots. A
launch on a user stream is checked and packed into private slots here (:func:`pack`, which
graphs use too) and queued on the stream's worker (streams.py).
"""

from __future__ import annotations

import array
import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kernelbay.argrules import PARAM, check_scalar, float_max, int_range
from kernelbay.argrules import describe as _describe
from kernelbay.errors import ArgumentTypeError, InvalidArgumentError, UseAfterFreeError
from kernelbay.types import Array, Buffer, Kernel, dim3

from . import _driver, streams

#: CUDA's limits, kept so a geometry that works here works on a GPU too.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
#: Dynamic shared memory a launch may ask for: CUDA's default per-block limit, so a launch that
#: works here works on a GPU too (Device.properties["max_shared_memory_per_block"]).
MAX_SHARED_MEMORY_PER_BLOCK = 48 * 1024

# ctypes slot per scalar (kind, size) of the core's table; a dtype ctypes lacks (float16) gets
# a raw slot.
_CTYPES = {
    "b": lambda n: ctypes.c_bool,
    "i": lambda n: getattr(ctypes, f"c_int{8 * n}", None),
    "u": lambda n: getattr(ctypes, f"c_uint{8 * n}", None),
    "f": lambda n: {4: ctypes.c_float, 8: ctypes.c_double}.get(n),
}
_INT_TYPES = {(k, n): t for (k, n) in PARAM if (t := _CTYPES[k](n)) is not None}


class KernelHandle:
    """One entry of a compiled module: its native launcher and its parameters."""

    def __init__(self, lib: ctypes.CDLL, index: int, name: str, lang: str, fibers: bool = False) -> None:
        self.lib = lib
        self.name = name
        self.lang = lang
        #: whether the kernel's threads run as fibers (it uses barriers, shared memory or warps)
        self.fibers = fibers
        info = getattr(lib, f"kb_info_{index}")
        cap = 256
        # Plain arrays, not ctypes array types: making those types costs ~0.1 ms a process.
        sizes = array.array("q", bytes(8 * cap))  # long long
        kinds = array.array("b", bytes(cap))
        n = info(ctypes.c_void_p(sizes.buffer_info()[0]), ctypes.c_void_p(kinds.buffer_info()[0]), cap)
        if n > cap:
            raise InvalidArgumentError(f"kernel {name!r} has {n} parameters; the cpu backend takes at most {cap}")
        #: parameter sizes in bytes, and kinds: p(ointer) i(nt) u(nsigned) b(ool) f(loat) o(ther)
        self.sizes = tuple(sizes[:n])
        self.kinds = tuple(kinds[:n].tobytes().decode())
        self.nparams = n
        self.fn = getattr(lib, f"kb_launch_{index}")
        self._lock = threading.Lock()
        self._slots, self._argv = self._new_slots()
        self.launcher: Launcher | None = None
        #: how the kernel runs, in words: ``kernelbay profile`` prints it (set by the module)
        self.profile_note: str | None = None

    def _new_slots(self) -> tuple[list[Any], Any]:
        slots: list[Any] = []
        for kind, size in zip(self.kinds, self.sizes):
            if kind == "p":
                slots.append(ctypes.c_void_p())
            elif (kind, size) in _INT_TYPES:
                slots.append(_INT_TYPES[kind, size]())
            else:
                slots.append((ctypes.c_char * max(size, 1))())
        argv = (ctypes.c_void_p * max(len(slots), 1))(*[ctypes.addressof(s) for s in slots])
        return slots, argv

    def converters(self, device: Any) -> list[Callable[[Any, Any], None]]:
        return [_converter(i, k, s, device, self.name) for i, (k, s) in enumerate(zip(self.kinds, self.sizes))]


def _bad(pos: int, name: str, kind: str, size: int, value: Any, why: str = "") -> InvalidArgumentError:
    cls = ArgumentTypeError if not why else InvalidArgumentError
    return cls(
        f"argument {pos} of kernel {name!r} expects {_describe(kind, size)}, got {type(value).__name__} {value!r}{why}"
    )


def _converter(pos: int, kind: str, size: int, device: Any, name: str) -> Callable[[Any, Any], None]:
    """A function ``(value, slot)`` writing argument ``pos`` into its ctypes slot, or raising."""
    import numpy as np  # heavy: loaded by a kernel's first launch, not by importing the backend

    generic = np.generic

    if kind == "p":

        def ptr(a: Any, slot: Any) -> None:
            if type(a) is Array or isinstance(a, Buffer):
                h = a.handle
                if h is None:
                    raise UseAfterFreeError(f"argument {pos} of kernel {name!r} was used after close()")
                if a.device is not device and a.device != device:
                    raise InvalidArgumentError(
                        f"argument {pos} of kernel {name!r} lives on {a.device}, but the kernel runs on {device}; "
                        "copy it with kb.asarray(x, device=...) first"
                    )
                slot.value = h.ptr
                return
            raise _bad(pos, name, kind, size, a, "; pass a kernelbay Array or Buffer (kb.asarray(...))")

        return ptr

    if (kind, size) in _INT_TYPES:
        # The rules are the core's (kernelbay.argrules); the common cases are inlined for speed.
        where = f"argument {pos} of kernel {name!r}"
        lo, hi = int_range(kind, size)
        fmax = float_max(size)
        is_float = kind == "f"
        is_int = kind in ("i", "u")  # a bool parameter takes no Python int
        accepted: set[type] = set()  # numpy scalar types whose every value fits: set as they are

        def num(a: Any, slot: Any) -> None:
            t = type(a)
            if t in accepted or (
                (t is float and is_float and -fmax <= a <= fmax) or (t is int and is_int and lo <= a <= hi)
            ):
                slot.value = a
                return
            if isinstance(a, Buffer):
                raise _bad(pos, name, kind, size, a, "; a buffer goes only to a pointer parameter")
            check_scalar(a, kind, size, where)  # raises for whatever the table refuses
            if isinstance(a, generic) and a.dtype.kind == kind:
                accepted.add(t)
            slot.value = a

        return num

    def raw(a: Any, slot: Any) -> None:
        # A struct (or other) parameter: only a numpy scalar of exactly its size is unambiguous.
        if isinstance(a, generic) and a.dtype.itemsize == size:
            ctypes.memmove(slot, a.tobytes(), size)
            return
        raise _bad(
            pos,
            name,
            "o",
            size,
            a,
            f"; a parameter of this type takes a numpy scalar of exactly {size} bytes (e.g. a structured np.void)",
        )

    return raw


def geometry(grid: Any, block: Any) -> Any:
    """The validated ``int[6]`` geometry (grid xyz, block xyz) for the native launcher."""
    g = dim3(grid, "grid")
    b = (1, 1, 1) if block is None else dim3(block, "block")
    if g[0] > MAX_GRID[0] or g[1] > MAX_GRID[1] or g[2] > MAX_GRID[2]:
        raise InvalidArgumentError(f"grid {g} is over the cpu backend's limit {MAX_GRID}")
    if b[0] * b[1] * b[2] > MAX_THREADS_PER_BLOCK or b[0] > MAX_BLOCK[0] or b[1] > MAX_BLOCK[1] or b[2] > MAX_BLOCK[2]:
        raise InvalidArgumentError(
            f"block {b} has {b[0] * b[1] * b[2]} threads; the cpu backend allows at most "
            f"{MAX_THREADS_PER_BLOCK} per block and {MAX_BLOCK} per dimension"
        )
    return (ctypes.c_int * 6)(*g, *b)


# Validated geometries by (grid, block) as the user passed them: a repeated launch skips the
# checks. Only hashable values are kept, and the dict is bounded.
_geometries: dict[Any, Any] = {}


class Launcher:
    """The per-kernel launch state the ``kernelbay_launch`` hook uses."""

    __slots__ = ("handle", "convs", "n", "name", "fn", "lib", "device")

    def __init__(self, handle: KernelHandle, device: Any) -> None:
        self.handle = handle
        self.convs = handle.converters(device)
        self.n = handle.nparams
        self.name = handle.name
        self.fn = handle.fn
        self.lib = handle.lib
        self.device = device


def launch(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> None:
    """Run ``kernel`` over the grid; returns when it has finished (on the default stream)."""
    if stream is not None or streams.pending:  # a user stream, or one still busy: see streams.py
        return _launch_on_stream(kernel, grid, block, args, shared_mem, stream)
    h = kernel.handle
    if h is None:
        raise UseAfterFreeError(f"kernel {kernel.name!r} was used after close()")
    ln = h.launcher
    if ln is None or ln.device is not kernel.device:
        ln = h.launcher = Launcher(h, kernel.device)
    try:
        geom = _geometries.get((grid, block))
    except TypeError:  # unhashable (a list): validate every time
        geom = geometry(grid, block)
    else:
        if geom is None:
            geom = geometry(grid, block)
            if len(_geometries) > 4096:
                _geometries.clear()
            _geometries[grid, block] = geom
    if shared_mem:
        _check_shared_mem(ln.name, shared_mem)
    if len(args) != ln.n:
        raise InvalidArgumentError(f"kernel {ln.name!r} takes {ln.n} arguments ({_signature(h)}), got {len(args)}")
    lock = h._lock
    if lock.acquire(False):
        try:
            for conv, a, s in zip(ln.convs, args, h._slots):
                conv(a, s)
            status = ln.fn(h._argv, geom, shared_mem)
        finally:
            lock.release()
    else:  # another thread is launching this kernel: private slots
        slots, argv = h._new_slots()
        for conv, a, s in zip(ln.convs, args, slots):
            conv(a, s)
        status = ln.fn(argv, geom, shared_mem)
    if status:
        _driver.check(status, ln.lib, ln.name)


def _check_shared_mem(name: str, shared_mem: Any) -> None:
    if type(shared_mem) is not int or not 0 <= shared_mem <= MAX_SHARED_MEMORY_PER_BLOCK:
        raise InvalidArgumentError(
            f"launch of {name!r} asks for {shared_mem!r} bytes of dynamic shared memory; the cpu backend allows "
            f"0 to {MAX_SHARED_MEMORY_PER_BLOCK} per block (Device.properties['max_shared_memory_per_block'])"
        )


def _signature(h: KernelHandle) -> str:
    return ", ".join(_describe(k, s) for k, s in zip(h.kinds, h.sizes)) or "no parameters"


def pack(
    kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int
) -> tuple[Any, Any, Any, int, list[Any]]:
    """Check a launch and pack it into private slots: ``(fn, argv, geometry, shared_mem, keep)``,
    where ``keep`` holds the slots and the memory of every buffer argument. ``fn(argv, geometry,
    shared_mem)`` runs it as the default stream's launch does (fibers for a kernel with
    barriers or shared memory, the thread loop otherwise). Queued launches and graph steps use it."""
    h = kernel.handle
    if h is None:
        raise UseAfterFreeError(f"kernel {kernel.name!r} was used after close()")
    ln = h.launcher
    if ln is None or ln.device is not kernel.device:
        ln = h.launcher = Launcher(h, kernel.device)
    geom = geometry(grid, block)
    if shared_mem:
        _check_shared_mem(ln.name, shared_mem)
    if len(args) != ln.n:
        raise InvalidArgumentError(f"kernel {ln.name!r} takes {ln.n} arguments ({_signature(h)}), got {len(args)}")
    slots, argv = h._new_slots()
    for conv, a, s in zip(ln.convs, args, slots):
        conv(a, s)
    keep = [slots, geom, h] + [streams.memory_of(a) for a in args if isinstance(a, Buffer)]
    return ln.fn, argv, geom, shared_mem, keep


def _launch_on_stream(kernel: Kernel, grid: Any, block: Any, args: Sequence[Any], shared_mem: int, stream: Any) -> None:
    """A launch on a user stream (queued), or on the default stream while user streams are busy."""
    q = streams.queue_of(stream)
    if q is None:
        streams.drain_all()
        launch(kernel, grid, block, args, shared_mem, None)
        return
    fn, argv, geom, shm, keep = pack(kernel, grid, block, args, shared_mem)
    lib, name = kernel.handle.lib, kernel.handle.name

    def run() -> None:
        _driver.check(fn(argv, geom, shm), lib, name)
        keep.clear()

    q.put(run, streams.hold(args))
