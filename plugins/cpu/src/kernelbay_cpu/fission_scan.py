"""Reading a kernel body for barrier loop fission: its statements, matching brackets, the
arguments of a call, line numbers. Offsets are into the code text (comments, literals and
directives blanked), which has the source's offsets."""

from __future__ import annotations

import re

_OPEN, _CLOSE = "([{", ")]}"
#: The methods of a cooperative_groups group the loop path's objects have.
CG_METHODS = {
    "thread_rank",
    "size",
    "num_threads",
    "meta_group_rank",
    "meta_group_size",
    "group_dim",
    "dim_threads",
    "group_index",
    "thread_index",
}


def closing(code: str, i: int) -> int:
    """The offset of the bracket that closes the one at ``i``, or -1."""
    depth = 0
    for k in range(i, len(code)):
        if code[k] in _OPEN:
            depth += 1
        elif code[k] in _CLOSE:
            depth -= 1
            if depth == 0:
                return k
    return -1


def skip_ws(code: str, i: int, end: int) -> int:
    while i < end and code[i].isspace():
        i += 1
    return i


def statements(code: str, a: int, b: int) -> list[tuple[int, int]] | None:
    """The top-level statements of ``code[a:b]`` as (start, end) offsets, or None when one
    cannot be delimited."""
    out = []
    i = skip_ws(code, a, b)
    while i < b:
        j = _statement(code, i, b)
        if j < 0:
            return None
        out.append((i, j))
        i = skip_ws(code, j, b)
    return out


def statement_end(code: str, i: int, b: int) -> int:
    """The end of the statement that begins at ``i`` (inside ``code[:b]``), or -1."""
    return _statement(code, i, b)


def _statement(code: str, i: int, b: int) -> int:
    if code[i] == "{":
        k = closing(code, i)
        return -1 if k < 0 or k >= b else k + 1
    m = re.match(r"(if|for|while|switch)\s*\(", code[i:b])
    if m:
        k = closing(code, i + m.end() - 1)
        if k < 0:
            return -1
        j = _statement(code, skip_ws(code, k + 1, b), b)
        if j < 0:
            return -1
        if m.group(1) == "if":
            e = skip_ws(code, j, b)
            if re.match(r"else\b", code[e:b]):
                return _statement(code, skip_ws(code, e + 4, b), b)
        return j
    if re.match(r"do\b", code[i:b]):
        j = _statement(code, skip_ws(code, i + 2, b), b)
        if j < 0:
            return -1
        m2 = re.match(r"\s*while\s*\(", code[j:b])
        if not m2:
            return -1
        k = closing(code, j + m2.end() - 1)
        semi = code.find(";", k)
        return -1 if k < 0 or semi < 0 or semi >= b else semi + 1
    depth = 0
    for k in range(i, b):
        c = code[k]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == ";" and depth == 0:
            return k + 1
    return -1


def split_top(s: str) -> list[str]:
    """``s`` split at its top-level commas."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for c in s:
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def arguments(code: str, paren: int, close: int) -> list[tuple[int, int]]:
    """The (start, end) offsets of the top-level arguments between ``paren`` and ``close``."""
    out, depth, start = [], 0, paren + 1
    for k in range(paren + 1, close):
        c = code[k]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            out.append((start, k))
            start = k + 1
    if code[start:close].strip() or out:
        out.append((start, close))
    return out


def line_of(code: str, at: int) -> int:
    return code.count("\n", 0, at) + 1


def pad(new: str, old: str) -> str:
    """``new`` followed by the newlines of ``old``, so that lines keep their numbers."""
    return new + "\n" * old.count("\n")


_JUMP = re.compile(r"\b(break|continue)\b")


def loose_jump(code: str, a: int, b: int, brk: bool = False, cont: bool = False) -> int:
    """The offset of the first ``break`` or ``continue`` in the statements ``code[a:b]`` that
    leaves them (its loop or ``switch`` is not among them), or -1. ``brk``/``cont``: a loop
    around them that ``break``/``continue`` may stay in. Where a statement cannot be delimited,
    any ``break`` or ``continue`` in it counts as leaving."""
    stmts = statements(code, a, b)
    if stmts is None:
        m = _JUMP.search(code, a, b)
        return m.start() if m else -1
    for s, e in stmts:
        k = _jump_in(code, s, e, brk, cont)
        if k >= 0:
            return k
    return -1


def _jump_in(code: str, s: int, e: int, brk: bool, cont: bool) -> int:
    if not _JUMP.search(code, s, e):
        return -1
    if code[s] == "{":
        return loose_jump(code, s + 1, closing(code, s), brk, cont)
    m = re.match(r"(if|for|while|switch)\s*\(", code[s:e])
    if m:
        close = closing(code, s + m.end() - 1)
        body = skip_ws(code, close + 1, e)
        if m.group(1) == "if":
            then_end = _statement(code, body, e)
            k = loose_jump(code, body, then_end, brk, cont) if then_end > 0 else body
            if k >= 0:
                return k
            rest = skip_ws(code, then_end, e)
            return loose_jump(code, rest + 4, e, brk, cont) if code.startswith("else", rest) else -1
        if m.group(1) == "switch":  # its cases are not delimited as statements: any continue leaves
            if cont:
                return -1
            c = re.search(r"\bcontinue\b", code[body:e])
            return body + c.start() if c else -1
        return loose_jump(code, body, e, True, True)
    if re.match(r"do\b", code[s:e]):
        end = _statement(code, skip_ws(code, s + 2, e), e)
        return loose_jump(code, skip_ws(code, s + 2, e), end, True, True) if end > 0 else s
    for j in _JUMP.finditer(code, s, e):
        if not (brk if j.group(1) == "break" else cont):
            return j.start()
    return -1


_NAMED_TYPE = re.compile(
    r"\btypedef\b[^;{}()]*?\b([A-Za-z_]\w*)\s*;|\busing\s+([A-Za-z_]\w*)\s*="
    r"|\b(?:struct|class|union)\s+(?:(?:__align__|alignas)\s*\(\s*\w+\s*\)\s*)?([A-Za-z_]\w*)\s*[{:]"
)


def named_types(codes: list[str]) -> set[str]:
    """The type names ``codes`` (comments and literals blanked) define at any scope: by
    ``typedef`` (not of a function or an array), ``using N =``, or ``struct``/``class``/``union``."""
    return {next(g for g in m.groups() if g) for c in codes for m in _NAMED_TYPE.finditer(c)}
