"""Thread-safe building blocks shared by the core and backends."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["OnceMap"]

V = TypeVar("V")
_MISSING: Any = object()


class OnceMap(dict):
    """A dict whose missing values are made once, even when many threads ask at the same time
    (a lock-free read, then a second look under the lock before making the value)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def get_or_make(self, key: Any, make: Callable[..., V], *args: Any) -> V:
        """``self[key]``, made with ``make(*args)`` and stored the first time; if ``make``
        raises, nothing is stored and the next call tries again."""
        v = self.get(key, _MISSING)
        if v is _MISSING:
            with self._lock:
                v = self.get(key, _MISSING)
                if v is _MISSING:
                    v = self[key] = make(*args)
        return v
