"""Barriers and warp operations inside ``if`` under barrier loop fission (issue #25).

Two shapes run on loops; any other ``if`` around split points keeps fibers.

Block-uniform: the condition is one every thread computes alike (template parameters, constant
macros, kernel parameters the body never assigns, ``blockDim``/``gridDim``/``blockIdx``,
``warpSize``, uniform loop variables, locals computed once for the block, a cooperative_groups
object's ``size()``). The ``if`` (and its ``else``) stays where it is, around the regions of its
bodies, outside the loops over the threads: every thread takes the same side, as CUDA requires
of a barrier inside it.

Warp-uniform: ``if (X < K)`` with ``X`` the thread's index in the block -- a block's
``thread_rank()``, ``threadIdx.x`` or a local that copies it (``tid``) -- and ``K`` a literal
multiple of 32 or ``warpSize``, with no ``else``: the threads that pass are whole warps. The
body's regions loop over those threads (the test runs in each region, as the guard of its
statements), and each warp operation inside runs over their warps only
(``kb_cpu::fis::Block::only``), as on a GPU, where the other warps never reach it. A block
barrier or ``__syncwarp`` inside keeps fibers (not every thread of the block reaches it). With
``threadIdx.x`` in a block of more than one dimension whose ``blockDim.x`` is not a multiple of 32
and is more than ``K``, a warp holds the end of one row and the start of the next and its lanes
disagree: the launch fails there (``kb_cpu::fis::warp_if``), where a GPU would hang or give wrong
results.

Decided per thread: any other condition that calls and assigns nothing (kernel_tuner's spmv,
``if (i < nrows)`` with ``i`` a warp's row), around warp operations of the whole warp only (a
literal full mask, a tile of 32 threads), with no ``else``, no barrier inside, no loop around it
and no barrier or warp operation after it (the lanes that fail the test run to their end, so a
warp whose lanes disagree is one the fiber runner cannot complete either). Each thread
evaluates it once, where the ``if`` stands (a region of its own, into ``kb_off<k>``); every warp's
lanes must agree (``kb_cpu::fis::warps_agree``: else the launch fails, as CUDA lets a warp
operation of the whole warp be reached by all its lanes or none); the body's regions run its
statements for the threads that passed, and its warp operations leave out the warps that did not
(``Block::agreed``, as lanes that returned). A condition smaller groups may take alone (a mask of
16 lanes, a tile of 16) keeps fibers."""

from __future__ import annotations

import re
from collections.abc import Callable

from .fission_ranges import _strip, _top, thread_index
from .fission_scan import arguments, closing, line_of, pad, skip_ws, statement_end
from .fission_state import Giveup, Rewrite
from .fission_warps import warp_calls

Level = Callable[[Rewrite, int, int, bool], None]
_SIZE = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\.\s*(?:size|num_threads)\s*\(\s*\)")
_RANK = re.compile(r"([A-Za-z_]\w*)\s*\.\s*thread_rank\s*\(\s*\)")
_FULL = re.compile(r"0[xX][fF]{8}[uU]?|~0[uU]?")
#: What waits on other threads (fission.py's split points).
_LATER = re.compile(
    r"\b(?:__syncthreads\w*|__syncwarp|__shfl\w*|__ballot\w*|__any_sync|__all_sync)\b"
    r"|\.\s*(?:sync|shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all)\s*\(|\b(?:reduce|sync)\s*\("
)


def sized(rw: Rewrite, lo: int, hi: int, edit: bool = True) -> str:
    """``code[lo:hi]`` with each cooperative_groups object's ``size()``/``num_threads()`` made
    the number it is (every thread's alike), and with ``edit`` in the text too: outside the
    regions, where the loop path has no such object."""
    code = rw.code
    out, pos = [], lo
    for m in _SIZE.finditer(code, lo, hi):
        name = m.group(1)
        if name not in rw.cg:
            continue
        n = str(rw.tiles[name]) if name in rw.tiles else "(kb_blockDim.x * kb_blockDim.y * kb_blockDim.z)"
        if edit:
            rw.edits.append((m.start(), m.end(), pad(f"({n})", rw.text[m.start() : m.end()])))
        out.append(code[pos : m.start()] + " 1 ")
        pos = m.end()
    out.append(code[pos:hi])
    return "".join(out)


def _warps(rw: Rewrite, cond: str) -> tuple[str, bool] | None:
    """(K, whether the test reads threadIdx.x) where ``cond`` is ``X < K`` of the thread's index
    X in the block and K a literal multiple of 32 or ``warpSize``, else None."""
    c = _strip(cond)
    cmp = _top(c, ("==", "<=", ">=", "!=", "<", ">"))
    if len(cmp) != 1 or cmp[0][1] not in ("<", ">"):
        return None
    k, op = cmp[0]
    a, b = c[:k].strip(), c[k + 1 :].strip()
    if op == ">":
        a, b = b, a
    b = _strip(b)
    m = re.fullmatch(r"(\d+)[uU]?|warpSize", b)
    if not m or (m.group(1) and (int(m.group(1)) % 32 or int(m.group(1)) == 0)):
        return None
    r = _RANK.fullmatch(_strip(a))
    if r and r.group(1) in rw.cg and r.group(1) not in rw.tiles:
        return b.rstrip("uU"), False  # the linear index: whole warps in a block of any shape
    if thread_index(rw, a, ranks=False):
        return b.rstrip("uU"), True
    return None


