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
reads each lane's result there. A warp's reduction written as a top-level loop of shuffles
(``for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);``, or ``__shfl_down_sync``,
another compound operator, ``v = fmaxf(v, ...)``; a literal full mask) is one split point: its
steps run between the loops, one pass each. Locals declared at those top levels with a plain arithmetic or
pointer type, or of a struct of such members the source defines, become per-thread arrays; cooperative_groups objects (``this_thread_block()``,
``tiled_partition<N>``) are made again in each loop from the loop's thread index. ``__shared__``
arrays declared at the top level are the block's: local arrays of the call that runs the block;
``extern __shared__`` at the top level points at the launch's dynamic shared memory.

A parameter the body assigns is a per-thread local filled from the argument (each CUDA thread
has its own copy); local arrays of constant sizes are each thread's in a buffer of the block's;
template parameters and constant macros count as every thread's alike; the body's ``#if`` lines
are decided by the build's defines first (fission_pp.py).

An ``if`` around split points whose condition every thread computes alike, or that passes whole
warps (``if (tid < 32)``, ``if (cta.thread_rank() < 64)``): fission_if.py. A block-strided loop
(``for (i = threadIdx.x; i < n; i += blockDim.x)``) and a loop over a warp's lanes (``for (i =
lane; i < n; i += warpSize)``) are regions of their own, vector loops over the threads or over
each warp's lanes: fission_strided.py, fission_lanes.py.

Early ``return;`` (a flag per thread: the regions after it skip the thread), ``break`` and
``continue`` inside a region's statement, ``while``/``do`` loops: fission_exit.py.

