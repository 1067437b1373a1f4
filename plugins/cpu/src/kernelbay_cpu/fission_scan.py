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
