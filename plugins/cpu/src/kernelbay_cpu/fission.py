"""Barrier loop fission: a kernel with ``__syncthreads()`` in structured places runs as loops
over the block's threads between barriers, not as fibers (include/kb_cpu_fission.h).

What is handled (anything else keeps the fiber runner, so correctness never depends on it):
``__syncthreads();`` as a statement at the top level of the kernel body, or at the top level
of the body of a top-level ``for`` loop whose header only reads the loop's own variable, kernel
parameters, ``blockDim``/``gridDim``/``blockIdx`` and literals (every thread runs it alike). Locals
declared at those top levels with a plain arithmetic or pointer type become per-thread arrays.
``__shared__`` arrays declared at the top level are the block's: local arrays of the call
that runs the block. Not handled: ``return``,
``break``, ``continue`` or ``goto`` anywhere in the body, warp operations, cooperative groups,
a parameter the body assigns, ``extern __shared__``, ``volatile`` and ``while``/``do`` loops (a thread may spin on
what another thread of its block stores, without a barrier: only fibers run both), barriers in ``if``/``while``/nested loops, and barriers reached through
other functions or macros.

The rewrite keeps every line where it was, so diagnostics still point at the user's lines.
"""

from __future__ import annotations

import re

from kernelbay.csource import Function, strip_comments_and_strings

_BARRIER = "__syncthreads"
_BARRIER_STMT = re.compile(r"__syncthreads\s*\(\s*\)\s*;")
_FORBIDDEN = re.compile(
    r"\b(?:return|break|continue|goto|__syncthreads_\w+|__syncwarp|__shfl\w*|__ballot\w*|__any_sync|__all_sync"
    r"|__uni_sync|__activemask|__match_\w+|__reduce_\w+_sync|cooperative_groups|this_thread_block|thread_block"
    r"|tiled_partition|extern|dyn_shared|asm|__asm__|volatile|while)\b|\.\s*(?:sync|shfl\w*|ballot|thread_rank)\s*\("
)
_TYPE = (
    r"(?:(?:const|unsigned|signed|long|short|volatile)\s+)*"
    r"(?:int|float|double|long|char|bool|short|unsigned|size_t|ptrdiff_t|u?int(?:8|16|32|64)_t)"
    r"(?:\s+const)?(?:\s*\*+(?:\s*const)?(?:\s*__restrict__)?)?"
)
_DECL = re.compile(rf"(?P<type>{_TYPE})\s+(?P<rest>[A-Za-z_][^;]*);\s*$", re.S)
_LOOKS_DECL = re.compile(r"^(?:const\s+)?[A-Za-z_][\w:<>]*\s*[*&]*\s+[*&]*\s*[A-Za-z_]\w*\s*(?:[=;,\[({]|$)")
_KEYWORD_START = re.compile(r"^(?:if|for|while|do|switch|else|case|default|return|__shared__|static|typedef)\b")
_UNIFORM_WORDS = {"blockDim", "gridDim", "blockIdx", "x", "y", "z", "int", "unsigned", "long", "size_t", "const"}
_INDEX_WORDS = {
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "x",
    "y",
    "z",
    "int",
    "unsigned",
    "long",
    "short",
    "char",
    "float",
    "double",
    "bool",
    "size_t",
    "const",
}
_OPEN, _CLOSE = "([{", ")]}"


def _match(code: str, i: int) -> int:
    depth = 0
    for k in range(i, len(code)):
        if code[k] in _OPEN:
            depth += 1
        elif code[k] in _CLOSE:
            depth -= 1
            if depth == 0:
                return k
    return -1


def _skip_ws(code: str, i: int, end: int) -> int:
    while i < end and code[i].isspace():
        i += 1
    return i


def _statements(code: str, a: int, b: int) -> list[tuple[int, int]] | None:
    """The top-level statements of ``code[a:b]`` as (start, end) offsets, or None when one
    cannot be delimited."""
    out = []
    i = _skip_ws(code, a, b)
    while i < b:
        j = _statement(code, i, b)
        if j < 0:
            return None
        out.append((i, j))
        i = _skip_ws(code, j, b)
    return out