Not handled (:func:`split` says which, for the profile note): ``goto``, a ``return`` with a value
(a lambda's), a ``break``/``continue`` of a loop around split points, warp operations inside
``if`` of other conditions than fission_if.py's, ``while`` or other statements, a warp operation's mask that differs between threads,
``__match_*``, ``__reduce_*_sync``, ``__activemask``, scans, tiles of more than 32 threads,
``volatile``, and ``while``/``do`` loops (or loops that may ``break``)
beside atomics, fences or clocks (a thread may spin on what another thread of its block stores,
without a barrier: only fibers run both), split points in other ``if``s, ``while``/nested loops, and
split points reached through other functions or macros.

The rewrite keeps every line where it was, so diagnostics still point at the user's lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from kernelbay.csource import Function, strip_comments_and_strings

from .fission_exit import exits, jumps, lambda_beside_return, spins
from .fission_if import if_statement, sized
from .fission_index import apply, indices
from .fission_lanes import lanes
from .fission_params import constants, copy_params, param_copies
from .fission_pp import active_body, defines
from .fission_ranges import pure_read
from .fission_scan import CG_METHODS, closing, line_of, named_types, skip_ws, statements
from .fission_shadow import rename_shadows
from .fission_state import KEYWORD_START, LOOKS_DECL, TYPE, UNIFORM_WORDS, Giveup, Rewrite
from .fission_strided import for_loop, strided
from .fission_unroll import unrolls
from .fission_warps import reduction_loop, warp_calls, warp_statement

_BARRIER_STMT = re.compile(r"__syncthreads\s*\(\s*\)\s*;")
#: What the loop path never runs: each with the words the profile note gives.
_FORBIDDEN = [
    (r"\breturn\b(?!\s*;)", "a return with a value"),
    (r"\bgoto\b", "goto"),
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
    (r"\bextern\b(?!\s+__shared__)(?!\s+[A-Za-z_][\w:\s]*?\s__shared__\s)", "an extern declaration"),
]
_FORBIDDEN_RE = [(re.compile(p), why) for p, why in _FORBIDDEN]
#: A statement that must be a split point or stand where one may (anything else holding it gives up).
_SPLIT_RE = re.compile(
    r"\b(?:__syncthreads|__syncwarp|__shfl_(?:up_|down_|xor_)?sync|__ballot_sync|__any_sync|__all_sync)\b"
    r"|\.\s*(?:sync|shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all)\s*\(|\b(?:reduce|sync)\s*\("
)
_CG = r"(?:(?:cg|cooperative_groups)\s*::\s*)?"
_CG_BLOCK_DECL = re.compile(
    rf"(?:{_CG}thread_block|auto)\s+(?P<name>[A-Za-z_]\w*)\s*=\s*{_CG}this_thread_block\s*\(\s*\)\s*;"
)
_CG_TILE_DECL = re.compile(
    rf"(?:{_CG}thread_block_tile\s*<\s*(?P<n1>\d+)\s*(?:,[^<>;]*)?>|auto)\s+(?P<name>[A-Za-z_]\w*)\s*=\s*"
    rf"{_CG}tiled_partition\s*<\s*(?P<n2>\d+)\s*>\s*\(\s*(?P<parent>[A-Za-z_]\w*)\s*\)\s*;"
)
_NAMESPACE_ALIAS = re.compile(r"namespace\s+[A-Za-z_]\w*\s*=\s*[\w:\s]+;")
_EXTERN_SHARED = re.compile(  # (`extern float __shared__ smem[];` too, the type first)
    r"extern\s+(?:__shared__\s+(?:(?:alignas|__align__)\s*\(\s*\w+\s*\)\s+)?(?P<type>[A-Za-z_][\w:\s]*?[\w])"
    r"|(?P<type2>[A-Za-z_][\w:\s]*?[\w])\s+__shared__)\s+(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_DYN_SHARED_PTR = re.compile(
    r"(?P<type>[A-Za-z_][\w:\s]*?)\s*\*\s*const\s+(?P<name>[A-Za-z_]\w*)\s*=\s*reinterpret_cast\s*<[^<>;]*>\s*"
    r"\(\s*::kb_cpu::dyn_shared\s*\(\s*\)\s*\)\s*;"
)


def split(
    text: str,
    code: str,
    fn: Function,
    options: Sequence[str] = (),
    headers: Mapping[str, str] = {},
    values: frozenset[str] = frozenset(),
) -> tuple[str | None, str]:
    """``text`` with the kernel ``fn`` rewritten for the loop path with barriers and warp
    operations as region boundaries (``code``: ``text`` with comments and literals blanked, same
    offsets; ``options`` the build's, whose ``-D``s decide the body's ``#if`` lines; ``headers`` the
    source's), or None and why the kernel keeps the fiber runner (the shapes handled: the module
    docstring). ``values``: the template's type parameters the entry makes arithmetic types
    (their locals are stored per thread)."""
    if fn.body is None:
        return None, "its body was not found"
    a, b = fn.body[0] + 1, fn.body[1]
    macros = defines(options)
    pragmas: list[tuple[int, str]] = []  # the #pragma unroll lines (fission_unroll.py)
    if re.search(r"^[ \t]*#", code[a:b], re.M):
        try:
            text, code = active_body(text, code, a, b, macros, dict(headers), pragmas)
        except Giveup as e:
            return None, str(e)
    body = code[a:b]
    if not _SPLIT_RE.search(body):
        return None, "it has no barrier or warp operation to split at"
    for rx, why in _FORBIDDEN_RE:
        m = rx.search(body)
        if m:
            return None, f"it uses {why} (line {line_of(code, a + m.start())})"
    k = lambda_beside_return(body)
    if k >= 0:
        return None, f"it has a lambda beside a return (line {line_of(code, a + k)})"
    k = spins(body)
    if k >= 0:
        return None, (
            f"it has a while loop, or a loop it may break out of, beside atomics (line {line_of(code, a + k)}):"
            " a thread may wait on another without a barrier"
        )
    try:
        consts = constants(text, code, fn, macros, list(headers.values()))
        types = frozenset(named_types([code, *(strip_comments_and_strings(h) for h in headers.values())]))
        return _rewrite(text, code, fn, a, b, consts, values, types, pragmas), ""
    except Giveup as e:
        return None, str(e) or "its shape is not one the loop path takes"


def _rewrite(
    text: str,
    code: str,
    fn: Function,
    a: int,
    b: int,
    consts: set[str],
    values: frozenset[str],
    types: frozenset[str],
    pragmas: list[tuple[int, str]],
) -> str:
    rw = Rewrite(text, code, fn, a, b, consts, values, types)
    body_code = rw.body_code
    # Each CUDA thread has its own copy of the parameters: one the body assigns is a per-thread local.
    param_copies(rw, fn)
    _level(rw, a, b, False)
    if not rw.arrays and not rw.remat and not rw.edits:
        raise Giveup("nothing to split")
    _check_groups(rw)
    rw.finish()
    exits(rw)
    # A declaration of a per-thread array's name in a region's statement: renamed in its scope
    # (fission_shadow.py); one anywhere else keeps fibers. (A local made again in each region,
    # or once for the block, may be shadowed: it is not renamed.)
    rename_shadows(rw)
    unrolls(rw, pragmas)  # CUDA's #pragma unroll as g++'s, before loops that stay whole
    apply(rw)  # 64-bit indices in strided loops' vector path (fission_index.py)
    for name in rw.arrays:
        # (`T<U> name`, not a comparison `a > name)`)
        found = re.findall(rf"(?:(?:{TYPE}|\w)\s+\**{name}\s*[=;,\[)]|>\s+\**{name}\s*[=;,\[])", body_code)
        if len(found) > 1 + rw.redeclared.get(name, 0):
            raise Giveup(f"{name} declared twice")
    return _assemble(rw, a, b)


def _level(rw: Rewrite, lo: int, hi: int, inside_loop: bool) -> None:
    """Rewrite the statements of ``code[lo:hi]``, a top level (the body's or a uniform loop's)."""
    rw.scope.append(lo)
    _statements(rw, lo, hi, inside_loop)
    rw.scope.pop()


def _statements(rw: Rewrite, lo: int, hi: int, inside_loop: bool) -> None:
    text, code, cg = rw.text, rw.code, rw.cg
    stmts = statements(code, lo, hi)
    if stmts is None:
        raise Giveup("a statement could not be delimited")
    for s, e in stmts:
        rw.level_starts.add(s)
        st = code[s:e].strip()
        where = f"line {line_of(code, s)}"
        if _BARRIER_STMT.fullmatch(st):
            rw.flush()
            rw.syncs.append((len(rw.edits), 0, line_of(code, s)))
            rw.blank(s, e)
            continue
        m = re.fullmatch(rf"(?:([A-Za-z_]\w*)\s*\.\s*sync\s*\(\s*\)|{_CG}sync\s*\(\s*([A-Za-z_]\w*)\s*\))\s*;", st)
        if m and (m.group(1) or m.group(2)) in cg:
            rw.flush()  # a block's sync is a barrier; a tile's (<= 32 threads) a warp barrier of its own lanes
            rw.syncs.append((len(rw.edits), rw.tiles.get(m.group(1) or m.group(2), 0), line_of(code, s)))
            rw.blank(s, e)
            continue
        m = re.fullmatch(r"__syncwarp\s*\((.*)\)\s*;", st, re.S)
        if m:
            k0 = code.index("(", s)
            mask = text[k0 + 1 : closing(code, k0)].strip() or "0xffffffffu"
            if not rw.uniform(code[k0 + 1 : closing(code, k0)]):
                raise Giveup(f"a __syncwarp mask that may differ between threads ({where})")
            rw.flush()
            rw.blank(
                s, e, f"::kb_cpu::fis::check(kb_fb, ::kb_cpu::W_SYNC, (unsigned)({mask}), 32, {line_of(code, s)});"
            )
            continue
        if st.startswith("__shared__"):
            if inside_loop or "=" in st:
                raise Giveup(f"a __shared__ declaration inside a loop or with an initializer ({where})")
            rw.flush()  # the block's array: declared once, outside the thread loops
            # A local array of the kernel call, which runs the whole block: not the prelude's
            # thread_local, whose every access in a shared object is a __tls_get_addr call.
            k = code.index("__shared__", s)
            rw.edits.append((k, k + len("__shared__"), "alignas(16)"))
            continue
        if _NAMESPACE_ALIAS.fullmatch(st) or _DYN_SHARED_PTR.fullmatch(st):
            if inside_loop:
                raise Giveup(f"a declaration of the block inside a loop ({where})")
            rw.flush()  # stays in place, at the kernel's scope
            continue
        m = _EXTERN_SHARED.fullmatch(st)
        if m:
            if inside_loop:
                raise Giveup(f"extern __shared__ inside a loop ({where})")
            rw.flush()
            t = " ".join((m.group("type") or m.group("type2")).split())
            rw.blank(s, e, f"{t}* const {m.group('name')} = reinterpret_cast<{t}*>(::kb_cpu::dyn_shared());")
            continue
        m = _CG_BLOCK_DECL.fullmatch(st) or _CG_TILE_DECL.fullmatch(st)
        if m:
            _group(rw, s, e, m, inside_loop)
            continue
        if re.match(r"for\s*\(", st) and _SPLIT_RE.search(st):
            if not inside_loop and reduction_loop(rw, s, e):
                continue
            rw.flush()
            _uniform_for(rw, s, e)  # (inside another: nested, the outermost's start kept)
            continue
        if st.startswith("{") and _SPLIT_RE.search(st):
            rw.flush()  # a block of split points: its statements a top level of their own
            _level(rw, s + 1, e - 1, inside_loop)
            continue
        if re.match(r"if\s*\(", st) and _SPLIT_RE.search(code, closing(code, code.index("(", s)) + 1, e):
            rw.flush()
            if_statement(rw, s, e, _level)  # a block- or warp-uniform condition (fission_if.py)
            continue
        calls = warp_calls(rw, s, e)
        if calls:
            head = re.match(r"if\s*\(", st)  # in an if's condition every thread that reaches it votes
            cond = closing(code, s + head.end() - 1) if head else -1
            if (KEYWORD_START.match(st) or st.startswith("{")) and not all(s < c.start() < cond for c in calls):
                raise Giveup(f"a warp operation inside if, switch or a block ({where})")
            if inside_loop and jumps(rw, s, e) >= 0:
                raise Giveup(f"a break or continue of a loop around a barrier or warp operation ({where})")
            warp_statement(rw, s, e, calls)
            continue
        if _SPLIT_RE.search(st):
            raise Giveup(f"a barrier or warp operation inside if, switch or a block ({where})")
        if not rw.guards and strided(rw, s, e):
            f = for_loop(code, s, e)
            if f is not None:
                indices(rw, f, f.close + 1, e)
            continue
        if not rw.guards and lanes(rw, s, e):
            continue
        if inside_loop and jumps(rw, s, e) >= 0:
            k = jumps(rw, s, e)
            raise Giveup(f"a break or continue of a loop around a barrier or warp operation (line {line_of(code, k)})")
        d = rw.decl.match(code, skip_ws(code, s, e), e)
        if d:
            rw.declare(s, e, d, [], inside_loop)
        elif LOOKS_DECL.match(st) and not KEYWORD_START.match(st):
            raise Giveup(f"a local of a type the loop path does not store per thread ({where})")
        if not rw.guards:  # (inside a warp-uniform if, only some threads write it)
            rw.uniform_write(s, e)
        names = [] if s in rw.inert else pure_read(rw, s, e, [])
        if names:
            rw.pure[s] = names
        rw.region.append((s, e))
    rw.flush()


def _group(rw: Rewrite, s: int, e: int, m: re.Match[str], inside_loop: bool) -> None:
    """The declaration ``code[s:e]`` of a cooperative_groups block or tile (``m``)."""
    where = f"line {line_of(rw.code, s)}"
    if inside_loop:
        raise Giveup(f"a cooperative_groups object declared inside a loop ({where})")
    name = m.group("name")
    if name in rw.cg or name in rw.arrays or name in rw.remat:
        raise Giveup(f"{name} declared twice ({where})")
    if "n2" in m.groupdict():
        n = int(m.group("n2"))
        if (m.group("n1") and int(m.group("n1")) != n) or m.group("parent") not in rw.cg:
            raise Giveup(f"a tile of another group than the block ({where})")
        if n > 32 or n & (n - 1):
            raise Giveup(f"a tile of more than 32 threads ({where})")
        rw.cg[name], rw.tiles[name] = f"::kb_cpu::fis::tile<{n}>", n
    else:
        rw.cg[name] = "::kb_cpu::fis::block"
    rw.cg_decls += 1
    rw.blank(s, e)


def _uniform_for(rw: Rewrite, s: int, e: int) -> None:
    """A top-level ``for`` loop ``code[s:e]`` around split points, which every thread runs alike."""
    code = rw.code
    paren = code.index("(", s)
    close = closing(code, paren)
    header = sized(rw, paren + 1, close)  # (a tile's size(): its threads, every thread's alike)
    parts = header.split(";")
    where = f"line {line_of(code, s)}"
    if len(parts) != 3:
        raise Giveup(f"a for loop around a barrier or warp operation that is not counted ({where})")
    init = re.match(rf"\s*(?:{TYPE})\s+([A-Za-z_]\w*)\s*=", parts[0])
    outside = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=).*", parts[0], re.S)
    own = init or outside
    if own is None or (not init and not _loop_only(rw, own.group(1), paren, close)):
        raise Giveup(f"a for loop around a barrier or warp operation without its own variable ({where})")
    var = own.group(1)
    words = set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\.\s*[A-Za-z_]\w*", " ", header)))
    if not words <= UNIFORM_WORDS - {"x", "y", "z"} | rw.fixed | {var} | rw.scalars | set(rw.hoisted):
        raise Giveup(f"a for loop around a barrier or warp operation whose trip count may differ ({where})")
    if not init:  # declared before (`int k; ... for (k = 0; ...)`): the block's, as the loop's
        rw.block_vars[var] = rw.arrays.pop(var)
        rw.uniform_writes.pop(var, None)
    rw.scalars.add(var)
    j = skip_ws(code, close + 1, e)
    outer = rw.loop_start < 0
    if outer:
        rw.loop_start = j
    if code[j] == "{":
        _level(rw, j + 1, closing(code, j), True)
    else:  # one statement: braced, as it becomes several loops
        rw.edits.append((j, j, "{"))
        _level(rw, j, e, True)
        rw.edits.append((e, e, "}"))
    if outer:
        rw.loop_start = -1


