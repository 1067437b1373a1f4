"""Threads that return early, under barrier loop fission. ``return;`` anywhere in a region's
statements ends the thread's call of that region (each region is a call per thread,
include/kb_cpu_fission.h). Where the region is the kernel's last (not inside a loop around split
points, no strided loop after it), that is all a return does. Elsewhere the thread must take no
part in the regions after it: the kernel keeps a flag per thread (``kb_done``), a return sets
it, and every region loops over the threads that have not returned (``KB_REGION_LIVE_BEGIN``:
its usual loop until some thread returns). What follows a return runs as on the fiber runner:
a warp operation whose group names a lane that returned fails with the fiber runner's message
(CUDA leaves it undefined), whole warps that returned take no part (llm.c's ``if (idx >= N)
return;`` with ``idx`` a warp's row, before ``cg::reduce`` over the warp), and a barrier that
some threads reach after others returned fails as the fiber runner's does (kb_cpu_fission.cpp).

``break`` and ``continue`` stay inside the statement of a region that holds them (a loop or a
``switch`` of that statement); one that would leave a loop around split points keeps fibers
(:func:`jumps`). ``while`` and ``do`` loops are a thread's own code, except beside atomics,
``__threadfence`` or a clock, where a thread may wait on a store of another thread of the block
without a barrier, which only fibers run (:func:`spins`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .fission_scan import loose_jump, pad

if TYPE_CHECKING:  # fission.py calls this module after the rewrite: the import runs one way
    from .fission_state import Rewrite

_RETURN = re.compile(r"\breturn\s*;")
_LOOPS = re.compile(r"\b(?:while|do|break)\b|\bfor\s*\([^;()]*;\s*;")
_WAITS = re.compile(r"\b(?:atomic\w*|__threadfence\w*|__nanosleep|clock\w*)\s*\(")
_LIVE = "kb_fb.live(kb_done, kb_any_done)"


_LAMBDA = re.compile(r"\[[^\[\];]*\]\s*(?:\([^()]*\)\s*)?(?:mutable\s*)?(?:->\s*[\w:<>*&\s]+?)?\{")


def lambda_beside_return(body: str) -> int:
    """The offset in ``body`` of a lambda where the body also returns (whose ``return;`` is the
    lambda's, not the thread's), or -1."""
    m = _LAMBDA.search(body)
    return m.start() if m and _RETURN.search(body) else -1


def spins(body: str) -> int:
    """The offset in ``body`` of a loop a thread may spin in on another thread's store (a
    ``while`` or ``do`` loop, one that may ``break`` or has no condition, beside atomics, fences
    or clocks), or -1."""
    m = _LOOPS.search(body)
    return m.start() if m and _WAITS.search(body) else -1


def jumps(rw: Rewrite, s: int, e: int) -> int:
    """The offset of a ``break`` or ``continue`` in the region statement ``code[s:e]`` that
    leaves it (for a loop around split points), or -1."""
    return loose_jump(rw.code, s, e)


def exits(rw: Rewrite) -> None:
    """Make the finished rewrite ``rw`` one whose returns end their thread (module docstring)."""
    a = rw.body_end - len(rw.body_code)
    rets = [(a + m.start(), a + m.end()) for m in _RETURN.finditer(rw.body_code)]
    if not rets:
        return
    last = rw.regions[-1] if rw.regions else None
    if (
        last is not None
        and last.loop_start < 0
        and all(last.start <= k < last.end for k, _ in rets)
        and all(k < last.start for k in rw.strided_starts)
    ):
        return  # the thread's last call: nothing after it runs for the thread
    rw.live = True
    for i, (at, end, rep) in enumerate(rw.edits):
        rep = rep.replace(" KB_REGION_BEGIN ", " KB_REGION_LIVE_BEGIN ")
        rep = rep.replace(" KB_REGION_RANGE_BEGIN(", " KB_REGION_RANGE_LIVE_BEGIN(")
        rep = rep.replace(" KB_STRIDED_BEGIN(", " KB_STRIDED_LIVE_BEGIN(")
        rep = rep.replace(" KB_LANES_BEGIN(", " KB_LANES_LIVE_BEGIN(")
        rw.edits[i] = (at, end, re.sub(r"\(kb_fb(?=[,.])", f"({_LIVE}", rep))
    for i, tile, line in rw.syncs:
        at, end, _ = rw.edits[i]
        if tile:
            call = f"::kb_cpu::fis::exited({_LIVE}, ::kb_cpu::W_SYNC, 0u, {tile}u, {line});"
        else:
            call = f"::kb_cpu::fis::barrier({_LIVE}, {line});"
        rw.edits[i] = (at, end, pad(call, rw.text[at:end]))
    for k, j in rets:
        rw.edits.append((k, j, pad(" KB_RETURN ", rw.text[k:j])))
