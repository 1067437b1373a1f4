"""Barrier loop fission: a kernel with ``__syncthreads()`` and warp operations in structured
places runs as loops over the block's threads between them, not as fibers
(include/kb_cpu_fission.h). POCL's region formation and CuPBoP do the same.

What is handled (anything else keeps the fiber runner, so correctness never depends on it):
a split point as a statement at the top level of the kernel body, or at the top level of the
body of a top-level ``for`` loop whose header only reads the loop's own variable, kernel
parameters, ``blockDim``/``gridDim``/``blockIdx``, ``warpSize`` and literals (every thread runs it
alike). Split points: ``__syncthreads();``, a cooperative_groups block's ``sync``, ``__syncwarp``,
a tile's ``sync``, and a statement that calls warp operations -- ``__shfl_sync``,
``__shfl_up/down/xor_sync``, ``__ballot_sync``, ``__any_sync``, ``__all_sync`` with a mask every
thread computes alike, and a ``thread_block_tile<N>``'s (N <= 32) ``shfl``, ``shfl_up/down/xor``,
``ballot``, ``any``, ``all`` and ``cooperative_groups::reduce``. A warp operation is a barrier among
a warp's lanes: the loop before it stores each lane's operand in a lane array, the loop after
reads each lane's result there. Locals declared at those top levels with a plain arithmetic or
pointer type become per-thread arrays; cooperative_groups objects (``this_thread_block()``,
``tiled_partition<N>``) are made again in each loop from the loop's thread index. ``__shared__``
arrays declared at the top level are the block's: local arrays of the call that runs the block;
``extern __shared__`` at the top level points at the launch's dynamic shared memory.

Not handled (:func:`split` says which, for the profile note): ``return``, ``break``, ``continue``
or ``goto`` anywhere in the body, warp operations inside ``if``, ``while`` or other statements,
a warp operation's mask that differs between threads, ``__match_*``, ``__reduce_*_sync``,
``__activemask``, scans, tiles of more than 32 threads, a parameter the body assigns,
``volatile`` and ``while``/``do`` loops (a thread may spin on what another thread of its block
stores, without a barrier: only fibers run both), split points in ``if``/``while``/nested loops,
and split points reached through other functions or macros.

The rewrite keeps every line where it was, so diagnostics still point at the user's lines.
"""

from __future__ import annotations

import re

from kernelbay.csource import Function, strip_comments_and_strings