def _statement(code: str, i: int, b: int) -> int:
    if code[i] == "{":
        k = _match(code, i)
        return -1 if k < 0 or k >= b else k + 1
    m = re.match(r"(if|for|while|switch)\s*\(", code[i:b])
    if m:
        k = _match(code, i + m.end() - 1)
        if k < 0:
            return -1
        j = _statement(code, _skip_ws(code, k + 1, b), b)
        if j < 0:
            return -1
        if m.group(1) == "if":
            e = _skip_ws(code, j, b)
            if re.match(r"else\b", code[e:b]):
                return _statement(code, _skip_ws(code, e + 4, b), b)
        return j
    if re.match(r"do\b", code[i:b]):
        j = _statement(code, _skip_ws(code, i + 2, b), b)
        if j < 0:
            return -1
        m2 = re.match(r"\s*while\s*\(", code[j:b])
        if not m2:
            return -1
        k = _match(code, j + m2.end() - 1)
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


def _split_top(s: str) -> list[str]:
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


class _Giveup(Exception):
    pass


def fission(text: str, code: str, fn: Function) -> str | None:
    """``text`` with the kernel ``fn`` rewritten for the loop path with barriers as region
    boundaries, or None when it does not have the shape handled (see the module docstring).
    ``code``: ``text`` with comments, literals and directives blanked (same offsets)."""
    if fn.body is None:
        return None
    a, b = fn.body[0] + 1, fn.body[1]
    body = code[a:b]
    if _BARRIER not in body or _FORBIDDEN.search(body):
        return None
    try:
        return _rewrite(text, code, fn, a, b)
    except _Giveup:
        return None


def _params(fn: Function) -> set[str]:
    names = set()
    for p in fn.params:
        m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", p.text)
        if m:
            names.add(m.group(1))
    return names


