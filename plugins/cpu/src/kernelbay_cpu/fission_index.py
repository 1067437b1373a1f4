"""64-bit indices in block-strided loops' vector path (fission_strided.py).

In ``for (int i = tid; i < C; i += blockDim.x * K)`` with an inner ``for (int u = 0; u < U; u++)``
(llm.c's softmax kernel7), ``i + u*blockDim.x`` is an ``unsigned`` value (``blockDim.x`` is one)
that may wrap, so g++ cannot treat it as affine in the loop over the threads, and a gather or
scatter with zero-extended offsets it has not: the loop stays scalar. Where the strided loop runs
as chunks (``kb_fast``: ``0 <= i < C <= INT_MAX / 2``, include/kb_cpu_fission.h), and ``0 <= u <
U <= 2^20`` (constants), ``blockDim.x <= 1024`` (the loop path's blocks), the value is below 2^31
+ 2^30: it does not wrap, and ``(long long)i + (long long)u * blockDim.x`` is the same number.
Only where the value is used alike in either type is it written so:

- a subscript ``p[J]``;
- a subscript ``p[min(C - 1, J)]`` (``min(J, C - 1)``), ``C`` the loop's bound, an ``int`` or
  ``unsigned`` parameter the body does not write: ``C > i >= 0`` there, so ``C - 1 >= 0`` and the
  unsigned ``min`` and the 64-bit one agree;
- a comparison ``J < C`` (``<=``, ``>``, ``>=``): ``C >= 1`` there, unsigned or not alike.

Inside ``if (J < C) S``, ``p[min(C - 1, J)]`` in ``S`` is ``p[J]`` (nothing in ``S`` writes what
``J`` or ``C`` reads): the store is contiguous. Each such expression becomes ``(kb_fast ? new :
(old))``: the other path (blocks of more dimensions, ``C`` above ``INT_MAX / 2``, a faulting block
again) runs the text as written, unsigned wrap and all."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .fission_scan import closing
from .fission_strided import ForLoop, writes
from .fission_unroll import constant_value, counted

if TYPE_CHECKING:
    from .fission_state import Rewrite

_BD = r"blockDim\s*\.\s*x"
_CMP = r"<=|>=|<(?![<=])|>(?![>=])"


def _param_type(rw: Rewrite, name: str) -> str:
    for p in rw.fn_params:
        m = re.fullmatch(rf"\s*(?:const\s+)?([\w\s]+?)\s+(?:const\s+)?{name}\s*", p)
        if m:
            return " ".join(m.group(1).split())
    return ""


def _pointer(rw: Rewrite, name: str) -> bool:
    """Whether ``name`` is a pointer or array parameter, or a local the loop path declares again
    (per thread, for the block, or in each region) with a pointer type: a subscript of a class
    with several ``operator[]`` would not take a 64-bit index alike."""
    found = [p for p in rw.fn_params if re.search(rf"\b{name}\s*(?:\[[^\]]*\]\s*)*$", p)]
    if found:
        return all(re.search(rf"\*\s*(?:(?:const|__restrict__)\s+)*{name}\s*$|{name}\s*\[", p) for p in found)
    types = [rw.arrays.get(name), rw.block_vars.get(name), rw.remat.get(name, ("", ""))[0]]
    if any(t and t.rstrip().endswith("*") for t in types):
        return True
    decl = rw.hoisted.get(name, "")
    return re.search(rf"\*\s*(?:const\s+)?{name}\s*=", decl) is not None


def _positive_step(rw: Rewrite, by: str, at: int) -> bool:
    """``blockDim.x``, or it times a positive constant."""
    by = by.strip()
    if re.fullmatch(_BD, by):
        return True
    m = re.fullmatch(rf"{_BD}\s*\*\s*(.+)|(.+?)\s*\*\s*{_BD}", by, re.S)
    if not m:
        return False
    k = constant_value(rw, (m.group(1) or m.group(2)).strip(), at)
    return k is not None and k > 0


def indices(rw: Rewrite, f: ForLoop, body_lo: int, body_hi: int) -> None:
    """Queue the rewrites of the module docstring for the strided loop ``f`` whose body is
    ``code[body_lo:body_hi]`` (applied by :func:`apply` where no other edit touches them)."""
    code = rw.code
    i, end = f.i, f.end.strip()
    if f.type not in ("int", "signed", "signed int") or not _positive_step(rw, f.by, f.paren):
        return
    if not re.fullmatch(r"[A-Za-z_]\w*", end) or end not in rw.fixed or end not in rw.params:
        return
    if _param_type(rw, end) not in ("int", "signed", "signed int", "unsigned", "unsigned int"):
        return
    for m in re.finditer(r"\bfor\s*\(", code[body_lo:body_hi]):
        loop = counted(rw, body_lo + m.start())
        if loop is None:
            continue
        u, lo, hi, stop = loop
        if lo < 0 or hi > 1 << 20 or re.search(rf"[(,]\s*{u}\s*[,)]", code[body_lo + m.start() : stop]):
            continue  # (u as a whole argument: a reference parameter could write it)
        _loop(rw, i, u, end, body_lo + m.start(), stop)


def _loop(rw: Rewrite, i: str, u: str, end: str, lo: int, hi: int) -> None:
    code = rw.code
    j = rf"{i}\s*\+\s*(?:{u}\s*\*\s*{_BD}|{_BD}\s*\*\s*{u})"
    new_j = f"((long long)({i}) + (long long)({u}) * (long long)blockDim.x)"
    guards = []  # the then-statements of `if (J < C)`
    for m in re.finditer(rf"\bif\s*\(\s*({j})\s*<\s*{end}\s*\)", code[lo:hi]):
        k = lo + m.end()
        while code[k].isspace():
            k += 1
        stop = closing(code, k) + 1 if code[k] == "{" else code.find(";", k) + 1
        if stop > 0 and not any(writes(w, code[k:stop]) for w in (end, u)):
            guards.append((k, stop))
    clamp = rf"min\s*\(\s*(?:{end}\s*-\s*1\s*,\s*({j})|({j})\s*,\s*{end}\s*-\s*1)\s*\)"
    for m in re.finditer(rf"\b([A-Za-z_]\w*)\s*\[\s*(?:({clamp})|({j}))\s*\]", code[lo:hi]):
        if not _pointer(rw, m.group(1)):
            continue
        s = lo + m.start() + code[lo + m.start() : lo + m.end()].index("[") + 1
        e = lo + m.end() - 1
        old = rw.text[s:e]
        if m.group(2):
            guarded = any(a <= s and e <= b for a, b in guards)
            new = new_j if guarded else f"min((long long)({end}) - 1, {new_j})"
        else:
            new = new_j
        rw.late_edits.append((s, e, f"(kb_fast ? {new} : ({old}))"))
    for m in re.finditer(rf"(?<=[(,&|])(\s*)({j})\s*({_CMP})\s*{end}(?=\s*[),&|?])", code[lo:hi]):
        s = lo + m.start(2)
        e = lo + m.end()
        old = rw.text[s:e]
        rw.late_edits.append((s, e, f"(kb_fast ? {new_j} {m.group(3)} {end} : ({old}))"))


def apply(rw: Rewrite) -> None:
    """Add the queued rewrites that no other edit overlaps."""
    for s, e, new in rw.late_edits:
        if not any((a < e and s < b) or (a == b and s <= a <= e) for a, b, _ in rw.edits):
            rw.edits.append((s, e, new))
