"""Device discovery and synchronisation."""

from __future__ import annotations

import ctypes
from typing import Any

from kernelbay.errors import LaunchError
from kernelbay.types import Device

from . import _driver

__all__ = ["devices", "synchronize", "sync_failed"]


def devices() -> list[Device]:
    """The ``kernelbay_devices`` hook: probe without creating a context in this process."""
    out = []
    for i, d in enumerate(_driver.probe()):
        cc = (d["cc_major"], d["cc_minor"])
        props = dict(d)
        props["compute_capability"] = cc
        props["arch"] = f"sm_{cc[0]}{cc[1]}"
        out.append(Device("cuda", i, d["name"], props))
    return out


def sync_failed(index: int, rc: int) -> None:
    """Turn a failed synchronise into a LaunchError naming the most recent launch."""
    from .launcher import last_launch

    last = last_launch.get(index)
    if last and last[0] is not None:
        name, g, b = last
        g = (g, 1, 1) if type(g) is int else g  # the fast path records 1-D sizes as ints
        b = (b, 1, 1) if type(b) is int else b
        what = f"kernel {name!r} (grid {g}, block {b}), the most recent launch on cuda:{index},"
    else:
        what = f"work queued on cuda:{index}"
    _driver.check(rc, f"{what} failed while running; synchronize", index)
    raise LaunchError(f"synchronize on cuda:{index} failed with CUDA error {rc}")


def synchronize(device: Any, stream: Any) -> None:
    """The ``kernelbay_synchronize`` hook."""
    idx = device.index
    _driver.check_alive(idx)
    _driver.ensure_current(idx)
    lib = _driver.libcuda()
    if stream is None:
        rc = lib.cuCtxSynchronize()
    else:
        from .streams import as_stream

        rc = lib.cuStreamSynchronize(as_stream(stream, device).cvp)
    if rc:
        sync_failed(idx, rc)


def peer_access(a: int, b: int) -> bool:
    """Enable access from device ``a`` to ``b`` when the hardware allows it."""
    lib = _driver.libcuda()
    can = ctypes.c_int()
    if lib.cuDeviceCanAccessPeer(ctypes.byref(can), a, b) or not can.value:
        return False
    _driver.ensure_current(a)
    rc = lib.cuCtxEnablePeerAccess(_ctx_ptr(b), 0)
    return rc in (0, 704)  # 704: already enabled


def _ctx_ptr(index: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(int(_driver.context(index)))
