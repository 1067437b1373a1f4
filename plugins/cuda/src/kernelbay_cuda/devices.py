"""Device discovery and synchronisation."""

from __future__ import annotations

import ctypes
from typing import Any

from kernelbay.concurrency import OnceMap
from kernelbay.errors import LaunchError
from kernelbay.types import Device

from . import _driver

__all__ = ["devices", "sync_failed", "peer_access", "last_launch", "last_cell", "record"]

# The most recent launch per device, [kernel name, grid, block], for naming a kernel whose
# failure only shows at a later synchronise. Cells are mutated in place: generated fast paths
# hold a reference to their device's cell (three stores, no tuple per launch).
last_launch: dict[int, list[Any]] = {}


def last_cell(index: int) -> list[Any]:
    cell = last_launch.get(index)
    if cell is None:
        cell = last_launch.setdefault(index, [None, None, None])
    return cell


def record(index: int, name: str, g: Any, b: Any) -> None:
    cell = last_cell(index)
    cell[0] = name
    cell[1] = g
    cell[2] = b


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


def _dims(v: Any) -> Any:
    if type(v) is int:
        return (v, 1, 1)
    if type(v) is tuple and 1 <= len(v) < 3:
        return v + (1,) * (3 - len(v))
    return v


def sync_failed(index: int, rc: int) -> None:
    """Turn a failed synchronise into a LaunchError naming the most recent launch."""
    last = last_launch.get(index)
    if last and last[0] is not None:
        name, g, b = last
        g = _dims(g)  # the fast paths record sizes as the caller gave them
        b = _dims(b)
        what = f"kernel {name!r} (grid {g}, block {b}), the most recent launch on cuda:{index},"
    else:
        what = f"work queued on cuda:{index}"
    _driver.check(rc, f"{what} failed while running; synchronize", index)
    raise LaunchError(f"synchronize on cuda:{index} failed with CUDA error {rc}")


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
