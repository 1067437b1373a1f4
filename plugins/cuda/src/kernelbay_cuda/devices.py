"""Device discovery and synchronisation."""

from __future__ import annotations

import ctypes
from typing import Any

from kernelbay.concurrency import OnceMap
from kernelbay.errors import LaunchError
from kernelbay.types import Device

from . import _driver

__all__ = ["devices", "synchronize", "sync_failed", "peer_access"]


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


_peer = OnceMap()  # (a, b) -> whether a can access b's memory


def peer_access(a: int, b: int) -> bool:
    """Enable access from device ``a`` to ``b``'s memory when the hardware allows it (once per
    pair; the answer is cached). ``False`` where it cannot be enabled: copies between the two
    still work, the driver stages them through host memory.

    Leaves device ``a``'s context current on this thread when it had to enable access.
    """
    return _peer.get_or_make((a, b), _enable_peer, a, b)


def _enable_peer(a: int, b: int) -> bool:
    lib = _driver.libcuda()
    d = _driver.driver()
    peer = _ctx_ptr(b)  # initialises the driver if nothing has yet
    # cuDeviceCanAccessPeer takes CUdevice handles, which need not equal ordinals.
    err, da = d.cuDeviceGet(a)
    err2, db = d.cuDeviceGet(b)
    if int(err) or int(err2):
        return False
    can = ctypes.c_int()
    if lib.cuDeviceCanAccessPeer(ctypes.byref(can), int(da), int(db)) or not can.value:
        return False
    _driver.ensure_current(a)
    rc = lib.cuCtxEnablePeerAccess(peer, 0)
    return rc in (0, 704)  # 704: CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED


def _ctx_ptr(index: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(int(_driver.context(index)))