def if_statement(rw: Rewrite, s: int, e: int, level: Level) -> None:
    """The ``if`` statement ``code[s:e]``, whose body holds split points (module docstring);
    ``level`` rewrites a body's statements as a top level (fission.py)."""
    code, text = rw.code, rw.text
    where = f"line {line_of(code, s)}"
    paren = code.index("(", s)
    close = closing(code, paren)
    j = skip_ws(code, close + 1, e)
    body_end = statement_end(code, j, e)
    if close < 0 or body_end < 0:
        raise Giveup(f"an if around a barrier or warp operation that could not be delimited ({where})")
    k = skip_ws(code, body_end, e)
    other = None
    if re.match(r"else\b", code[k:e]):
        other = skip_ws(code, k + 4, e)
    cond = sized(rw, paren + 1, close, edit=False)
    if rw.uniform(cond):
        sized(rw, paren + 1, close)
        _body(rw, j, body_end, level)
        if other is not None:
            _body(rw, other, e, level)
        return
    warps = _warps(rw, cond)
    if warps is None and not _full_masks(rw, j, body_end):
        raise Giveup(f"a barrier or warp operation inside an if whose condition may differ between threads ({where})")
    if other is not None:
        raise Giveup(f"a barrier or warp operation inside an if with an else ({where})")
    if rw.guards:
        raise Giveup(f"a warp operation inside two ifs of the thread's index ({where})")
    if rw.returns:
        raise Giveup(f"a warp operation inside an if of the thread's index in a kernel that returns early ({where})")
    if re.search(r"\b__syncwarp\b", code[j:body_end]):
        raise Giveup(f"__syncwarp inside an if of the thread's index ({where})")
    line = line_of(code, s)
    if warps is not None:
        bound, by_x = warps
        check = f"::kb_cpu::fis::warp_if(kb_fb, (long long)({bound}), {line});" if by_x else ""
        rw.edits.append((s, j, pad(check, text[s:j])))
        hi = f"(long long)({bound})"
        guard: tuple[str, str | None, str] = (
            text[paren + 1 : close].strip(),
            hi,
            f"kb_fb.{'only(0, ' if by_x else 'ranks('}{hi})",
        )
    else:
        if re.search(r"(?<![\w.])[A-Za-z_]\w*\s*\(|\+\+|--|(?<![=!<>])=(?!=)", _methods_blanked(rw, cond)):
            raise Giveup(f"a warp operation inside an if whose condition calls or assigns ({where})")
        if rw.loop_start >= 0 or _LATER.search(code, e, rw.body_end):
            # (the lanes that fail it might meet the others at a later warp operation of the same
            # kind and mask, which the fiber runner lets them complete together)
            raise Giveup(
                f"a warp operation inside an if whose condition may differ between threads, with a loop around"
                f" it or a barrier or warp operation after it ({where})"
            )
        # Decided per thread where the if stands (one region), the warps' lanes checked to agree.
        off = f"kb_off{len([n for n in rw.hoisted if n.startswith('kb_off')])}"
        rw.hoisted[off] = f"bool {off}[KB_FISSION_MAX_THREADS];"
        rw.edits.append((s, j, pad(f"{off}[kb_t] = !({text[paren + 1 : close].strip()});", text[s:j])))
        rw.region.append((s, j))
        rw.flush("", f"::kb_cpu::fis::warps_agree(kb_fb, {off}, {line});")
        guard = (f"!{off}[kb_t]", None, f"kb_fb.agreed({off})")
    syncs = len(rw.syncs)
    rw.guards.append(guard)
    try:
        _body(rw, j, body_end, level)
    finally:
        rw.guards.pop()
    if any(tile == 0 for _, tile, _ in rw.syncs[syncs:]):
        raise Giveup(f"a barrier inside an if of the thread's index (not every thread reaches it) ({where})")


def _methods_blanked(rw: Rewrite, cond: str) -> str:
    """``cond`` with the cooperative_groups objects' method calls (which only read) blanked."""
    return re.sub(
        r"\b([A-Za-z_]\w*)\s*\.\s*\w+\s*\(\s*\)", lambda m: " 0 " if m.group(1) in rw.cg else m.group(0), cond
    )


def _full_masks(rw: Rewrite, lo: int, hi: int) -> bool:
    """Whether every warp operation in ``code[lo:hi]`` is one of the whole warp: a literal full
    mask, a tile of 32 threads (there a warp whose lanes take different sides of the if breaks
    CUDA's rules, where a smaller group may legitimately take one side alone)."""
    code = rw.code
    for c in warp_calls(rw, lo, hi):
        paren = c.end() - 1
        close = closing(code, paren)
        args = arguments(code, paren, close) if close > 0 else []
        if not args:
            return False
        first = code[args[0][0] : args[0][1]].strip()
        if c.group("intr"):
            if not _FULL.fullmatch(first):
                return False
        elif rw.tiles.get(c.group("obj") or first) != 32:
            return False
    return bool(warp_calls(rw, lo, hi))


def _body(rw: Rewrite, j: int, end: int, level: Level) -> None:
    """A body of the ``if`` (``code[j:end]``): its statements a top level of their own."""
    if rw.code[j] == "{":
        level(rw, j + 1, end - 1, True)
    else:  # one statement: braced, as it becomes several loops
        rw.edits.append((j, j, "{"))
        level(rw, j, end, True)
        rw.edits.append((end, end, "}"))
