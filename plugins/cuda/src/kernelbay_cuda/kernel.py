"""The kernel object: what the backend keeps per compiled kernel, and its parameter block.

A :class:`CudaKernel` holds the driver function, the device limits a launch is checked
against, the parameter layout and one reusable parameter block (a ``void**`` array whose
pointers aim into one byte buffer, see :class:`ParamBlock`). ``fast`` is its launch entry,
set by :mod:`.launcher`.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kernelbay.errors import InvalidArgumentError, LaunchError

from . import _driver
from .packing import ParamSpec, make_packer, never

__all__ = ["CudaKernel", "ParamBlock", "STALE"]

if TYPE_CHECKING:
    from .modules import Module  # for annotations only

# Marks a kernel's memo of packed values as stale (never equal to a value, never identical).
STALE = object()


class ParamBlock:
    """One reusable parameter block: a byte buffer and the ``void*`` array aimed into it."""

    __slots__ = ("buf", "ptrs", "cvp", "addr")

    def __init__(self, params: Sequence[ParamSpec]) -> None:
        total = max(8, max((off + size for size, _, _, off in params), default=8))
        self.buf = (ctypes.c_char * total)()
        base = ctypes.addressof(self.buf)
        self.ptrs = (ctypes.c_void_p * max(1, len(params)))(*[base + off for *_, off in params] or [0])
        self.addr = ctypes.addressof(self.ptrs)
        self.cvp = ctypes.c_void_p(self.addr)


class CudaKernel:
    """The handle the CUDA backend keeps for a compiled kernel (``Kernel.handle``)."""

    __slots__ = (
        "device",
        "index",
        "name",
        "symbol",
        "module",
        "fn",
        "fn_c",
        "params",
        "block",
        "packer",
        "tid",
        "max_threads",
        "max_gx",
        "max_gy",
        "max_gz",
        "max_bx",
        "max_by",
        "max_bz",
        "static_shared",
        "dyn_limit",
        "optin",
        "auto_block",
        "other_threads",
        "lock",
        "fast",
        "memo",
        "visible",
        "arg_names",
        "fixed_block",
        "shm_base",
        "scratch",
        "scratch_buf",
        "inner",
        "tail",
        "__weakref__",
    )

    def __init__(self, device: Any, module: Module, expr: str, symbol: str, params: list[ParamSpec] | None) -> None:
        p = device.properties
        self.device = device
        self.index = device.index
        self.name = expr
        self.symbol = symbol
        self.module = module
        self.fn = module.function(symbol)
        self.fn_c = ctypes.c_void_p(int(self.fn))
        lib = _driver.libcuda()
        self.max_threads = self._attr(lib, 0) or p.get("max_threads_per_block") or 1024
        self.static_shared = self._attr(lib, 1) or 0
        self.optin = max(p.get("max_shared_per_block_optin") or 0, p.get("max_shared_per_block") or 49152)
        self.dyn_limit = max(0, (p.get("max_shared_per_block") or 49152) - self.static_shared)
        self.max_gx = p.get("max_grid_x") or 2147483647
        self.max_gy = p.get("max_grid_y") or 65535
        self.max_gz = p.get("max_grid_z") or 65535
        self.max_bx = p.get("max_block_x") or 1024
        self.max_by = p.get("max_block_y") or 1024
        self.max_bz = p.get("max_block_z") or 64
        driver_params = self._driver_params(lib)
        if driver_params is not None:
            if params is not None and [s for s, *_ in params] == [s for s, *_ in driver_params]:
                params = [(s, a, t, o) for (s, a, t, _), (_, _, _, o) in zip(params, driver_params)]
            else:
                params = driver_params
        if params is None:
            raise InvalidArgumentError(
                f"cannot tell the parameters of kernel {expr!r}: this driver lacks cuFuncGetParamInfo and the "
                "module carries no PTX signature; compile from CUDA C++ or PTX, or upgrade the driver (>= 12.4)"
            )
        self.params = params
        #: The parameters a caller passes (a Triton kernel's trailing scratch pointers are kernelbay's).
        self.visible = params
        self.arg_names: list[str] | None = None
        #: A block every launch uses (Triton: 32 x num_warps), and shared memory added to each launch.
        self.fixed_block: tuple[int, int, int] | None = None
        self.shm_base = 0
        #: Per trailing hidden pointer: (bytes per program, alignment); see :meth:`apply`.
        self.scratch: list[tuple[int, int]] = []
        self.scratch_buf: list[Any] | None = None  # the scratch buffers, where the kernel has any
        self.inner: Any = None  # behind the scratch filler: the launch entry proper
        self.tail: dict[int, int] = {}  # offset -> pointer kernelbay keeps in every parameter block
        self.block = ParamBlock(params)
        self.packer = never
        self.fast: Any = None  # the launch entry, set by launcher.arm
        # The values last packed by the fast path (see make_fast); [STALE] until then.
        self.memo: list[Any] = [STALE]
        self.tid = -1
        self.auto_block: dict[int, int] = {}
        self.other_threads: dict[int, tuple[ParamBlock, Any]] = {}
        self.lock = threading.Lock()

    def apply(self, settings: dict[str, Any]) -> None:
        """Take a compiler's launch settings (Triton's, see :mod:`.triton_kernels`)."""
        hidden = int(settings.get("hidden", 0))
        if hidden > len(self.params):
            raise InvalidArgumentError(f"kernel {self.name!r}: {hidden} hidden parameters of {len(self.params)}")
        self.visible = self.params[: len(self.params) - hidden]
        self.arg_names = list(settings.get("arg_names") or []) or None
        self.scratch = [tuple(x) for x in settings.get("scratch", [])]
        block = settings.get("block")
        self.fixed_block = (int(block), 1, 1) if block else None
        self.shm_base = int(settings.get("shared", 0))
        if self.fixed_block is not None and self.shm_base > self.dyn_limit:
            self.check_geometry(1, 1, 1, *self.fixed_block, self.shm_base)  # raises the kernel's limit

    def _attr(self, lib: ctypes.CDLL, attr: int) -> int | None:
        v = ctypes.c_int()
        return v.value if lib.cuFuncGetAttribute(ctypes.byref(v), attr, self.fn_c) == 0 else None

    def _driver_params(self, lib: ctypes.CDLL) -> list[ParamSpec] | None:
        f = getattr(lib, "cuFuncGetParamInfo", None)
        if f is None:
            return None
        out: list[ParamSpec] = []
        off, size = ctypes.c_size_t(), ctypes.c_size_t()
        for i in range(4096):
            rc = f(self.fn_c, ctypes.c_size_t(i), ctypes.byref(off), ctypes.byref(size))
            if rc:
                if i == 0 and rc != 1:  # not supported for this function: fall back to PTX
                    return None
                break
            out.append((size.value, 1, "", off.value))
        return out

    # --- the slow paths of launch -------------------------------------------------------

    def occupancy_block(self, shared_mem: int) -> int:
        b = self.auto_block.get(shared_mem)
        if b is None:
            _driver.ensure_current(self.index)
            mg, bs = ctypes.c_int(), ctypes.c_int()
            rc = _driver.libcuda().cuOccupancyMaxPotentialBlockSize(
                ctypes.byref(mg), ctypes.byref(bs), self.fn_c, None, ctypes.c_size_t(shared_mem), 0
            )
            _driver.check(rc, f"cuOccupancyMaxPotentialBlockSize for {self.name!r}", self.index)
            b = self.auto_block[shared_mem] = max(1, bs.value)
        return b

    def check_geometry(self, gx: Any, gy: Any, gz: Any, bx: Any, by: Any, bz: Any, shared_mem: Any) -> None:
        """Raise for a geometry outside the device's limits; raise the kernel's dynamic
        shared-memory limit when the request needs it (and the device allows it)."""
        for v, what in ((gx, "grid"), (gy, "grid"), (gz, "grid"), (bx, "block"), (by, "block"), (bz, "block")):
            if type(v) is not int or v < 1:
                raise InvalidArgumentError(f"launch of {self.name!r}: {what} dimensions must be ints >= 1, got {v!r}")
        g, b = (gx, gy, gz), (bx, by, bz)
        if gx > self.max_gx or gy > self.max_gy or gz > self.max_gz:
            raise InvalidArgumentError(
                f"launch of {self.name!r}: grid {g} exceeds {self.device}'s limits "
                f"({self.max_gx}, {self.max_gy}, {self.max_gz})"
            )
        if bx > self.max_bx or by > self.max_by or bz > self.max_bz:
            raise InvalidArgumentError(
                f"launch of {self.name!r}: block {b} exceeds {self.device}'s limits "
                f"({self.max_bx}, {self.max_by}, {self.max_bz})"
            )
        if bx * by * bz > self.max_threads:
            raise InvalidArgumentError(
                f"launch of {self.name!r}: block {b} has {bx * by * bz} threads; this kernel allows at most "
                f"{self.max_threads} per block on {self.device}"
            )
        if type(shared_mem) is not int or shared_mem < 0:
            raise InvalidArgumentError(f"launch of {self.name!r}: shared_mem must be an int >= 0, got {shared_mem!r}")
        if shared_mem > self.dyn_limit:
            most = self.optin - self.static_shared
            if shared_mem > most:
                raise InvalidArgumentError(
                    f"launch of {self.name!r}: {shared_mem} bytes of dynamic shared memory requested; {self.device} "
                    f"allows at most {most} for this kernel ({self.optin} per block, {self.static_shared} static)"
                )
            _driver.ensure_current(self.index)
            rc = _driver.libcuda().cuFuncSetAttribute(self.fn_c, 8, ctypes.c_int(shared_mem))
            _driver.check(rc, f"raising the dynamic shared-memory limit of {self.name!r} to {shared_mem}", self.index)
            self.dyn_limit = shared_mem
            for f in (self.fast, self.inner):  # a FastLaunch keeps its own copy
                try:
                    f.dyn_limit = shared_mem
                except AttributeError:
                    pass

    def replan(self, args: Sequence[Any], block: ParamBlock) -> Any:
        """Validate ``args`` fully, make a packer for their types and pack them into ``block``."""
        packer = make_packer(self.name, self.visible, args, self.device, self.arg_names)
        try:
            packer(args, self.device, block.buf)
        except (struct.error, OverflowError) as exc:  # e.g. a Python float beyond a float parameter's range
            raise InvalidArgumentError(f"arguments of kernel {self.name!r} do not fit its parameters: {exc}") from None
        return packer

    def failed(self, rc: int, g: tuple[int, int, int], b: tuple[int, int, int] | None, shm: int) -> None:
        if rc == 0:
            return None
        _driver.check(rc, f"launch of kernel {self.name!r} (grid {g}, block {b}, shared_mem {shm})", self.index)
        raise LaunchError(f"launch of kernel {self.name!r} failed with CUDA error {rc}")
