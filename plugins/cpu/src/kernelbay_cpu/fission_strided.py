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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .fission_ranges import thread_index
from .fission_scan import closing, loose_jump, pad, skip_ws
from .fission_state import TYPE

if TYPE_CHECKING:
    from .fission_state import Rewrite

_INIT = re.compile(rf"\s*(?P<type>{TYPE})\s+(?P<i>[A-Za-z_]\w*)\s*=(?P<start>.*)", re.S)


def writes(name: str, code: str) -> bool:
    """Whether ``code`` assigns ``name``, increments it or takes its address."""
    return (
        re.search(
            rf"(?<![\w.])(?<!->){name}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--|(?<!&)&)\s*{name}\b(?!\s*\[)|\b{name}\s*(?:\+\+|--)",
            code,
        )
        is not None
    )


@dataclass
class ForLoop:
    """A ``for (T i = start; i < end; i += by)`` header at ``code[s:]`` (``i = i + by`` too)."""

    paren: int  # the header's "(" and ")"
    close: int
    parts: list[str]  # init; condition; step, as written
    init: re.Match[str]  # _INIT over parts[0]: type, i, start
    cond: re.Match[str]  # over parts[1]: group 1 the bound
    step: re.Match[str]  # over parts[2]: group g the step
    g: int

    @property
    def i(self) -> str:
        return self.init.group("i")

    @property
    def end(self) -> str:
        return self.cond.group(1)

    @property
    def by(self) -> str:
        return self.step.group(self.g)

    @property
    def type(self) -> str:
        """The loop variable's type without ``const`` (it is assigned in the rewritten loop)."""
        return " ".join(re.sub(r"\bconst\b", "", self.init.group("type")).split())

    def control_written(self, body: str) -> bool:
        """Whether ``body`` writes the loop variable or a name the bound or step reads (not
        members: ``blockDim.x`` is no local ``x``)."""
        words = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*\b", self.end + " " + self.by)) | {self.i}
        return any(writes(w, body) for w in words)

    def texts(self, text: str) -> tuple[str, str, str]:
        """The start, bound and step as they stand in ``text`` (the rewrite's current text, of
        the same length as the code the header was read from)."""
        p0 = self.paren + 1
        p1 = p0 + len(self.parts[0]) + 1
        p2 = p1 + len(self.parts[1]) + 1
        return (
            text[p0 + self.init.start("start") : p0 + self.init.end("start")],
            text[p1 + self.cond.start(1) : p1 + self.cond.end(1)],
            text[p2 + self.step.start(self.g) : p2 + self.step.end(self.g)],
        )


def for_header(code: str, s: int, e: int) -> tuple[int, int, list[str]] | None:
    """A ``for (init; condition; step)`` header at ``code[s:]`` closing before ``e``: its "(",
    its ")" and the three parts as written; None where ``code[s:]`` is no such header."""
    if not re.match(r"for\s*\(", code[s:e]):
        return None
    paren = code.index("(", s)
    close = closing(code, paren)
    if close < 0 or close >= e:
        return None
    parts = code[paren + 1 : close].split(";")
    return (paren, close, parts) if len(parts) == 3 else None


def for_loop(code: str, s: int, e: int) -> ForLoop | None:
    """The counted loop whose statement is ``code[s:e]``, or None where it is not of that form."""
    header = for_header(code, s, e)
    if header is None:
        return None
    paren, close, parts = header
    m = _INIT.fullmatch(parts[0])
    if not m:
        return None
    i = m.group("i")
    cond = re.fullmatch(rf"\s*{i}\s*<(?!=)(.*)", parts[1], re.S)
    step = re.fullmatch(rf"\s*(?:{i}\s*\+=(.*)|{i}\s*=\s*{i}\s*\+(.*))", parts[2], re.S)
    if not cond or not step:
        return None
    return ForLoop(paren, close, parts, m, cond, step, 1 if step.group(1) is not None else 2)


def strided(rw: Rewrite, s: int, e: int) -> bool:
    """Rewrite ``code[s:e]`` as a block-strided loop's region if it is one (closing the open
    region before it); False where it is not one."""
    code = rw.code
    f = for_loop(code, s, e)
    if f is None or "*" in f.init.group("type") or not thread_index(rw, f.init.group("start"), ranks=False):
        return False
    i, end, by, close = f.i, f.end, f.by, f.close
    body = code[close + 1 : e]
    if not rw.uniform(end) or not rw.uniform(by):
        return False
    if f.control_written(body):
        return False
    # each (thread, i) is a call of its own: a return or a jump out of the loop stays as written
    if re.search(r"\breturn\b", body) or loose_jump(code, close + 1, e) >= 0:
        return False
    rw.flush()
    rw.strided_starts.append(s)
    text = rw.text
    _, end_text, by_text = f.texts(text)
    t = f.type
    j = skip_ws(code, close + 1, e)
    head = f" KB_STRIDED_BEGIN({t}, {i}, ({end_text}), ({by_text})) {rw.again()} "
    rw.edits.append((s, j, pad(head, text[s:j])))
    rw.edits.append((e, e, " KB_REGION_END "))
    return True
