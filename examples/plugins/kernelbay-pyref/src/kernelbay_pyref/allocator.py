"""Memory: a bytearray per buffer; the host can address it, so .numpy() shares it.

numpy is imported inside the functions that use it: the core imports plugin.py (and so this
module) to select a device, and a backend nobody picked must not cost numpy's import.
"""

from __future__ import annotations

from typing import Any

import kernelbay as kb


def allocate(device: kb.Device, nbytes: int) -> bytearray:
    return bytearray(nbytes)


def free(device: kb.Device, handle: bytearray) -> None:
    # The bytearray goes with its last reference; views handed out keep it alive.
    return None


def as_bytes(side: Any) -> Any:
    """The bytes of a copy's side (a kb.Buffer of ours, or a C-contiguous numpy array) as a
    uint8 numpy array that shares its memory."""
    import numpy as np

    if isinstance(side, kb.Buffer):
        return np.frombuffer(side.checked_handle(), np.uint8)
    return side.reshape(-1).view(np.uint8)


def copy(dst: Any, src: Any, nbytes: int, stream: Any) -> None:
    # Every call finishes before it returns, so the stream changes nothing.
    as_bytes(dst)[:nbytes] = as_bytes(src)[:nbytes]


def host_view(array: kb.Array) -> Any:
    import numpy as np

    return np.frombuffer(array.checked_handle(), array.dtype).reshape(array.shape)