_BARRIER = "__syncthreads"
_BARRIER_STMT = re.compile(r"__syncthreads\s*\(\s*\)\s*;")
#: What the loop path never runs: each with the words the profile note gives.
_FORBIDDEN = [
    (r"\breturn\b", "a return (a thread leaves early)"),
    (r"\b(?:break|continue|goto)\b", "break, continue or goto"),
    (r"\bwhile\b", "a while or do loop (a thread may wait on another without a barrier)"),
    (r"\bvolatile\b", "volatile (a thread may wait on another without a barrier)"),
    (r"\b(?:asm|__asm__)\b", "inline assembly"),
    (r"\b__syncthreads_\w+", "__syncthreads_count/and/or"),
    (r"\b__shfl(?!_(?:up_|down_|xor_)?sync\b)\w*", "a shuffle without _sync"),
    (r"\b__ballot(?!_sync\b)\w*", "__ballot without _sync"),
    (r"\b(?:__uni_sync|__activemask|__match_\w+|__reduce_\w+_sync)\b", "__activemask, __match_*, __reduce_*_sync"),
    (
        r"\b(?:inclusive_scan|exclusive_scan|thread_group|coalesced_\w+|this_grid|block_tile_memory)\b",
        "a cooperative_groups scan, thread_group or block_tile_memory",
    ),
    (r"\.\s*(?:match_\w+|meta_group\w*_sync)\s*\(", "a tile's match_any/match_all"),
    (r"\bdyn_shared\b(?!\s*\(\s*\)\s*\)\s*;)", "dynamic shared memory outside a top-level extern __shared__"),
    (r"\bextern\b(?!\s+__shared__)", "an extern declaration"),
]
_FORBIDDEN_RE = [(re.compile(p), why) for p, why in _FORBIDDEN]
#: A statement that must be a split point or stand where one may (anything else holding it gives up).
_SPLIT_RE = re.compile(
    r"\b(?:__syncthreads|__syncwarp|__shfl_(?:up_|down_|xor_)?sync|__ballot_sync|__any_sync|__all_sync)\b"
    r"|\.\s*(?:sync|shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all)\s*\(|\b(?:reduce|sync)\s*\("
)
_WARP_CALL = re.compile(
    r"\b(?P<intr>__shfl_sync|__shfl_up_sync|__shfl_down_sync|__shfl_xor_sync|__ballot_sync|__any_sync|__all_sync)"
    r"\s*\(|\b(?P<obj>[A-Za-z_]\w*)\s*\.\s*(?P<meth>shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all)\s*\("
    r"|(?P<red>(?:\b(?:cg|cooperative_groups)\s*::\s*)?\breduce)\s*\("
)
_OPS = {
    "__shfl_sync": "W_SHFL",
    "__shfl_up_sync": "W_UP",
    "__shfl_down_sync": "W_DOWN",
    "__shfl_xor_sync": "W_XOR",
    "shfl": "W_SHFL",
    "shfl_up": "W_UP",
    "shfl_down": "W_DOWN",
    "shfl_xor": "W_XOR",
}
_VOTES = {"__ballot_sync": "V_BALLOT", "__any_sync": "V_ANY", "__all_sync": "V_ALL"}
_TILE_VOTES = {"ballot": "V_TILE_BALLOT", "any": "V_TILE_ANY", "all": "V_TILE_ALL"}
_VOTE_TYPES = {"V_BALLOT": "unsigned", "V_ANY": "int", "V_ALL": "int", "V_TILE_BALLOT": "unsigned"}
_CG = r"(?:(?:cg|cooperative_groups)\s*::\s*)?"
_CG_BLOCK_DECL = re.compile(
    rf"(?:{_CG}thread_block|auto)\s+(?P<name>[A-Za-z_]\w*)\s*=\s*{_CG}this_thread_block\s*\(\s*\)\s*;"
)
_CG_TILE_DECL = re.compile(
    rf"(?:{_CG}thread_block_tile\s*<\s*(?P<n1>\d+)\s*(?:,[^<>;]*)?>|auto)\s+(?P<name>[A-Za-z_]\w*)\s*=\s*"
    rf"{_CG}tiled_partition\s*<\s*(?P<n2>\d+)\s*>\s*\(\s*(?P<parent>[A-Za-z_]\w*)\s*\)\s*;"
)
_CG_METHODS = {
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
_NAMESPACE_ALIAS = re.compile(r"namespace\s+[A-Za-z_]\w*\s*=\s*[\w:\s]+;")
_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:(?:alignas|__align__)\s*\(\s*\w+\s*\)\s+)?(?P<type>[A-Za-z_][\w:\s]*?[\w])"
    r"\s+(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_DYN_SHARED_PTR = re.compile(
    r"(?P<type>[A-Za-z_][\w:\s]*?)\s*\*\s*const\s+(?P<name>[A-Za-z_]\w*)\s*=\s*reinterpret_cast\s*<[^<>;]*>\s*"
    r"\(\s*::kb_cpu::dyn_shared\s*\(\s*\)\s*\)\s*;"
)
_TYPE = (
    r"(?:(?:const|unsigned|signed|long|short|volatile)\s+)*"
    r"(?:int|float|double|long|char|bool|short|unsigned|size_t|ptrdiff_t|u?int(?:8|16|32|64)_t)"
    r"(?:\s+const)?(?:\s*\*+(?:\s*const)?(?:\s*__restrict__)?)?"
)
_DECL = re.compile(rf"(?P<type>{_TYPE})\s+(?P<rest>[A-Za-z_][^;]*);\s*$", re.S)
_LOOKS_DECL = re.compile(r"^(?:const\s+)?[A-Za-z_][\w:<>]*\s*[*&]*\s+[*&]*\s*[A-Za-z_]\w*\s*(?:[=;,\[({]|$)")
_KEYWORD_START = re.compile(r"^(?:if|for|while|do|switch|else|case|default|return|__shared__|static|typedef)\b")
_UNIFORM_WORDS = {
    "blockDim", "gridDim", "blockIdx", "x", "y", "z", "int", "unsigned", "long", "size_t", "const", "warpSize",
}  # fmt: skip
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
    "warpSize",
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
    """The kernel has a shape the loop path does not take; the message says which."""


