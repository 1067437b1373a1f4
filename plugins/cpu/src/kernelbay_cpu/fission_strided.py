"""Block-strided loops as regions of their own. A statement ``for (int i = threadIdx.x; i < n;
i += blockDim.x) body`` (the start the thread's x index, ``n`` and the step what every thread
computes alike, ``i`` and those never written in the body) runs each thread over ``i = t, t +
step, ...``. Between two barriers the threads may interleave in any order that keeps each one's,
so in a block of one dimension whose step is ``blockDim.x`` it runs as one vector loop over ``i``
itself, chunk after chunk of ``blockDim.x`` (thread ``t`` at ``i = chunk + t``), instead of a
loop over the threads around a loop of a few strided iterations each (include/kb_cpu_fission.h:
KB_STRIDED_BEGIN; other blocks run it as written). The statements before and after it in its
region are regions of their own.

The step may be a multiple of ``blockDim.x`` (llm.c's softmax kernel7 steps by ``blockDim.x *
UNROLL_FACTOR``): chunks of the step, each thread at its index in each. A loop over a warp's
lanes (``for (int i = lane; i < n; i += warpSize)``) is fission_lanes.py's."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .fission_ranges import thread_index
from .fission_scan import closing, loose_jump, pad, skip_ws
from .fission_state import TYPE

if TYPE_CHECKING:
    from .fission_state import Rewrite

_INIT = re.compile(rf"\s*(?P<type>{TYPE})\s+(?P<i>[A-Za-z_]\w*)\s*=(?P<start>.*)", re.S)


def _writes(name: str, code: str) -> bool:
    return (
        re.search(
            rf"(?<![\w.])(?<!->){name}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--|(?<!&)&)\s*{name}\b(?!\s*\[)|\b{name}\s*(?:\+\+|--)",
            code,
        )
        is not None
    )


def strided(rw: Rewrite, s: int, e: int) -> bool:
    """Rewrite ``code[s:e]`` as a block-strided loop's region if it is one (closing the open
    region before it); False where it is not one."""
    code = rw.code
    if not re.match(r"for\s*\(", code[s:e]):
        return False
    paren = code.index("(", s)
    close = closing(code, paren)
    if close < 0 or close >= e:
        return False
    parts = code[paren + 1 : close].split(";")
    if len(parts) != 3:
        return False
    m = _INIT.fullmatch(parts[0])
    if not m or "*" in m.group("type") or not thread_index(rw, m.group("start"), ranks=False):
        return False
    i = m.group("i")
    cond = re.fullmatch(rf"\s*{i}\s*<(?!=)(.*)", parts[1], re.S)
    step = re.fullmatch(rf"\s*(?:{i}\s*\+=(.*)|{i}\s*=\s*{i}\s*\+(.*))", parts[2], re.S)
    if not cond or not step:
        return False
    g = 1 if step.group(1) is not None else 2
    end, by = cond.group(1), step.group(g)
    body = code[close + 1 : e]
    if not rw.uniform(end) or not rw.uniform(by):
        return False
    # the names it reads (not members: blockDim.x is no local x)
    words = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*\b", end + " " + by)) | {i}
    if any(_writes(w, body) for w in words):
        return False
    # each (thread, i) is a call of its own: a return or a jump out of the loop stays as written
    if re.search(r"\breturn\b", body) or loose_jump(code, close + 1, e) >= 0:
        return False
    rw.flush()
    rw.strided_starts.append(s)
    p1 = paren + 1 + len(parts[0]) + 1
    p2 = p1 + len(parts[1]) + 1
    text = rw.text
    end_text = text[p1 + cond.start(1) : p1 + cond.end(1)]
    by_text = text[p2 + step.start(g) : p2 + step.end(g)]
    t = " ".join(re.sub(r"\bconst\b", "", m.group("type")).split())
    j = skip_ws(code, close + 1, e)
    head = f" KB_STRIDED_BEGIN({t}, {i}, ({end_text}), ({by_text})) {rw.again()} "
    rw.edits.append((s, j, pad(head, text[s:j])))
    rw.edits.append((e, e, " KB_REGION_END "))
    return True