def _loop_only(rw: Rewrite, var: str, lo: int, hi: int) -> bool:
    """Whether ``var`` is a per-thread local declared without a value whose every write is in
    ``code[lo:hi]`` (a for loop's header)."""
    if var not in rw.arrays or var in rw.dims or var not in rw.uniform_writes or rw.uniform_writes[var]:
        return False
    writes = (
        rf"(?<![\w.])(?<!->){var}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--|(?<!&)&)\s*{var}\b|\b{var}\s*(?:\+\+|--)"
    )
    a, b = rw.body_start, rw.body_end
    return all(lo <= a + m.start() < hi for m in re.finditer(writes, rw.code[a:b]))


def _check_groups(rw: Rewrite) -> None:
    """Every cooperative_groups object is one the loop path makes, used only through its methods."""
    body_code = rw.body_code
    if len(re.findall(r"\b(?:this_thread_block|tiled_partition)\b", body_code)) != rw.cg_decls:
        raise Giveup("a cooperative_groups group made elsewhere than in a top-level declaration")
    allowed = CG_METHODS | {"sync", "shfl", "shfl_up", "shfl_down", "shfl_xor", "ballot", "any", "all"}
    for name in rw.cg:
        for m in re.finditer(rf"(?<![\w.])(?<!->)(?<!::){name}\b", body_code):
            after = re.match(r"\s*\.\s*(\w+)\s*\(", body_code[m.end() :])
            before = body_code[: m.start()]
            if after and after.group(1) in allowed:
                continue
            if re.search(r"\b(?:reduce|sync|tiled_partition\s*<\s*\d+\s*>)\s*\(\s*$", before):
                continue
            if re.match(r"\s*=", body_code[m.end() :]):
                continue
            raise Giveup(f"the cooperative_groups object {name} used otherwise than through its methods")