def fission(text: str, code: str, fn: Function) -> str | None:
    """``text`` with the kernel ``fn`` rewritten for the loop path with barriers and warp
    operations as region boundaries, or None when it does not have the shape handled (see the
    module docstring). ``code``: ``text`` with comments, literals and directives blanked (same offsets)."""
    return split(text, code, fn)[0]


def split(text: str, code: str, fn: Function) -> tuple[str | None, str]:
    """:func:`fission`'s text, or None and why the kernel keeps the fiber runner."""
    if fn.body is None:
        return None, "its body was not found"
    a, b = fn.body[0] + 1, fn.body[1]
    body = code[a:b]
    if not _SPLIT_RE.search(body):
        return None, "it has no barrier or warp operation to split at"
    for rx, why in _FORBIDDEN_RE:
        m = rx.search(body)
        if m:
            return None, f"it uses {why} (line {_line(code, a + m.start())})"
    try:
        return _rewrite(text, code, fn, a, b), ""
    except _Giveup as e:
        return None, str(e) or "its shape is not one the loop path takes"


def _line(code: str, at: int) -> int:
    return code.count("\n", 0, at) + 1


def _params(fn: Function) -> set[str]:
    names = set()
    for p in fn.params:
        m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", p.text)
        if m:
            names.add(m.group(1))
    return names


def _args(code: str, paren: int, close: int) -> list[tuple[int, int]]:
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


