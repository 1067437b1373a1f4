"""The CUDA driver and NVRTC: loading, the fork-safe probe, primary contexts, and ``check``.

Nothing here imports ``cuda.bindings`` at module import. The probe never calls ``cuInit`` in
this process unless the driver is already initialised here (by us, CuPy, PyTorch...): a process
whose parent called ``cuInit`` cannot use CUDA in a forked child, so counting devices is done in
a short-lived child interpreter instead (about 0.1-0.3 s, once per process).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
from typing import Any

from kernelbay.errors import (
    BackendUnavailableError,
    CompileError,
    InvalidArgumentError,
    KernelbayError,
    LaunchError,
    OutOfMemoryError,
    UnsupportedError,
)

from ._install import extra_for, install_hint, nvrtc_package

__all__ = ["CudaError", "check", "driver", "nvrtc", "libcuda", "probe", "context", "ensure_current"]

_lock = threading.RLock()
_mods: dict[str, Any] = {}


class CudaError(KernelbayError):
    """A CUDA driver or NVRTC call failed in a way no more specific kernelbay error describes.

    :ivar code: the numeric status.
    """

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


def driver() -> Any:
    m = _mods.get("driver")
    if m is None:
        # deferred for speed; a compiled module without type stubs
        from cuda.bindings import driver as mod  # pyright: ignore[reportAttributeAccessIssue]

        m = _mods["driver"] = mod
    return m


def nvrtc() -> Any:
    m = _mods.get("nvrtc")
    if m is None:
        # deferred for speed; a compiled module without type stubs
        from cuda.bindings import nvrtc as mod  # pyright: ignore[reportAttributeAccessIssue]

        m = _mods["nvrtc"] = mod
    return m


_libcuda: ctypes.CDLL | None = None


def libcuda() -> ctypes.CDLL:
    """libcuda.so.1 through ctypes (the same library cuda.bindings loads)."""
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1" if sys.platform != "win32" else "nvcuda.dll")
    return _libcuda


# --- status codes ------------------------------------------------------------------------

# Failures of a running kernel: the context is unusable afterwards ("sticky").
STICKY = {700, 710, 714, 715, 716, 717, 719, 720, 999}
LAUNCH = STICKY | {701, 702, 718, 98, 209, 400}
OOM = {2}
COMPILE = {200, 209, 218, 222, 224, 225}
UNAVAILABLE = {35, 100, 101, 803, 804}
UNSUPPORTED = {801}
INVALID = {1, 12, 33, 201, 400}

_dead: dict[int, str] = {}  # device index -> why its context is unusable

# The kernelbay error for a status (after the sticky ones), first match wins: 400 is a launch
# error, 209 a launch error rather than a compile one.
_ERRORS: tuple[tuple[set[int], type[Exception], str], ...] = (
    (OOM, OutOfMemoryError, ": "),
    (LAUNCH, LaunchError, " failed: "),
    (COMPILE, CompileError, " failed: "),
    (UNAVAILABLE, BackendUnavailableError, " failed: "),
    (UNSUPPORTED, UnsupportedError, ": "),
    (INVALID, InvalidArgumentError, " failed: "),
)


def error_name(code: int) -> str:
    try:
        d = driver()
        err, name = d.cuGetErrorName(d.CUresult(code))
        err2, text = d.cuGetErrorString(d.CUresult(code))
        return f"{name.decode()}: {text.decode()}" if not int(err) and not int(err2) else f"CUDA error {code}"
    except Exception:
        return f"CUDA error {code}"


def check(status: Any, what: str = "CUDA call", device: int | None = None) -> None:
    """Raise the kernelbay error for a CUresult/nvrtcResult (or a tuple whose first item is one).

    Status 0 returns. ``device`` names the device whose context a sticky failure kills.
    """
    if type(status) is tuple:
        status = status[0]
    code = int(status)
    if code == 0:
        return
    if type(status).__name__ == "nvrtcResult":
        try:
            name = nvrtc().nvrtcGetErrorString(status)[1].decode()
        except Exception:
            name = f"NVRTC error {code}"
        raise CompileError(f"{what} failed: {name}")
    name = error_name(code)
    where = f" on cuda:{device}" if device is not None else ""
    if code in STICKY:
        msg = f"{what}{where} failed: {name}"
        if device is not None:
            _dead.setdefault(device, msg)
        raise LaunchError(
            msg + ". The device's CUDA context is now unusable: every later CUDA call in this process "
            "fails; restart the process (run the failing kernel under compute-sanitizer to find the cause)"
        )
    if device is not None and device in _dead:
        raise LaunchError(f"{what}{where} failed ({name}) because the context died earlier: {_dead[device]}")
    for codes, error, sep in _ERRORS:
        if code in codes:
            raise error(f"{what}{where}{sep}{name}")
    raise CudaError(f"{what}{where} failed: {name}", code)


def dead_reason(device: int) -> str | None:
    return _dead.get(device)


# --- probe -------------------------------------------------------------------------------

# Run in a child interpreter (or here, when the driver is already initialised here). Uses
# ctypes only, so it starts fast with -I -S.
_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL("libcuda.so.1")
def attr(a, d):
    v = ctypes.c_int(); r = lib.cuDeviceGetAttribute(ctypes.byref(v), a, d); return v.value if r == 0 else None
def probe():
    r = lib.cuInit(0)
    if r:
        return {"error": r}
    n = ctypes.c_int(); r = lib.cuDeviceGetCount(ctypes.byref(n))
    if r:
        return {"error": r}
    out = []
    for i in range(n.value):
        d = ctypes.c_int(); lib.cuDeviceGet(ctypes.byref(d), i); d = d.value
        name = ctypes.create_string_buffer(256); lib.cuDeviceGetName(name, 256, d)
        mem = ctypes.c_size_t(); lib.cuDeviceTotalMem_v2(ctypes.byref(mem), d)
        bus = ctypes.create_string_buffer(64); lib.cuDeviceGetPCIBusId(bus, 64, d)
        A = dict(cc_major=75, cc_minor=76, multiprocessor_count=16, max_threads_per_block=1,
                 max_block_x=2, max_block_y=3, max_block_z=4, max_grid_x=5, max_grid_y=6, max_grid_z=7,
                 max_shared_per_block=8, max_shared_per_block_optin=97, warp_size=10, l2_cache_bytes=38,
                 clock_khz=13, memory_bus_width=37, unified_addressing=41, integrated=18,
                 concurrent_managed_access=89, async_engine_count=40)
        info = {k: attr(a, d) for k, a in A.items()}
        info.update(name=name.value.decode(), total_memory=mem.value, pci_bus_id=bus.value.decode())
        out.append(info)
    return {"devices": out}
RESULT = probe()
if __name__ == "__main__":
    sys.stdout.write(json.dumps(RESULT))
"""

