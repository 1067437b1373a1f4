"""Loops over a warp's lanes as regions of their own, and the locals every lane of a warp holds
alike. A statement ``for (int i = lane; i < n; i += warpSize) body`` (``lane`` the thread's lane,
``threadIdx.x % 32``, ``warp.thread_rank()`` of a ``tiled_partition<32>``; ``n`` what every thread
computes alike; a step of ``warpSize``, 32 or the tile's ``size()``) runs each lane over ``i =
lane, lane + 32, ...``. Between two barriers the threads may interleave in any order that keeps
each one's, so in a block of one dimension it runs per warp as chunks of 32 columns, each a
vector loop over the warp's lanes (lane ``x`` at ``i = chunk + x``: include/kb_cpu_fission.h,
KB_LANES_BEGIN), instead of a loop over the threads around each one's loop of strided
iterations; other blocks run it as written.

The loads of such a loop are contiguous only where the row it reads is the warp's, not each
lane's: llm.c's ``row = blockIdx.x * warpsPerBlock + tid / warpSize`` is the same in every lane
of a warp, but g++ does not fold ``(32 * w + lane) / 32`` to ``w``, so a row pointer computed per
lane makes every load a gather (llm.c's online softmax kernel8 ran slower that way than as
each thread's loop). The locals made again in each region whose value depends on the thread
only through its warp (:func:`warp_uniform`: ``tid / warpSize``, a ``tiled_partition<32>``'s
``meta_group_rank()``, and what is computed from those and what every thread computes alike)
are computed once per warp, from its lane 0's index, in the loop's region.

What takes this form: a body that reads no pointer some lanes hold differently from others
(each lane's own row: gathers, slower than the thread's loop), calls only CUDA's math, the
cache-hinted loads and stores and cooperative_groups queries, mentions no shared memory (another
lane of the warp may read what one writes), and neither returns nor jumps out of the loop; the
loop variable, the end and the step are not written in it. Anything else keeps the thread's
loop in its region (fission.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .fission_ranges import PURE_MATH, lane_of, thread_index
from .fission_scan import CG_METHODS, loose_jump, pad, skip_ws
from .fission_state import UNIFORM_WORDS
from .fission_strided import for_loop

if TYPE_CHECKING:
    from .fission_state import Rewrite

#: the thread's index divided by a warp's 32 threads (``tid / warpSize``, ``threadIdx.x >> 5``)
_WARP_OF = re.compile(
    r"(?P<x>threadIdx\s*\.\s*x|[A-Za-z_]\w*\s*\.\s*thread_rank\s*\(\s*\)|[A-Za-z_]\w*)"
    r"\s*(?:/\s*(?:32|warpSize)|>>\s*5)(?![\w.])"
)
_METHOD = re.compile(r"([A-Za-z_]\w*)\s*\.\s*(\w+)\s*\(\s*\)")
#: what a lane loop's body may call besides CUDA's math: loads and stores with cache hints
_MEMORY = {"__ldg", "__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv", "__stcs", "__stcg", "__stwt", "__stwb"}
_SYNTAX = {"if", "for", "while", "switch", "sizeof", "int", "unsigned", "float", "double", "long", "short", "char"}
_SHARED = re.compile(r"__shared__[^;]*?([A-Za-z_]\w*)\s*\[|\b([A-Za-z_]\w*)\s*=[^;=]*\bdyn_shared\b")


def _integer(t: str) -> bool:
    return "*" not in t and not re.search(r"\b(?:float|double)\b", t)


def _divides_alone(expr: str, at: int) -> bool:
    """Whether the operand of ``/`` that starts at ``expr[at]`` is the whole left operand (what
    stands before it binds looser than ``/``: ``a + tid / 32``, not ``a * tid / 32``, ``-tid /
    32`` or a cast ``(float)tid / 32``)."""
    before = expr[:at].rstrip()
    if not before or before[-1] in "(+?:":
        return True
    if before[-1] == "-":  # binary minus only: an operand before it
        rest = before[:-1].rstrip()
        return bool(rest) and (rest[-1].isalnum() or rest[-1] in "_)]") and not rest.endswith("--")
    return False


def warp_uniform(rw: Rewrite) -> list[str]:
    """The locals made again in each region (``rw.remat``, in declaration order) that hold the
    same value in every lane of a warp, in a block of one dimension."""
    known: list[str] = []
    base = UNIFORM_WORDS - {"x", "y", "z"} | rw.fixed | rw.scalars | set(rw.hoisted) | {"kb_W_", "kb_U_"}
    for name, (_, init) in rw.remat.items():
        e = init
        for m in reversed(list(_METHOD.finditer(e))):
            obj, meth = m.group(1), m.group(2)
            if obj not in rw.cg:
                continue
            if meth == "meta_group_rank" and rw.tiles.get(obj) == 32:
                e = e[: m.start()] + " kb_W_ " + e[m.end() :]
            elif meth in ("meta_group_size", "size", "num_threads"):
                e = e[: m.start()] + " kb_U_ " + e[m.end() :]
        for m in reversed(list(_WARP_OF.finditer(e))):
            x = m.group("x")
            if not _divides_alone(e, m.start()) or not thread_index(rw, x):
                continue
            if x in rw.remat and not _integer(rw.remat[x][0]):
                continue
            e = e[: m.start()] + " kb_W_ " + e[m.end() :]
        if re.search(r"[\[{]|->|\+\+|--|(?<![=!<>])=(?!=)", e) or re.search(r"\b[A-Za-z_]\w*\s*\(", e):
            continue
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\.\s*[A-Za-z_]\w*", " ", e)))
        if words <= base | set(known):
            known.append(name)
    return known


def again(rw: Rewrite, uniform: list[str]) -> str:
    """What a lane loop's region makes again at its top: as :meth:`Rewrite.again`, with the
    warp-uniform locals computed once from the index of the warp's lane 0 (kb_ti0)."""
    if not uniform:
        return rw.again()
    objs = " ".join(f"{t} {n}{{kb_threadIdx, kb_blockDim, kb_blockIdx}};" for n, t in rw.cg.items())
    chain = " ".join(f"{t} const {n} ={init};" for n, (t, init) in rw.remat.items())
    members = " ".join(f"{rw.remat[n][0]} {n};" for n in uniform)
    warp = (
        f"struct kb_W {{ {members} }}; const kb_W kb_w = [&](const ::kb_cpu::uint3 kb_threadIdx)"
        f" __attribute__((always_inline)) {{ {objs} {chain} return kb_W{{{', '.join(uniform)}}}; }}(kb_ti0);"
    )
    each = " ".join(
        f"{t} const {n} = kb_w.{n};" if n in uniform else f"{t} const {n} ={init};" for n, (t, init) in rw.remat.items()
    )
    return f"{warp} {objs} {each}"


