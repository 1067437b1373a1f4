"""Regions that only some threads act in. A region whose one effect is ``if (C) S`` -- ``C`` a
test of the thread's index against what every thread computes alike (``tid == 0``,
``threadIdx.x < stride``, ``lane == 0``, ``warp.thread_rank() == 0``, ``block.thread_rank() == 0``,
and such a test ``&&`` others) -- loops over the threads that may pass the test only
(include/kb_cpu_fission.h: KB_REGION_RANGE_BEGIN): the first thread, the first ``stride``, one lane
in each warp, not the whole block with the test failing for all but a few. The test still
runs, so the range need only hold every thread that passes it; blocks of more than one dimension
loop over all threads. The region's other statements must be ones the skipped threads need not
run: declarations the loop path makes again in each region, and a warp operation's result read
into a local no later statement reads (``v = result`` before ``if (lane == 0) sums[w] = v;``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .fission_scan import CG_METHODS, closing

if TYPE_CHECKING:  # fission_state calls this module: the import runs one way
    from .fission_state import Rewrite

_IDX = re.compile(r"threadIdx\s*\.\s*x")
_RANK = re.compile(r"([A-Za-z_]\w*)\s*\.\s*thread_rank\s*\(\s*\)")
#: Functions a read may call: CUDA's math, which only computes.
PURE_MATH = {
    "fmaxf", "fminf", "fmax", "fmin", "max", "min", "fabsf", "fabs", "abs", "sqrtf", "sqrt", "rsqrtf", "expf", "exp",
    "exp2f", "logf", "log", "log2f", "tanhf", "tanh", "sinf", "cosf", "erff", "powf", "floorf", "ceilf", "roundf",
    "truncf", "__expf", "__logf", "__fdividef",
}  # fmt: skip
_CAST = re.compile(r"^\(\s*(?:int|unsigned|unsigned\s+int|long|long\s+long|size_t)\s*\)\s*")


def _strip(e: str) -> str:
    e = e.strip()
    while True:
        m = _CAST.match(e)
        if m:
            e = e[m.end() :].strip()
        elif e.startswith("(") and closing(e, 0) == len(e) - 1:
            e = e[1:-1].strip()
        else:
            return e


def thread_index(rw: Rewrite, e: str, seen: int = 0, ranks: bool = True) -> bool:
    """Whether ``e`` is the thread's x index (``ranks``: or, in a block of one dimension, a
    cooperative_groups block's ``thread_rank()``)."""
    e = _strip(e)
    if _IDX.fullmatch(e):
        return True
    m = _RANK.fullmatch(e)
    if m:
        return ranks and m.group(1) in rw.cg and m.group(1) not in rw.tiles
    return e in rw.remat and seen < 8 and thread_index(rw, rw.remat[e][1], seen + 1, ranks)


def lane_of(rw: Rewrite, e: str, seen: int = 0) -> int:
    """The tile size N where ``e`` is the thread's rank in its tile of N (x index % N), else 0."""
    e = _strip(e)
    m = _RANK.fullmatch(e)
    if m:
        return rw.tiles.get(m.group(1), 0)
    if e in rw.remat and seen < 8:
        return lane_of(rw, rw.remat[e][1], seen + 1)
    m = re.fullmatch(r"(.+?)\s*%\s*(\d+|warpSize)", e) or re.fullmatch(
        r"(.+?)\s*&\s*\(?\s*(\d+|warpSize\s*-\s*1)\s*\)?", e
    )
    if not m or not thread_index(rw, m.group(1)):
        return 0
    k = m.group(2).replace(" ", "")
    n = 32 if k.startswith("warpSize") else int(k) + (1 if "&" in m.group(0) else 0)
    return n if 0 < n <= 1024 and not n & (n - 1) else 0


def _top(e: str, ops: tuple[str, ...]) -> list[tuple[int, str]]:
    """The offsets of the operators ``ops`` at the top bracket level of ``e``, longest first."""
    out, depth, k = [], 0, 0
    while k < len(e):
        c = e[k]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            for op in ops:
                if e.startswith(op, k) and not (op in "<>" and e[k + 1 : k + 2] in ("<", ">", "=")):
                    out.append((k, op))
                    k += len(op) - 1
                    break
        k += 1
    return out


def _test(rw: Rewrite, c: str) -> tuple[str, str, str] | None:
    """(lo, hi, step) holding every thread x index that passes ``c``, or None."""
    c = _strip(c)
    if c.startswith("!") and not c.startswith("!="):
        c = f"{c[1:]} == 0"
    cmp = _top(c, ("==", "<=", ">=", "!=", "<", ">"))
    if len(cmp) != 1 or cmp[0][1] == "!=":
        return None
    k, op = cmp[0]
    a, b = c[:k].strip(), c[k + len(op) :].strip()
    if thread_index(rw, b) or lane_of(rw, b):
        a, b = b, a
        op = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
    if not rw.uniform(b) or not b:
        return None
    # the bounds by b's own type (kb_cpu::fis::below ...): a negative b against an unsigned index,
    # a float b, ... give every thread
    f = "::kb_cpu::fis::"
    if thread_index(rw, a):
        return {
            "==": (f"{f}eq_lo({b})", f"{f}eq_hi({b})", "1"),
            "<": ("0", f"{f}below({b})", "1"),
            "<=": ("0", f"{f}upto({b})", "1"),
        }.get(op)
    n = lane_of(rw, a)
    if n and op == "==":  # one lane of each tile, where the value names one
        return f"{f}eq_lo({b}, {n})", f"{f}ALL", f"{f}lane_step({b}, {n})"
    return None