_probe_result: list[dict[str, Any]] | None = None


def _bindings_major() -> tuple[int, str]:
    try:
        from importlib.metadata import version  # deferred for speed: only the probe needs it

        v = version("cuda-bindings")
    except Exception:
        try:
            from cuda.bindings import __version__  # deferred for speed
        except Exception:
            return 0, "unknown"
        v = __version__
    try:
        return int(v.split(".")[0]), v
    except ValueError:
        return 0, v


def _driver_initialised(lib: ctypes.CDLL) -> bool:
    n = ctypes.c_int()
    return lib.cuDeviceGetCount(ctypes.byref(n)) == 0


def probe() -> list[dict[str, Any]]:
    """The devices as dicts of facts; raises BackendUnavailableError with a specific reason."""
    global _probe_result
    if _probe_result is not None:
        return _probe_result
    with _lock:
        if _probe_result is not None:
            return _probe_result
        try:
            lib = libcuda()
        except OSError as exc:
            raise BackendUnavailableError(
                f"no NVIDIA driver found (libcuda.so.1 could not be loaded: {exc}); install the NVIDIA "
                "driver, or set KERNELBAY_DEVICE=cpu to use another backend"
            ) from None
        ver = ctypes.c_int()
        lib.cuDriverGetVersion(ctypes.byref(ver))
        dmaj, dmin = ver.value // 1000, (ver.value % 1000) // 10
        bmaj, bver = _bindings_major()
        if not bmaj:
            raise BackendUnavailableError(
                f"cuda-bindings is not installed (kernelbay-cuda's base install carries no CUDA "
                f"libraries); {install_hint(dmaj)}"
            )
        if dmaj < bmaj:
            raise BackendUnavailableError(
                f"the NVIDIA driver is too old: it supports CUDA {dmaj}.{dmin}, but the installed cuda-bindings {bver} "
                f"needs a CUDA {bmaj}.x driver; "
                + (f"upgrade the driver, or {install_hint(dmaj)}" if extra_for(dmaj) else install_hint(dmaj))
            )
        try:
            err, _, _ = nvrtc().nvrtcVersion()
            if int(err):
                raise RuntimeError(f"nvrtcVersion returned {err}")
        except Exception as exc:
            raise BackendUnavailableError(
                f"NVRTC (the CUDA runtime compiler) is missing: {exc}; install {nvrtc_package(bmaj)} "
                f"(it comes with {install_hint(dmaj)})"
            ) from None
        if _driver_initialised(lib) or os.environ.get("KERNELBAY_CUDA_PROBE") == "inprocess":
            ns: dict[str, Any] = {"__name__": "kernelbay_cuda_probe"}
            exec(_PROBE, ns)
            result = ns["RESULT"]
        else:
            try:
                cp = subprocess.run(
                    [sys.executable, "-I", "-S", "-c", _PROBE],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                result = json.loads(cp.stdout) if cp.returncode == 0 else {"error": -1, "stderr": cp.stderr}
            except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as exc:
                result = {"error": -1, "stderr": str(exc)}
        if "error" in result:
            code = result["error"]
            vis = os.environ.get("CUDA_VISIBLE_DEVICES")
            hint = f" (CUDA_VISIBLE_DEVICES={vis!r})" if vis is not None else ""
            if code == 100:
                raise BackendUnavailableError(
                    f"the NVIDIA driver (CUDA {dmaj}.{dmin}) found no CUDA device{hint}; "
                    "set KERNELBAY_DEVICE=cpu to use another backend"
                )
            if code == 35:
                raise BackendUnavailableError(
                    f"the NVIDIA driver (CUDA {dmaj}.{dmin}) is too old for this CUDA; upgrade the driver"
                )
            detail = result.get("stderr", "").strip().splitlines()[-1:] or [error_name(code)]
            raise BackendUnavailableError(f"the CUDA driver could not be initialised: {detail[0]}{hint}")
        devs = result["devices"]
        if not devs:
            raise BackendUnavailableError("the NVIDIA driver found no CUDA device; set KERNELBAY_DEVICE=cpu")
        for d in devs:
            d["driver_version"] = f"{dmaj}.{dmin}"
        _probe_result = devs
        return devs


# --- contexts ----------------------------------------------------------------------------


class _TLS(threading.local):
    dev: int = -1


_tls = _TLS()
_ctx: dict[int, Any] = {}  # device index -> primary context (CUcontext)
_init_pid: int | None = None


def _after_fork_in_child() -> None:
    # A fork()ed child of a process that called cuInit cannot use CUDA (the driver's state is
    # the parent's): context() then raises LaunchError naming 'spawn'/'forkserver', as PyTorch's
    # "cannot re-initialize CUDA in forked subprocess" does. A child of a process that only
    # probed (the probe runs cuInit in a short-lived child interpreter) can use CUDA.
    # tests/cuda/test_fork.py checks this without a GPU.
    _tls.dev = -1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def context(index: int) -> Any:
    """The device's primary context, retained (and the driver initialised) on first use."""
    global _init_pid
    c = _ctx.get(index)
    if c is not None and _init_pid == os.getpid():
        return c
    with _lock:
        pid = os.getpid()
        if _init_pid is not None and _init_pid != pid:
            raise LaunchError(
                "CUDA was initialised in this process's parent before fork(); a forked child cannot use "
                "it. Start worker processes with the 'spawn' or 'forkserver' method"
            )
        c = _ctx.get(index)
        if c is not None:
            return c
        d = driver()
        check(d.cuInit(0), "cuInit")
        _init_pid = pid
        err, dev = d.cuDeviceGet(index)
        check(err, f"cuDeviceGet({index})")
        err, c = d.cuDevicePrimaryCtxRetain(dev)
        check(err, f"retaining the primary context of cuda:{index}")
        _ctx[index] = c
        return c


def ensure_current(index: int) -> None:
    """Make device ``index``'s primary context current on this thread (cheap when it is)."""
    if _tls.dev == index:
        return
    c = context(index)
    check(driver().cuCtxSetCurrent(c), "cuCtxSetCurrent", index)
    _tls.dev = index


def force_current(index: int) -> None:
    """Make device ``index``'s context current even where this thread's record says it is (another
    library may have switched the context since)."""
    _tls.dev = -1
    ensure_current(index)


def current_index() -> int:
    return _tls.dev


def check_alive(index: int) -> None:
    why = _dead.get(index)
    if why is not None:
        raise LaunchError(f"cuda:{index} is unusable after an earlier failure: {why}; restart the process")