def _assemble(rw: Rewrite, a: int, b: int) -> str:
    """The text with the edits applied, per-thread locals indexed by the thread and the block's
    declarations before the loops."""
    text = rw.text
    out, pos = [], 0
    for s, e, rep in sorted(rw.edits, key=lambda x: (x[0], x[1])):
        out.append(text[pos:s])
        out.append(rep)
        pos = e
    out.append(text[pos:])
    new = "".join(out)
    nb = b + len(new) - len(text)
    # Per-thread locals are indexed by the thread, in the body's code only (not in literals).
    seg, seg_code = new[a:nb], strip_comments_and_strings(new)[a:nb]
    spots = sorted(
        m.end() for name in rw.arrays for m in re.finditer(rf"(?<![\w.])(?<!->)(?<!::){name}\b(?!\s*\()", seg_code)
    )
    pieces, pos = [], 0
    for k in spots:
        pieces.append(seg[pos:k] + "[kb_t]")
        pos = k
    pieces.append(seg[pos:])
    decls = " ".join(f"{t} {n}[KB_FISSION_MAX_THREADS];" for n, t in rw.arrays.items() if n not in rw.dims)
    for slot, (n, dims) in enumerate(rw.dims.items()):  # each thread's copy of a local array
        decls += (
            f" using kb_arr_{n} = {rw.arrays[n]}{dims}; kb_arr_{n}* const {n} ="
            f" reinterpret_cast<kb_arr_{n}*>(::kb_cpu::fis::scratch({slot}, sizeof(kb_arr_{n}) * kb_fb.n));"
        )
    decls += " " + " ".join(f"{t} {n}{{}};" for n, t in rw.block_vars.items())
    decls += (
        " " + " ".join(f"::kb_cpu::fis::Lanes {n};" for n in sorted(rw.lanes)) + " " + " ".join(rw.hoisted.values())
    )
    head, fill = copy_params(rw, new[:a])
    decls += fill
    if rw.lanes:  # the loops' own locals, outside them for decltype only (a warp operand's type)
        decls += " " + " ".join(f"[[maybe_unused]] {t} {n}{{}};" for n, t in rw.cg.items())
        decls += " " + " ".join(f"[[maybe_unused]] {t} {n}{{}};" for n, (t, _) in rw.remat.items())
    begin = " KB_FISSION_BEGIN_WARPS " if rw.lanes else " KB_FISSION_BEGIN "  # kb_t an int or an unsigned
    if rw.live:
        begin += "KB_FISSION_LIVE "
    return head + begin + decls + "".join(pieces) + new[nb:]