def _rewrite(text: str, code: str, fn: Function, a: int, b: int) -> str:
    params = _params(fn)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) on text offsets
    arrays: dict[str, str] = {}  # per-thread local -> its type
    scalars: set[str] = set()  # uniform loop variables
    #: locals computed from the thread's and block's indices and unchanged kernel parameters
    #: only, never assigned again: name -> (type, initializer), in declaration order
    remat: dict[str, tuple[str, str]] = {}
    body_code = code[a:b]

    def _assigned(name: str) -> bool:
        writes = re.findall(rf"(?<![\w.])(?<!->){name}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", body_code)
        return len(writes) > 1 or re.search(rf"(?:\+\+|--|&)\s*{name}\b|\b{name}\s*(?:\+\+|--)", body_code) is not None

    def _rematerializable(name: str, init: str) -> bool:
        if _assigned(name) or re.search(r"\(\s*[^)]*\)\s*\(|\[", init):
            return False
        fixed = {
            p
            for p in params
            if not re.search(
                rf"(?<![\w.])(?<!->){p}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{p}\b|\b{p}\s*(?:\+\+|--)",
                body_code,
            )
        }
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", init))
        return words <= _INDEX_WORDS | fixed | set(remat)

    def level(lo: int, hi: int, inside_loop: bool) -> None:
        stmts = _statements(code, lo, hi)
        if stmts is None:
            raise _Giveup
        region: list[tuple[int, int]] = []

        def flush() -> None:
            if region:
                again = " ".join(f"{t} const {n} ={init};" for n, (t, init) in remat.items())
                edits.append((region[0][0], region[0][0], f" KB_REGION_BEGIN {again} "))
                edits.append((region[-1][1], region[-1][1], " KB_REGION_END "))
                region.clear()

        for s, e in stmts:
            st = code[s:e].strip()
            if _BARRIER_STMT.fullmatch(st):
                flush()
                edits.append((s, e, " " * (e - s)))
                continue
            if st.startswith("__shared__"):
                if inside_loop or "=" in st:
                    raise _Giveup
                flush()  # the block's array: declared once, outside the thread loops
                # A local array of the kernel call, which runs the whole block: not the prelude's
                # thread_local, whose every access in a shared object is a __tls_get_addr call.
                k = code.index("__shared__", s)
                edits.append((k, k + len("__shared__"), "alignas(16)"))
                continue
            if _BARRIER in st:
                m = re.match(r"for\s*\(", st)
                if not m or inside_loop:
                    raise _Giveup
                flush()
                _uniform_for(s, e)
                continue
            d = _DECL.match(code, _skip_ws(code, s, e), e)
            if d:
                _declare(s, e, d)
            elif _LOOKS_DECL.match(st) and not _KEYWORD_START.match(st):
                raise _Giveup  # a declaration of a type not handled (auto, a struct, ...)
            region.append((s, e))
        flush()

    def _uniform_for(s: int, e: int) -> None:
        paren = code.index("(", s)
        close = _match(code, paren)
        header = code[paren + 1 : close]
        parts = header.split(";")
        if len(parts) != 3:
            raise _Giveup
        init = re.match(rf"\s*(?:{_TYPE})\s+([A-Za-z_]\w*)\s*=", parts[0])
        if not init:
            raise _Giveup
        var = init.group(1)
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", header))
        if not words <= _UNIFORM_WORDS | params | {var} | scalars:
            raise _Giveup
        scalars.add(var)
        j = _skip_ws(code, close + 1, e)
        if code[j] != "{":
            raise _Giveup
        level(j + 1, _match(code, j), True)

    def _declare(s: int, e: int, d: re.Match[str]) -> None:
        s0 = _skip_ws(code, s, e)
        t = re.sub(r"__restrict__", "", d.group("type"))
        # The array is assigned, so the variable itself is not const; what a pointer points at may be.
        t = re.sub(r"\*\s*const\b", "*", t) if "*" in t else re.sub(r"\bconst\b", "", t)
        t = " ".join(t.split()).replace(" *", "*")
        rest0 = d.start("rest")
        semi = code.rindex(";", s0, e)
        out = []
        pos = rest0
        for part in _split_top(code[rest0:semi]):
            m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:=(.*))?", part, re.S)
            if not m:
                raise _Giveup
            name = m.group(1)
            if name in arrays or name in params or name in scalars:
                raise _Giveup
            arrays[name] = t
            if m.group(2) is not None:
                init = pos + m.start(2)
                if _rematerializable(name, code[init : pos + len(part)]):
                    # Recomputed at the top of each region instead of stored per thread: the
                    # compiler then sees `t` as the loop index (contiguous, vectorisable).
                    del arrays[name]
                    remat[name] = (t, text[init : pos + len(part)])
                else:
                    out.append(f"{name} ={text[init : pos + len(part)]}")
            pos += len(part) + 1
        stmt = ("(void)0" if not out else ", ".join(out)) + ";"
        edits.append((s, e, _pad(stmt, text[s:e])))

    # Each CUDA thread has its own copy of the parameters; here the regions share the call's.
    if any(
        _assigned(p) or re.search(rf"(?<![\w.])(?<!->){p}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", body_code) for p in params
    ):
        raise _Giveup
    level(a, b, False)
    if not arrays and not remat and not edits:
        raise _Giveup
    # Every other declaration of a per-thread name (a shadowing one) would be renamed too.
    body = code[a:b]
    for name in [*arrays, *remat]:
        if len(re.findall(rf"(?:{_TYPE}|[>\w])\s+\**{name}\s*[=;,\[)]", body)) > 1:
            raise _Giveup
    out, pos = [], 0
    for s, e, rep in sorted(edits, key=lambda x: (x[0], x[1])):
        out.append(text[pos:s])
        out.append(rep)
        pos = e
    out.append(text[pos:])
    new = "".join(out)
    nb = b + len(new) - len(text)
    # Per-thread locals are indexed by the thread, in the body's code only (not in literals).
    seg, seg_code = new[a:nb], strip_comments_and_strings(new)[a:nb]
    spots = sorted(
        m.end() for name in arrays for m in re.finditer(rf"(?<![\w.])(?<!->)(?<!::){name}\b(?!\s*\()", seg_code)
    )
    pieces, pos = [], 0
    for k in spots:
        pieces.append(seg[pos:k] + "[kb_t]")
        pos = k
    pieces.append(seg[pos:])
    decls = " ".join(f"{t} {n}[KB_FISSION_MAX_THREADS];" for n, t in arrays.items())
    return new[:a] + " KB_FISSION_BEGIN " + decls + "".join(pieces) + new[nb:]


def _pad(new: str, old: str) -> str:
    """``new`` followed by the newlines of ``old``, so that lines keep their numbers."""
    return new + "\n" * old.count("\n")
