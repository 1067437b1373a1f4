"""The kernel object: what the backend keeps per compiled kernel, and its launch plan.

A :class:`CudaKernel` holds the driver function, the device limits a launch is checked
against, the parameter layout and one reusable parameter block (:class:`.packing.ParamBlock`).
Its plan for a launch -- the grid, block and shared memory it runs with (:meth:`~CudaKernel.geometry`),
the stream it is queued on (:meth:`~CudaKernel.stream_arg`), a block holding its arguments
(:meth:`~CudaKernel.packed_block`) -- is worked out here, once, for the launcher's slow path and
for graph nodes alike. ``entry`` is its launch entry, given by :func:`.launcher.arm` when it is made.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kernelbay.errors import InvalidArgumentError, LaunchError
from kernelbay.types import Device, dim3

from . import _driver, launcher
from .packing import ParamBlock, ParamSpec, make_packer, never
from .streams import ctypes_stream

__all__ = ["CudaKernel", "Dim3"]

if TYPE_CHECKING:
    from .modules import Module  # for annotations only

Dim3 = tuple[int, int, int]

# cuFuncGetAttribute / cuFuncSetAttribute: CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
# ..._SHARED_SIZE_BYTES (static), ..._MAX_DYNAMIC_SHARED_SIZE_BYTES.
_MAX_THREADS, _STATIC_SHARED, _MAX_DYNAMIC_SHARED = 0, 1, 8


class CudaKernel:
    """The handle the CUDA backend keeps for a compiled kernel (``Kernel.handle``).

    :ivar function: the CUfunction, as an int.
    :ivar ctypes_function: the same as a ``ctypes.c_void_p``, for calls through ctypes.
    :ivar params: every parameter's :data:`.packing.ParamSpec`.
    :ivar caller_params: those a caller passes (a Triton kernel's trailing scratch pointers are
        kernelbay's).
    :ivar param_block: the parameter block of the kernel's first launching thread.
    :ivar first_thread: that thread's ident (-1 before the first launch).
    :ivar entry: the launch entry (:func:`.launcher.arm`); ``inner_entry``: the one behind a
        Triton kernel's scratch filler.
    :ivar last_packed: the values the generated Python fast path packed last (compared by the
        next launch to skip packing).
    :ivar scratch_pointers: parameter offset -> the scratch pointer kernelbay keeps in every
        parameter block of the kernel.
    """

    __slots__ = (
        "device",
        "index",
        "name",
        "symbol",
        "module",
        "function",
        "ctypes_function",
        "params",
        "caller_params",
        "param_block",
        "packer",
        "first_thread",
        "max_threads",
        "max_gx",
        "max_gy",
        "max_gz",
        "max_bx",
        "max_by",
        "max_bz",
        "static_shared",
        "dynamic_shared_limit",
        "max_shared_optin",
        "auto_block",
        "other_threads",
        "lock",
        "entry",
        "inner_entry",
        "last_packed",
        "arg_names",
        "fixed_block",
        "extra_shared",
        "scratch",
        "scratch_buffers",
        "scratch_pointers",
        "__weakref__",
    )

    def __init__(
        self,
        device: Device,
        module: Module,
        expr: str,
        symbol: str,
        params: list[ParamSpec] | None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        p = device.properties
        self.device = device
        self.index = device.index
        self.name = expr
        self.symbol = symbol
        self.module = module
        self.function = module.function(symbol)
        self.ctypes_function = ctypes.c_void_p(self.function)
        lib = _driver.libcuda()
        self.max_threads = self._attr(lib, _MAX_THREADS) or p.get("max_threads_per_block") or 1024
        self.static_shared = self._attr(lib, _STATIC_SHARED) or 0
        self.max_shared_optin = max(p.get("max_shared_per_block_optin") or 0, p.get("max_shared_per_block") or 49152)
        self.dynamic_shared_limit = max(0, (p.get("max_shared_per_block") or 49152) - self.static_shared)
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
        self.caller_params = params
        self.arg_names: list[str] | None = None
        #: A block every launch uses (Triton: 32 x num_warps), and shared memory added to each launch.
        self.fixed_block: Dim3 | None = None
        self.extra_shared = 0
        #: Per trailing hidden pointer: (bytes per program, alignment); see :meth:`apply`.
        self.scratch: list[tuple[int, int]] = []
        self.scratch_buffers: list[Any] | None = None  # the scratch buffers, where the kernel has any
        self.scratch_pointers: dict[int, int] = {}
        self.param_block = ParamBlock(params)
        self.packer = never
        self.entry: Any = None
        self.inner_entry: Any = None
        self.last_packed: list[Any] = [launcher.STALE]
        self.first_thread = -1
        self.auto_block: dict[int, int] = {}
        self.other_threads: dict[int, tuple[ParamBlock, Any]] = {}
        self.lock = threading.Lock()
        if settings:
            self.apply(settings)
        launcher.arm(self)

    def apply(self, settings: dict[str, Any]) -> None:
        """Take a compiler's launch settings (Triton's, see :mod:`.triton_kernels`)."""
        hidden = int(settings.get("hidden", 0))
        if hidden > len(self.params):
            raise InvalidArgumentError(f"kernel {self.name!r}: {hidden} hidden parameters of {len(self.params)}")
        self.caller_params = self.params[: len(self.params) - hidden]
        self.arg_names = list(settings.get("arg_names") or []) or None
        self.scratch = [tuple(x) for x in settings.get("scratch", [])]
        block = settings.get("block")
        self.fixed_block = (int(block), 1, 1) if block else None
        self.extra_shared = int(settings.get("shared", 0))
        if self.fixed_block is not None and self.extra_shared > self.dynamic_shared_limit:
            self.check_geometry(1, 1, 1, *self.fixed_block, self.extra_shared)  # raises the kernel's limit

    def _attr(self, lib: ctypes.CDLL, attr: int) -> int | None:
        v = ctypes.c_int()
        return v.value if lib.cuFuncGetAttribute(ctypes.byref(v), attr, self.ctypes_function) == 0 else None

    def _driver_params(self, lib: ctypes.CDLL) -> list[ParamSpec] | None:
        f = getattr(lib, "cuFuncGetParamInfo", None)
        if f is None:
            return None
        out: list[ParamSpec] = []
        off, size = ctypes.c_size_t(), ctypes.c_size_t()
        for i in range(4096):
            rc = f(self.ctypes_function, ctypes.c_size_t(i), ctypes.byref(off), ctypes.byref(size))
            if rc:
                if i == 0 and rc != 1:  # not supported for this function: fall back to PTX
                    return None
                break
            out.append((size.value, 1, "", off.value))
        return out

    # --- the plan of a launch (the slow path's and a graph node's) ------------------------

    def geometry(self, grid: Any, block: Any, shared_mem: Any) -> tuple[Dim3, Dim3, int]:
        """The grid, block and dynamic shared memory a launch given ``grid``, ``block`` and
        ``shared_mem`` runs with: a fixed block (Triton's) with its added shared memory, the
        occupancy block for ``block=None``. Checked against the device's limits; raises the
        kernel's dynamic shared-memory limit where the request needs it.

        :raises InvalidArgumentError: for a geometry outside the limits.
        """
        g = (grid, 1, 1) if type(grid) is int else dim3(grid, "grid")
        if self.fixed_block is not None:
            if block is not None and dim3(block, "block") != self.fixed_block:
                raise InvalidArgumentError(
                    f"launch of {self.name!r}: its block is fixed at {self.fixed_block} (Triton: 32 x num_warps), "
                    f"got {block!r}; leave block out"
                )
            b = self.fixed_block
            if type(shared_mem) is not int or shared_mem < 0:
                raise InvalidArgumentError(
                    f"launch of {self.name!r}: shared_mem must be an int >= 0, got {shared_mem!r}"
                )
            shared_mem += self.extra_shared
        elif block is None:
            b = (self.auto_block.get(shared_mem) or self.occupancy_block(shared_mem), 1, 1)
        elif type(block) is int:
            b = (block, 1, 1)
        else:
            b = dim3(block, "block")
        gx, gy, gz = g
        bx, by, bz = b
        if not (
            0 < gx <= self.max_gx
            and gy <= self.max_gy
            and gz <= self.max_gz
            and 0 < bx * by * bz <= self.max_threads
            and bx <= self.max_bx
            and by <= self.max_by
            and bz <= self.max_bz
            and type(shared_mem) is int
            and 0 <= shared_mem <= self.dynamic_shared_limit
        ):
            self.check_geometry(gx, gy, gz, bx, by, bz, shared_mem)
        return g, b, shared_mem

    def stream_arg(self, stream: Any) -> ctypes.c_void_p | None:
        """The CUstream a launch given ``stream`` (not ``None``) is queued on, for ctypes.

        :raises InvalidArgumentError: for a stream of another device.
        """
        return ctypes_stream(stream, self.device, f"launch of {self.name!r}")

    def new_param_block(self) -> ParamBlock:
        """A parameter block of the kernel's layout, holding the scratch pointers every block of
        it keeps (for a thread's own launches, or a graph node)."""
        blk = ParamBlock(self.params)
        for off, ptr in self.scratch_pointers.items():
            struct.pack_into("<Q", blk.buf, off, ptr)
        return blk

    def packed_block(self, args: Sequence[Any], grid: Dim3) -> tuple[ParamBlock, list[Any]]:
        """A new parameter block holding ``args`` (validated fully) and, for a kernel with
        scratch, pointers to scratch buffers large enough for ``grid``; with the scratch buffers,
        which whoever keeps the block must keep alive too (a kernel's own grow and are replaced)."""
        if self.scratch_buffers is not None:
            launcher.fill_scratch(self, grid)
        blk = self.new_param_block()
        self.replan(args, blk)
        return blk, list(self.scratch_buffers or ())

    # --- the slow paths of launch -------------------------------------------------------

    def occupancy_block(self, shared_mem: int) -> int:
        b = self.auto_block.get(shared_mem)
        if b is None:
            _driver.ensure_current(self.index)
            mg, bs = ctypes.c_int(), ctypes.c_int()
            rc = _driver.libcuda().cuOccupancyMaxPotentialBlockSize(
                ctypes.byref(mg), ctypes.byref(bs), self.ctypes_function, None, ctypes.c_size_t(shared_mem), 0
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
        if shared_mem > self.dynamic_shared_limit:
            most = self.max_shared_optin - self.static_shared
            if shared_mem > most:
                raise InvalidArgumentError(
                    f"launch of {self.name!r}: {shared_mem} bytes of dynamic shared memory requested; {self.device} "
                    f"allows at most {most} for this kernel ({self.max_shared_optin} per block, "
                    f"{self.static_shared} static)"
                )
            _driver.ensure_current(self.index)
            rc = _driver.libcuda().cuFuncSetAttribute(
                self.ctypes_function, _MAX_DYNAMIC_SHARED, ctypes.c_int(shared_mem)
            )
            _driver.check(rc, f"raising the dynamic shared-memory limit of {self.name!r} to {shared_mem}", self.index)
            self.dynamic_shared_limit = shared_mem
            for f in (self.entry, self.inner_entry):  # a FastLaunch keeps its own copy
                try:
                    f.dynamic_shared_limit = shared_mem
                except AttributeError:
                    pass

    def replan(self, args: Sequence[Any], block: ParamBlock) -> Any:
        """Validate ``args`` fully, make a packer for their types and pack them into ``block``."""
        packer = make_packer(self.name, self.caller_params, args, self.device, self.arg_names)
        try:
            packer(args, self.device, block.buf)
        except (struct.error, OverflowError) as exc:  # e.g. a Python float beyond a float parameter's range
            raise InvalidArgumentError(f"arguments of kernel {self.name!r} do not fit its parameters: {exc}") from None
        return packer

    def failed(self, rc: int, g: Dim3, b: Dim3 | None, shm: int) -> None:
        if rc == 0:
            return None
        _driver.check(rc, f"launch of kernel {self.name!r} (grid {g}, block {b}, shared_mem {shm})", self.index)
        raise LaunchError(f"launch of kernel {self.name!r} failed with CUDA error {rc}")
