"""Loops of a kernel run by fibers yield every few iterations (see include/kb_cpu_yield.h).

Each ``for (init; cond; step) body`` of the source becomes, on its own line (line numbers are
kept, so diagnostics still point at the user's lines)::

    for (::kb_cpu::Ticker kb_tk_; kb_tk_.once();) for (init; cond; (void)(step), kb_tk_.tick()) body

The outer loop runs once, so ``break`` and ``continue`` keep their meaning, and the wrapper is a
statement wherever the loop was one (no dangling ``else`` can change owner). Loops that contain a
barrier or a warp operation, and loops inside them, are left alone: their threads already meet
at every iteration. A range-based ``for`` has no step to tick and is left alone too.
"""

from __future__ import annotations

import re

_FOR_RE = re.compile(r"\bfor\s*\(")
_LOOP_RE = re.compile(r"\b(?:for|while)\s*\(|\bdo\b")
#: What makes the threads of a block (or a warp) meet: a loop with one runs in step already.
_MEET_RE = re.compile(
    r"\b(?:__syncthreads\w*|__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync|__uni_sync|__activemask"
    r"|__match_\w+|__reduce_\w+_sync|reduce)\s*\(|\.\s*(?:sync|shfl\w*|any|all|ballot|match_\w+)\s*\("
)
_OPEN, _CLOSE = "([{", ")]}"
WRAP = "for (::kb_cpu::Ticker kb_tk_; kb_tk_.once();) "


def _match(clean: str, i: int) -> int:
    """The offset of the bracket closing the one at ``i`` (or len(clean) if unbalanced)."""
    depth = 0
    for k in range(i, len(clean)):
        c = clean[k]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return k
    return len(clean)


def _statement_end(clean: str, i: int) -> int:
    """The end offset of the statement starting at or after ``i``: a braced block, or up to the
    first ``;`` outside brackets (an unbraced ``if``/``else`` chain may end later: its tail is
    then not seen, which can only leave a loop with a tick it does not need)."""
    n = len(clean)
    while i < n and clean[i].isspace():
        i += 1
    if i < n and clean[i] == "{":
        return _match(clean, i) + 1
    depth = 0
    while i < n:
        c = clean[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def _split_header(header: str) -> list[int] | None:
    """Offsets of the two top-level ``;`` of a ``for`` header, or None (a range-based for)."""
    semis, depth = [], 0
    for k, c in enumerate(header):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == ";" and depth == 0:
            semis.append(k)
    return semis if len(semis) == 2 else None


def add_loop_yields(text: str, clean: str) -> str:
    """``text`` with a yield tick in each ``for`` loop that needs one (``clean``: ``text`` with
    comments and literals blanked, same length)."""
    # Every loop's body span, and which of them contain a meeting point.
    meeting: list[tuple[int, int]] = []
    for m in _LOOP_RE.finditer(clean):
        if m.group(0) == "do":
            start, end = m.end(), _statement_end(clean, m.end())
        else:
            close = _match(clean, m.end() - 1)
            start, end = close + 1, _statement_end(clean, close + 1)
        if _MEET_RE.search(clean, start, end):
            meeting.append((start, end))
    edits: list[tuple[int, int, str]] = []
    for m in _FOR_RE.finditer(clean):
        if any(a <= m.start() < b for a, b in meeting):
            continue  # inside a loop whose threads meet at each iteration
        open_ = m.end() - 1
        close = _match(clean, open_)
        if close >= len(clean):
            continue
        semis = _split_header(clean[open_ + 1 : close])
        if semis is None:
            continue
        body_end = _statement_end(clean, close + 1)
        if _MEET_RE.search(clean, close + 1, body_end):
            continue
        step_at = open_ + 1 + semis[1] + 1
        step = text[step_at:close]
        new_step = f" (void)({step}), kb_tk_.tick()" if step.strip() else " kb_tk_.tick()"
        edits.append((step_at, close, new_step))
        edits.append((m.start(), m.start(), WRAP))
    out, pos = [], 0
    for a, b, s in sorted(edits):
        out.append(text[pos:a])
        out.append(s)
        pos = b
    out.append(text[pos:])
    return "".join(out)
