"""Loops of a kernel run by fibers yield every few iterations (see include/kb_cpu_yield.h).

Each loop of the source is rewritten in place (no line is added, so diagnostics still point at
the user's lines)::

    for (init; cond; step) body  ->  WRAP for (init; cond; (void)(step), kb_tk_.tick()) body
    while (cond) body            ->  WRAP for (; cond; kb_tk_.tick()) body
    do body while (cond);        ->  WRAP do body while (kb_tk_.pass() && (cond));

    WRAP = for (::kb_cpu::Ticker kb_tk_; kb_tk_.once();)

The outer loop runs once, so ``break`` and ``continue`` keep their meaning, and the wrapper is a
statement wherever the loop was one (no dangling ``else`` can change owner). Loops that contain a
barrier or a warp operation, and loops inside them, are left alone: their threads already meet
at every iteration. A range-based ``for`` has no step to tick and is left alone too. Ticks
also let a thread that spins on a flag another thread of its block sets (legal since Volta's
independent thread scheduling) make progress.
"""

from __future__ import annotations

import re

_LOOP_RE = re.compile(r"\b(?:for|while)\s*\(|\bdo\b")
#: What makes the threads of a block (or a warp) meet: a loop with one runs in step already.
_MEET_RE = re.compile(
    r"\b(?:__syncthreads\w*|__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync|__uni_sync|__activemask"
    r"|__match_\w+|__reduce_\w+_sync|reduce)\s*\(|\.\s*(?:sync|shfl\w*|any|all|ballot|match_\w+)\s*\("
)
_DO_TAIL_RE = re.compile(r"\s*(while)\s*\(")
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
    """``text`` with a yield tick in each loop that needs one (``clean``: ``text`` with comments
    and literals blanked, same length)."""
    loops = []  # (kind, keyword offset, body start, body end, offset of a do loop's `while`)
    tails: set[int] = set()
    for m in _LOOP_RE.finditer(clean):
        if m.group(0) == "do":
            end = _statement_end(clean, m.end())
            tail = _DO_TAIL_RE.match(clean, end)
            if tail is None:
                continue
            tails.add(tail.start(1))
            loops.append(("do", m.start(), m.end(), end, tail.end() - 1))
        else:
            close = _match(clean, m.end() - 1)
            if close >= len(clean):
                continue
            kind = "for" if clean.startswith("for", m.start()) else "while"
            loops.append((kind, m.start(), close + 1, _statement_end(clean, close + 1), m.end() - 1))
    meeting = [(a, b) for _, _, a, b, _ in loops if _MEET_RE.search(clean, a, b)]
    edits: list[tuple[int, int, str]] = []
    for kind, at, body, end, paren in loops:
        if at in tails or any(a <= at < b for a, b in meeting) or (body, end) in meeting:
            continue
        close = _match(clean, paren)
        if kind == "for":
            semis = _split_header(clean[paren + 1 : close])
            if semis is None:
                continue  # range-based: no step to tick
            step_at = paren + 1 + semis[1] + 1
            step = text[step_at:close]
            edits.append((step_at, close, f" (void)({step}), kb_tk_.tick()" if step.strip() else " kb_tk_.tick()"))
        elif kind == "while":  # while (c) s  ==  for (; c; tick) s, continue included
            edits.append((at, paren + 1, "for (; "))
            edits.append((close, close, "; kb_tk_.tick()"))
        else:  # do s while (c);  ->  do s while (kb_tk_.pass() && (c));
            edits.append((paren + 1, paren + 1, "kb_tk_.pass() && ("))
            edits.append((close, close, ")"))
        edits.append((at, at, WRAP))
    out, pos = [], 0
    for a, b, s in sorted(edits, key=lambda e: (e[0], e[1] - e[0] > 0)):
        out.append(text[pos:a])
        out.append(s)
        pos = b
    out.append(text[pos:])
    return "".join(out)
