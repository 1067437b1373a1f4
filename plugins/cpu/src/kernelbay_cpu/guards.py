"""The guard pages after cpu buffers (allocator.py) and what a faulting address was.

A leaf module: the allocator records each guarded buffer here, and the launch error
(:func:`kernelbay_cpu._driver.check`) reads it back to name the buffer a kernel overran.
"""

from __future__ import annotations

import mmap

__all__ = ["PAGE", "guards", "describe_address"]

PAGE = mmap.PAGESIZE
#: guard page address -> (buffer address, nbytes), for every live guarded buffer
guards: dict[int, tuple[int, int]] = {}


def describe_address(addr: int | None) -> str:
    """What a faulting address was, as far as kernelbay knows: a null pointer, or past the end of
    one of its buffers (the guard page after it)."""
    if addr is None:
        return ""
    if addr < 65536:
        return f" (a null pointer{'' if addr == 0 else f' plus {addr} bytes'})"
    hit = guards.get(addr & ~(PAGE - 1))
    if hit is not None:
        ptr, n = hit
        return f" ({addr - ptr - n} bytes past the end of a {n}-byte kernelbay buffer at 0x{ptr:x}: out of bounds)"
    return ""