def _rewrite(text: str, code: str, fn: Function, a: int, b: int) -> str:
    params = _params(fn)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) on text offsets
    arrays: dict[str, str] = {}  # per-thread local -> its type
    scalars: set[str] = set()  # uniform loop variables
    #: locals computed from the thread's and block's indices and unchanged kernel parameters
    #: only, never assigned again: name -> (type, initializer), in declaration order
    remat: dict[str, tuple[str, str]] = {}
    #: cooperative_groups objects: name -> the loop path's type (made again in each region)
    cg: dict[str, str] = {}
    tiles: dict[str, int] = {}  # the tiles among them: name -> threads
    lanes: set[str] = set()  # the lane arrays of the warp operations (reused statement by statement)
    sites = 0  # warp operations so far: each names its own type and mask
    #: locals every thread computes alike (from parameters and the block's geometry), never
    #: assigned again: declared once for the block, before the loops (name -> declaration)
    hoisted: dict[str, str] = {}
    cg_decls = 0
    body_code = code[a:b]

    def _assigned(name: str) -> bool:
        writes = re.findall(rf"(?<![\w.])(?<!->){name}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", body_code)
        return (
            len(writes) > 1
            or re.search(rf"(?:\+\+|--|(?<!&)&)\s*{name}\b|\b{name}\s*(?:\+\+|--)", body_code) is not None
        )

    fixed = {
        p
        for p in params
        if not re.search(
            rf"(?<![\w.])(?<!->){p}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{p}\b|\b{p}\s*(?:\+\+|--)",
            body_code,
        )
    }

    def _rematerializable(name: str, init: str) -> bool:
        if _assigned(name) or re.search(r"\(\s*[^)]*\)\s*\(|\[", init):
            return False
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", init))
        return words <= _INDEX_WORDS | fixed | set(remat) | set(cg) | _CG_METHODS | set(hoisted)

    def _uniform(expr: str) -> bool:
        if re.search(r"[\[{]|->|\+\+|--|(?<![=!<>])=(?!=)", expr) or re.search(r"\b[A-Za-z_]\w*\s*\(", expr):
            return False
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", expr))
        return words <= _UNIFORM_WORDS | fixed | scalars | set(hoisted)

    def _again() -> str:
        objs = " ".join(f"{t} {n}{{kb_threadIdx, kb_blockDim, kb_blockIdx}};" for n, t in cg.items())
        return objs + " " + " ".join(f"{t} const {n} ={init};" for n, (t, init) in remat.items())

    region: list[tuple[int, int]] = []

    def flush(tail: str = "", after: str = "", at: int = -1) -> None:
        if region:
            edits.append((region[0][0], region[0][0], f" KB_REGION_BEGIN {_again()} "))
            edits.append((region[-1][1], region[-1][1], f" {tail} KB_REGION_END {after} "))
            region.clear()
        elif tail or after:
            head = f" KB_REGION_BEGIN {_again()} {tail} KB_REGION_END " if tail else ""
            edits.append((at, at, f"{head} {after} "))

    def blank(s: int, e: int, rep: str = "") -> None:
        edits.append((s, e, _pad(rep, text[s:e])))

    def level(lo: int, hi: int, inside_loop: bool) -> None:
        nonlocal cg_decls
        stmts = _statements(code, lo, hi)
        if stmts is None:
            raise _Giveup("a statement could not be delimited")
        for s, e in stmts:
            st = code[s:e].strip()
            where = f"line {_line(code, s)}"
            if _BARRIER_STMT.fullmatch(st):
                flush()
                blank(s, e)
                continue
            m = re.fullmatch(rf"(?:([A-Za-z_]\w*)\s*\.\s*sync\s*\(\s*\)|{_CG}sync\s*\(\s*([A-Za-z_]\w*)\s*\))\s*;", st)
            if m and (m.group(1) or m.group(2)) in cg:
                flush()  # a block's sync is a barrier; a tile's (<= 32 threads) a warp barrier of its own lanes
                blank(s, e)
                continue
            m = re.fullmatch(r"__syncwarp\s*\((.*)\)\s*;", st, re.S)
            if m:
                k0 = code.index("(", s)
                mask = text[k0 + 1 : _match(code, k0)].strip() or "0xffffffffu"
                if not _uniform(code[k0 + 1 : _match(code, k0)]):
                    raise _Giveup(f"a __syncwarp mask that may differ between threads ({where})")
                flush()
                blank(s, e, f"::kb_cpu::fis::check(kb_fb, ::kb_cpu::W_SYNC, (unsigned)({mask}), 32, {_line(code, s)});")
                continue
            if st.startswith("__shared__"):
                if inside_loop or "=" in st:
                    raise _Giveup(f"a __shared__ declaration inside a loop or with an initializer ({where})")
                flush()  # the block's array: declared once, outside the thread loops
                # A local array of the kernel call, which runs the whole block: not the prelude's
                # thread_local, whose every access in a shared object is a __tls_get_addr call.
                k = code.index("__shared__", s)
                edits.append((k, k + len("__shared__"), "alignas(16)"))
                continue
            if _NAMESPACE_ALIAS.fullmatch(st) or _DYN_SHARED_PTR.fullmatch(st):
                if inside_loop:
                    raise _Giveup(f"a declaration of the block inside a loop ({where})")
                flush()  # stays in place, at the kernel's scope
                continue
            m = _EXTERN_SHARED.fullmatch(st)
            if m:
                if inside_loop:
                    raise _Giveup(f"extern __shared__ inside a loop ({where})")
                flush()
                t = " ".join(m.group("type").split())
                blank(s, e, f"{t}* const {m.group('name')} = reinterpret_cast<{t}*>(::kb_cpu::dyn_shared());")
                continue
            m = _CG_BLOCK_DECL.fullmatch(st) or _CG_TILE_DECL.fullmatch(st)
            if m:
                if inside_loop:
                    raise _Giveup(f"a cooperative_groups object declared inside a loop ({where})")
                name = m.group("name")
                if name in cg or name in arrays or name in remat:
                    raise _Giveup(f"{name} declared twice ({where})")
                if "n2" in m.groupdict():
                    n = int(m.group("n2"))
                    if (m.group("n1") and int(m.group("n1")) != n) or m.group("parent") not in cg:
                        raise _Giveup(f"a tile of another group than the block ({where})")
                    if n > 32 or n & (n - 1):
                        raise _Giveup(f"a tile of more than 32 threads ({where})")
                    cg[name], tiles[name] = f"::kb_cpu::fis::tile<{n}>", n
                else:
                    cg[name] = "::kb_cpu::fis::block"
                cg_decls += 1
                blank(s, e)
                continue
            if re.match(r"for\s*\(", st) and _SPLIT_RE.search(st):
                if inside_loop:
                    raise _Giveup(f"a barrier or warp operation in a nested loop ({where})")
                flush()
                _uniform_for(s, e)
                continue
            calls = [c for c in _WARP_CALL.finditer(code, s, e) if c.group("red") is None or _reduces(c)]
            if calls:
                if _KEYWORD_START.match(st) or st.startswith("{"):
                    raise _Giveup(f"a warp operation inside if, switch or a block ({where})")
                _warp_statement(s, e, calls)
                continue
            if _SPLIT_RE.search(st):
                raise _Giveup(f"a barrier or warp operation inside if, switch or a block ({where})")
            d = _DECL.match(code, _skip_ws(code, s, e), e)
            if d:
                _declare(s, e, d, [], inside_loop)
            elif _LOOKS_DECL.match(st) and not _KEYWORD_START.match(st):
                raise _Giveup(f"a local of a type the loop path does not store per thread ({where})")
            region.append((s, e))
        flush()

    def _reduces(c: re.Match[str]) -> bool:
        paren = c.end() - 1
        close = _match(code, paren)
        first = _args(code, paren, close)[:1] if close > 0 else []
        return bool(first) and code[first[0][0] : first[0][1]].strip() in tiles

    def _lane_arg(j: int, raw: str, txt: str, tail: list[str]) -> tuple[str, str]:
        """A shuffle's lane or offset, as (uniform value, per-lane array): as written where every
        thread computes it alike, else stored per lane before the split."""
        if _uniform(raw):
            return f"(int)({txt})", "nullptr"
        lanes.add(f"kb_a{j}")
        tail.append(f"::kb_cpu::fis::put(kb_a{j}, kb_t, (int)({txt}));")
        return "0", f"::kb_cpu::fis::at<int>(kb_a{j})"

    def _operand(k: int, j: int, txt: str, tail: list[str], after: list[str]) -> str:
        """The operand stored in lane array j before the split; its type named kb_T<k> after it."""
        tail.append(f"::kb_cpu::fis::put(kb_l{j}, kb_t, ({txt}));")
        after.append(f"using kb_T{k} = ::std::decay_t<decltype({txt})>;")
        return f"kb_T{k}"

    def _warp_statement(s: int, e: int, calls: list[re.Match[str]]) -> None:
        nonlocal sites
        where = f"line {_line(code, s)}"
        spans = []
        for c in calls:
            paren = c.end() - 1
            close = _match(code, paren)
            if close < 0 or close >= e:
                raise _Giveup(f"a warp operation that could not be delimited ({where})")
            spans.append((c, paren, close))
        for c, _, close in spans:
            if any(c.start() < o.start() < close for o, _, _ in spans if o is not c):
                raise _Giveup(f"a warp operation inside another's arguments ({where})")
        tail: list[str] = []
        after: list[str] = []
        subs: list[tuple[int, int, str]] = []
        for j, (c, paren, close) in enumerate(spans):
            k = sites
            sites += 1
            lane = f"kb_l{j}"
            lanes.add(lane)
            args = _args(code, paren, close)
            txt = [text[x:y].strip() for x, y in args]
            raw = [code[x:y] for x, y in args]
            line = _line(code, c.start())
            intr, obj, meth = c.group("intr"), c.group("obj"), c.group("meth")
            if intr is not None:
                if not raw or not _uniform(raw[0]):
                    raise _Giveup(f"a warp operation's mask that may differ between threads ({where})")
                mask = f"kb_m{k}"
                if intr in _OPS:
                    if len(args) not in (3, 4):
                        raise _Giveup(f"{intr} with {len(args)} arguments ({where})")
                    if len(args) == 4 and not _uniform(raw[3]):
                        raise _Giveup(f"a shuffle width that may differ between threads ({where})")
                    width = txt[3] if len(args) == 4 else "32"
                    t = _operand(k, j, txt[1], tail, after)
                    arg, per_lane = _lane_arg(j, raw[2], txt[2], tail)
                    after.append(
                        f"const unsigned {mask} = ::kb_cpu::fis::check(kb_fb, ::kb_cpu::{_OPS[intr]}, "
                        f"(unsigned)({txt[0]}), (int)({width}), {line});"
                    )
                    after.append(
                        f"::kb_cpu::fis::shuffle<{t}>(kb_fb, {lane}, ::kb_cpu::{_OPS[intr]}, {mask}, 0u, {arg}, "
                        f"{per_lane}, (int)({width}), {line});"
                    )
                    rep = f"::kb_cpu::fis::result<{t}>({lane}, kb_t)"
                else:
                    if len(args) != 2:
                        raise _Giveup(f"{intr} with {len(args)} arguments ({where})")
                    tail.append(f"::kb_cpu::fis::put({lane}, kb_t, (int)((int)({txt[1]}) != 0));")
                    after.append(
                        f"const unsigned {mask} = ::kb_cpu::fis::check(kb_fb, ::kb_cpu::W_BALLOT, "
                        f"(unsigned)({txt[0]}), 32, {line});"
                    )
                    after.append(f"::kb_cpu::fis::vote<32>(kb_fb, {lane}, {mask}, ::kb_cpu::fis::{_VOTES[intr]});")
                    rep = f"(({_VOTE_TYPES[_VOTES[intr]]})::kb_cpu::fis::get<int>({lane}, kb_t))"
            elif obj is not None:
                if obj not in tiles:
                    raise _Giveup(f"{obj}.{meth} on what is not a tile of at most 32 threads ({where})")
                n = tiles[obj]
                if meth in _OPS:
                    if len(args) != 2:
                        raise _Giveup(f"{obj}.{meth} with {len(args)} arguments ({where})")
                    t = _operand(k, j, txt[0], tail, after)
                    arg, per_lane = _lane_arg(j, raw[1], txt[1], tail)
                    after.append(
                        f"::kb_cpu::fis::shuffle<{t}>(kb_fb, {lane}, ::kb_cpu::{_OPS[meth]}, ~0u, {n}u, {arg}, "
                        f"{per_lane}, {n}, {line});"
                    )
                    rep = f"::kb_cpu::fis::result<{t}>({lane}, kb_t)"
                else:
                    if len(args) != 1:
                        raise _Giveup(f"{obj}.{meth} with {len(args)} arguments ({where})")
                    kind = _TILE_VOTES[meth]
                    tail.append(f"::kb_cpu::fis::put({lane}, kb_t, (int)((int)({txt[0]}) != 0));")
                    after.append(f"::kb_cpu::fis::vote<{n}>(kb_fb, {lane}, 0u, ::kb_cpu::fis::{kind});")
                    rep = f"(({_VOTE_TYPES.get(kind, 'bool')})::kb_cpu::fis::get<int>({lane}, kb_t))"
            else:
                if len(args) != 3:
                    raise _Giveup(f"cooperative_groups::reduce with {len(args)} arguments ({where})")
                n = tiles[txt[0]]
                if set(re.findall(r"\b[A-Za-z_]\w*\b", raw[2])) & (set(remat) | set(cg) | set(arrays)):
                    raise _Giveup(f"a reduce operator that reads the thread's locals ({where})")
                t = _operand(k, j, txt[1], tail, after)
                after.append(f"::kb_cpu::fis::reduce<{n}, {t}>(kb_fb, {lane}, {txt[2]}, {line});")
                rep = f"::kb_cpu::fis::result<{t}>({lane}, kb_t)"
            subs.append((c.start(), close + 1, _pad(rep, text[c.start() : close + 1])))
        flush(" ".join(tail), " ".join(after), s)
        d = _DECL.match(code, _skip_ws(code, s, e), e)
        if d:
            _declare(s, e, d, subs, True)
        else:
            if _LOOKS_DECL.match(code[s:e].strip()) and not _KEYWORD_START.match(code[s:e].strip()):
                raise _Giveup(f"a local of a type the loop path does not store per thread ({where})")
            edits.extend(subs)
        region.append((s, e))

    def _uniform_for(s: int, e: int) -> None:
        paren = code.index("(", s)
        close = _match(code, paren)
        header = code[paren + 1 : close]
        parts = header.split(";")
        where = f"line {_line(code, s)}"
        if len(parts) != 3:
            raise _Giveup(f"a for loop around a barrier or warp operation that is not counted ({where})")
        init = re.match(rf"\s*(?:{_TYPE})\s+([A-Za-z_]\w*)\s*=", parts[0])
        if not init:
            raise _Giveup(f"a for loop around a barrier or warp operation without its own variable ({where})")
        var = init.group(1)
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", header))
        if not words <= _UNIFORM_WORDS | params | {var} | scalars | set(hoisted):
            raise _Giveup(f"a for loop around a barrier or warp operation whose trip count may differ ({where})")
        scalars.add(var)
        j = _skip_ws(code, close + 1, e)
        if code[j] == "{":
            level(j + 1, _match(code, j), True)
        else:  # one statement: braced, as it becomes several loops
            edits.append((j, j, "{"))
            level(j, e, True)
            edits.append((e, e, "}"))

    def _declare(s: int, e: int, d: re.Match[str], subs: list[tuple[int, int, str]], inside_loop: bool) -> None:
        s0 = _skip_ws(code, s, e)
        t = re.sub(r"__restrict__", "", d.group("type"))
        # The array is assigned, so the variable itself is not const; what a pointer points at may be.
        t = re.sub(r"\*\s*const\b", "*", t) if "*" in t else re.sub(r"\bconst\b", "", t)
        t = " ".join(t.split()).replace(" *", "*")
        rest0 = d.start("rest")
        semi = code.rindex(";", s0, e)

        def piece(x: int, y: int) -> str:
            out, pos = [], x
            for ss, se, rep in sorted(subs):
                if x <= ss and se <= y:
                    out.append(text[pos:ss] + rep)
                    pos = se
            return "".join(out) + text[pos:y]

        out = []
        pos = rest0
        for part in _split_top(code[rest0:semi]):
            m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:=(.*))?", part, re.S)
            if not m:
                raise _Giveup(f"a declaration the loop path does not split (line {_line(code, s)})")
            name = m.group(1)
            if name in arrays or name in params or name in scalars or name in cg:
                raise _Giveup(f"{name} declared twice (line {_line(code, s)})")
            arrays[name] = t
            if m.group(2) is not None:
                init = pos + m.start(2)
                if not subs and not inside_loop and not _assigned(name) and _uniform(code[init : pos + len(part)]):
                    del arrays[name]  # the same in every thread: once for the block
                    hoisted[name] = f"{t} const {name} ={text[init : pos + len(part)]};"
                elif not subs and _rematerializable(name, code[init : pos + len(part)]):
                    # Recomputed at the top of each region instead of stored per thread: the
                    # compiler then sees `t` as the loop index (contiguous, vectorisable).
                    del arrays[name]
                    remat[name] = (t, text[init : pos + len(part)])
                else:
                    out.append(f"{name} ={piece(init, pos + len(part))}")
            pos += len(part) + 1
        stmt = ("(void)0" if not out else ", ".join(out)) + ";"
        edits.append((s, e, _pad(stmt, text[s:e])))

    # Each CUDA thread has its own copy of the parameters; here the regions share the call's.
    if any(
        _assigned(p) or re.search(rf"(?<![\w.])(?<!->){p}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", body_code) for p in params
    ):
        raise _Giveup("it assigns a kernel parameter (each thread has its own copy on a GPU)")
    level(a, b, False)
    if not arrays and not remat and not edits:
        raise _Giveup("nothing to split")
    # Every cooperative_groups object is one the loop path makes, used only through its methods.
    if len(re.findall(r"\b(?:this_thread_block|tiled_partition)\b", body_code)) != cg_decls:
        raise _Giveup("a cooperative_groups group made elsewhere than in a top-level declaration")
    allowed = _CG_METHODS | {"sync", "shfl", "shfl_up", "shfl_down", "shfl_xor", "ballot", "any", "all"}
    for name in cg:
        for m in re.finditer(rf"(?<![\w.])(?<!->)(?<!::){name}\b", body_code):
            after = re.match(r"\s*\.\s*(\w+)\s*\(", body_code[m.end() :])
            before = body_code[: m.start()]
            if after and after.group(1) in allowed:
                continue
            if re.search(r"\b(?:reduce|sync|tiled_partition\s*<\s*\d+\s*>)\s*\(\s*$", before):
                continue
            if re.match(r"\s*=", body_code[m.end() :]):
                continue
            raise _Giveup(f"the cooperative_groups object {name} used otherwise than through its methods")
    # Every other declaration of a per-thread name (a shadowing one) would be renamed too.
    body = code[a:b]
    for name in [*arrays, *remat]:
        if len(re.findall(rf"(?:{_TYPE}|[>\w])\s+\**{name}\s*[=;,\[)]", body)) > 1:
            raise _Giveup(f"{name} declared twice")
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
    decls += " " + " ".join(f"::kb_cpu::fis::Lanes {n};" for n in sorted(lanes)) + " " + " ".join(hoisted.values())
    if lanes:  # the loops' own locals, outside them for decltype only (a warp operand's type)
        decls += " " + " ".join(f"[[maybe_unused]] {t} {n}{{}};" for n, t in cg.items())
        decls += " " + " ".join(f"[[maybe_unused]] {t} {n}{{}};" for n, (t, _) in remat.items())
    begin = " KB_FISSION_BEGIN_WARPS " if lanes else " KB_FISSION_BEGIN "  # kb_t an int or an unsigned
    return new[:a] + begin + decls + "".join(pieces) + new[nb:]


def _pad(new: str, old: str) -> str:
    """``new`` followed by the newlines of ``old``, so that lines keep their numbers."""
    return new + "\n" * old.count("\n")