def _guard(rw: Rewrite, s: int, e: int) -> tuple[str, str, str] | None:
    code = rw.code
    if not re.match(r"if\s*\(", code[s:e]):
        return None
    paren = code.index("(", s)
    close = closing(code, paren)
    if close < 0 or re.search(r"\belse\b", code[close:e]):
        return None
    for p in _conjuncts(code[paren + 1 : close]):
        got = _test(rw, p)
        if got:
            return got
        if re.search(r"\b[A-Za-z_]\w*\s*\(|\+\+|--|(?<![=!<>])=(?!=)", p):
            return None  # what every thread evaluates before the test must still run
    return None


def _conjuncts(c: str) -> list[str]:
    """``c`` split at its top-level ``&&`` (whole where it has a top-level ``||``)."""
    if _top(c, ("||",)):
        return [c]
    out, pos = [], 0
    for k, _ in _top(c, ("&&",)):
        out.append(c[pos:k])
        pos = k + 2
    out.append(c[pos:])
    return out


@dataclass
class Region:
    """A region of the rewrite: its statements' spans, the lane stores at its end (a warp
    operation follows), where its beginning is in the edits, the locals it makes again, the
    uniform loop it is in (where that loop's body begins, else -1), where it begins and ends, and
    the warp-uniform if it is in (its condition, the end of its threads, the block of their warps)."""

    stmts: list[tuple[int, int]]
    tail: str
    begin: int
    again: str
    loop_start: int
    start: int
    end: int
    guard: tuple[str, str | None, str] | None = None  # a warp-uniform if's (fission_if.py)


def _dead(rw: Rewrite, r: Region, names: list[str], after: int) -> bool:
    """Whether no statement after ``after`` (nor, in a loop, one of the loop before ``r``) reads ``names``."""
    code = rw.code
    later = code[after : rw.body_end] + (code[r.loop_start : r.start] if r.loop_start >= 0 else "")
    return not any(re.search(rf"(?<![\w.])(?<!->)(?<!::){n}\b", later) for n in names)


def _guarded(rw: Rewrite, r: Region) -> tuple[str, str, str] | None:
    guards = [(s, e) for s, e in r.stmts if s not in rw.inert and s not in rw.pure]
    if len(guards) != 1:
        return None
    got = _guard(rw, *guards[0])
    if got is None or not _dead(rw, r, [n for s, _ in r.stmts for n in rw.pure.get(s, ())], r.end):
        return None
    return got


def ranges(rw: Rewrite) -> list[tuple[str, str, str] | None]:
    """The (lo, hi, step) of threads each region of ``rw`` may loop over, or None for all.

    A region whose one effect is a test of the thread's index loops over the threads that may
    pass it. A region that stores lane operands for a warp operation whose results only a
    region of a range reads (and otherwise only reads into locals no later statement reads)
    loops over the warps of that range, and the warp operation runs on those warps only."""
    regs = rw.regions
    out: list[tuple[str, str, str] | None] = [None] * len(regs)
    for i in reversed(range(len(regs))):
        r = regs[i]
        if not r.tail:
            out[i] = _guarded(rw, r) if r.stmts else None
            continue
        nxt = out[i + 1] if i + 1 < len(regs) else None
        if nxt is None or nxt[2] != "1" or any(s not in rw.inert and s not in rw.pure for s, _ in r.stmts):
            continue
        if _dead(rw, r, [n for s, _ in r.stmts for n in rw.pure.get(s, ())], regs[i + 1].end):
            out[i] = (f"({nxt[0]}) & ~31LL", f"(({nxt[1]}) + 31) & ~31LL", "1")
    return out


def pure_read(rw: Rewrite, s: int, e: int, spans: list[tuple[int, int]]) -> list[str]:
    """The name ``code[s:e]`` assigns where it is ``[T] a = ...;`` of a per-thread local whose
    right side does nothing but read (the warp operations ``spans`` in it are reads of their lane
    arrays by then), else []."""
    code = rw.code
    st = "".join(" " if any(a <= k < b for a, b in spans) else code[k] for k in range(s, e)).strip()
    m = re.match(r"(?:(?:const\s+)?[A-Za-z_][\w:<>]*\s+)?([A-Za-z_]\w*)\s*=(?!=)", st)
    if not m or not st.endswith(";") or m.group(1) not in rw.arrays:
        return []
    rhs = st[m.end() : -1]
    for c in re.finditer(r"(?:(?<![\w.])([A-Za-z_]\w*)\s*\.\s*)?\b([A-Za-z_]\w*)\s*\(", rhs):
        if not (c.group(1) in rw.cg and c.group(2) in CG_METHODS) and (c.group(1) or c.group(2) not in PURE_MATH):
            return []
    if re.search(r"\+\+|--|(?<![=!<>])=(?!=)|[;,]", rhs):
        return []
    return [m.group(1)]
