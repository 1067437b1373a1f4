"""CUDA's ``#pragma unroll`` on the loop path, and the integer constants of a kernel body.

fission_pp.py blanks every ``#pragma`` line of a fissioned body (one before a loop that becomes
several regions would stand before the wrong statement). A ``#pragma unroll`` before a ``for``
that stays whole inside a region's statement (a loop over ``u`` in a block-strided loop's body,
llm.c's softmax kernel7) becomes ``KB_UNROLL(N)`` there (kb_cpu_cuda.h: g++'s ``#pragma GCC
unroll N``, clang's ``#pragma unroll N``), as nvcc reads it: with
a count, that count; without one, the trip count where it is a constant (at most
:data:`MAX_UNROLL`), else nothing. Unrolled, the loop over the block's threads around it can be
a vector loop (the per-thread ``reg_array[u]`` become registers)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .fission_params import DEFINE
from .fission_scan import closing, skip_ws
from .fission_strided import for_header, writes

if TYPE_CHECKING:
    from .fission_state import Rewrite

#: the most iterations a ``#pragma unroll`` without a count unrolls here (nvcc has no bound;
#: each copy is compiled, so a bound keeps compile times as they were)
MAX_UNROLL = 32
_INT_TYPE = r"(?:(?:signed|unsigned)\s+)?(?:int|short|long(?:\s+long)?)|signed|unsigned|size_t"
_EXPR = re.compile(r"[\w\s()+\-*/%]*")


def constant_value(rw: Rewrite, expr: str, before: int, depth: int = 0) -> int | None:
    """The value of ``expr`` (at ``code[before]``) where it is an integer constant of the kernel:
    literals, and names of ``const``/``constexpr`` integer locals the body declares once, before
    ``before``, with such a value, or of object-like macros the source defines once so; with ``+ -
    * / %`` and parentheses."""
    if depth > 8 or not _EXPR.fullmatch(expr):
        return None
    out = []
    for tok in re.findall(r"\d+[uUlL]*|[A-Za-z_]\w*|\S", expr):
        if tok[0].isdigit():
            out.append(str(int(tok.rstrip("uUlL"))))
        elif tok[0].isalpha() or tok[0] == "_":
            v = _named(rw, tok, depth, before)
            if v is None:
                return None
            out.append(f"({v})")
        elif tok == "/":
            out.append("//")
        else:
            out.append(tok)
    try:
        v = eval("".join(out), {"__builtins__": {}}, {})  # digits, parentheses and + - * // % only
    except (SyntaxError, ZeroDivisionError, TypeError):
        return None
    # (C truncates toward zero; the floor of // agrees for the non-negative operands trusted here)
    return v if isinstance(v, int) and 0 <= v < 1 << 31 else None


def _named(rw: Rewrite, name: str, depth: int, before: int) -> int | None:
    found = re.findall(
        rf"(?:\bconst(?:expr)?\s+(?:{_INT_TYPE})|(?:{_INT_TYPE})\s+const)\s+{name}\s*=\s*([^;,{{}}]+);",
        rw.body_code[: max(0, before - rw.body_start)],
    )
    declared = re.findall(rf"(?:{_INT_TYPE}|\w)\s+(?:const\s+)?{name}\s*[=;,\[)]", rw.body_code)
    if len(found) == 1 and len(declared) == 1:
        return constant_value(rw, found[0].strip(), before, depth + 1)
    if name in rw.consts and not declared:
        defs = [v for n, v in DEFINE.findall(rw.text) if n == name]
        if len(defs) == 1:
            return constant_value(rw, defs[0].strip(), before, depth + 1)
    return None


def counted(rw: Rewrite, p: int) -> tuple[str, int, int, int] | None:
    """``for (int u = A; u < B; u++)`` at ``code[p:]`` (``++u``, ``u += 1`` too), A and B constants
    (:func:`constant_value`) and ``u`` not written in its body: (u, A, B, where the statement ends)."""
    code = rw.code
    header = for_header(code, p, len(code))
    if header is None:
        return None
    _, close, parts = header
    init = re.fullmatch(r"\s*(?:signed\s+)?int\s+([A-Za-z_]\w*)\s*=(.*)", parts[0], re.S)
    if not init:
        return None
    u = init.group(1)
    cond = re.fullmatch(rf"\s*{u}\s*<(?!=)(.*)", parts[1], re.S)
    step = re.fullmatch(rf"\s*(?:{u}\s*\+\+|\+\+\s*{u}|{u}\s*\+=\s*1|{u}\s*=\s*{u}\s*\+\s*1)\s*", parts[2])
    if not cond or not step:
        return None
    lo, hi = constant_value(rw, init.group(2).strip(), p), constant_value(rw, cond.group(1).strip(), p)
    if lo is None or hi is None:
        return None
    j = skip_ws(code, close + 1, len(code))
    end = closing(code, j) + 1 if code[j] == "{" else code.find(";", j) + 1
    if end <= 0 or (code[j] != "{" and re.match(r"(?:for|if|while|do|switch)\b", code[j:])):
        return None  # (a loop or if as the body: not needed here)
    if writes(u, code[close + 1 : end]):
        return None
    return u, lo, hi, end


def unrolls(rw: Rewrite, found: list[tuple[int, str]]) -> None:
    """Add ``KB_UNROLL(N)`` edits for the ``#pragma unroll`` lines ``found`` (where
    each ends, what followed ``unroll``) before loops that stay whole (see the module docstring)."""
    for end, arg in found:
        p = skip_ws(rw.code, end, rw.body_end)
        if p >= rw.body_end or p in rw.level_starts or not re.match(r"for\s*\(", rw.code[p:]):
            continue
        if any(s <= p < e or s == p for s, e, _ in rw.edits):
            continue
        if arg:
            n = constant_value(rw, arg.strip("() \t"), p)
            if n is None or n < 1:
                continue
        else:
            loop = counted(rw, p)
            if loop is None:
                continue
            n = loop[2] - loop[1]
            if not 1 < n <= MAX_UNROLL:
                continue
        rw.edits.append((p, p, f"KB_UNROLL({min(n, 65534)}) "))
