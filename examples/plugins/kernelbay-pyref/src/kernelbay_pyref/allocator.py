"""Memory: a bytearray per buffer; the host can address it, so .numpy() shares it."""

from __future__ import annotations

from typing import Any

import kernelbay as kb
import numpy as np


def allocate(nbytes: int) -> bytearray:
    return bytearray(nbytes)


def free(handle: bytearray) -> None:
    # The bytearray goes with its last reference; views handed out keep it alive.
    return None


def _bytes(side: Any) -> np.ndarray:
    if isinstance(side, kb.Buffer):
        return np.frombuffer(side.checked_handle(), np.uint8)
    return side.reshape(-1).view(np.uint8)


def copy(dst: Any, src: Any, nbytes: int) -> None:
    _bytes(dst)[:nbytes] = _bytes(src)[:nbytes]


def view(array: kb.Array) -> np.ndarray:
    return np.frombuffer(array.checked_handle(), array.dtype).reshape(array.shape)