def _step(rw: Rewrite, by: str) -> bool:
    by = by.strip()
    m = re.fullmatch(r"([A-Za-z_]\w*)\s*\.\s*(?:size|num_threads)\s*\(\s*\)", by)
    return by in ("32", "warpSize") or (m is not None and rw.tiles.get(m.group(1)) == 32)


def _shared_names(rw: Rewrite) -> set[str]:
    """The names of shared memory in the source (the kernel's, the file's), and of the kernel's
    locals assigned from them."""
    body = rw.body_code
    names = {a or b for a, b in _SHARED.findall(rw.code)}
    names |= {m.group(1) for m in re.finditer(r"extern\b[^;]*?([A-Za-z_]\w*)\s*\[\s*\]\s*;", rw.code)}
    assigns = re.findall(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*=(?!=)([^;]*)", body)
    while True:
        more = {lhs for lhs, rhs in assigns if lhs not in names and any(re.search(rf"\b{n}\b", rhs) for n in names)}
        if not more:
            return names
        names |= more


def _body_ok(rw: Rewrite, body: str, uniform: list[str]) -> bool:
    if re.search(r"\b(?:return|goto)\b", body):
        return False
    for m in re.finditer(r"(?<![\w])([A-Za-z_]\w*)\s*\(", body):
        f = m.group(1)
        obj = re.search(r"([A-Za-z_]\w*)\s*(?:\.|->)\s*$", body[: m.start(1)])
        member = obj is not None or re.search(r"(?:\.|->|::)\s*$", body[: m.start(1)]) is not None
        if obj is not None and obj.group(1) in rw.cg and f in CG_METHODS:
            continue
        if not member and (f in _SYNTAX or f in PURE_MATH or f in _MEMORY):
            continue
        return False
    words = set(re.findall(r"(?<![\w.])(?<!->)[A-Za-z_]\w*\b", body))
    if words & _shared_names(rw):
        return False
    # a pointer some lanes hold differently: each lane's own row, gathers
    for w in words:
        if w in rw.arrays and "*" in rw.arrays[w]:
            return False
        if w in rw.remat and "*" in rw.remat[w][0] and w not in uniform:
            return False
    return True


def lanes(rw: Rewrite, s: int, e: int) -> bool:
    """Rewrite ``code[s:e]`` as a lane loop's region if it is one (closing the open region
    before it); False where it is not one."""
    code = rw.code
    f = for_loop(code, s, e)
    if f is None or "*" in f.init.group("type") or lane_of(rw, f.init.group("start")) != 32:
        return False
    i, end, by, close = f.i, f.end, f.by, f.close
    if not rw.uniform(end) or not _step(rw, by):
        return False
    body = code[close + 1 : e]
    if f.control_written(body) or loose_jump(code, close + 1, e) >= 0:
        return False
    uniform = warp_uniform(rw)
    if not _body_ok(rw, body, uniform):
        return False
    rw.flush()
    rw.strided_starts.append(s)
    text = rw.text
    start_text, end_text, by_text = f.texts(text)
    t = f.type
    j = skip_ws(code, close + 1, e)
    # the loop as written where each thread runs its own; once, at kb_i, in a warp's vector loop
    loop = (
        f"for ({t} {i} = kb_one ? kb_i : ({start_text}); kb_one ? {i} == kb_i : {i} < ({end_text});"
        f" {i} += kb_one ? 1 : ({by_text}))"
    )
    # (the step 32 outside the region, where a tile's size() names no object)
    head = f" KB_LANES_BEGIN({t}, ({end_text}), 32) {again(rw, uniform)} {loop} "
    rw.edits.append((s, j, pad(head, text[s:j])))
    rw.edits.append((e, e, " KB_REGION_END "))
    return True
