"""The state of one kernel's barrier loop fission: the edits so far, the open region, and the
locals by how the loop path keeps them (per-thread arrays, block-wide constants, values made
again in each region, cooperative_groups objects), with the tests that sort them (is an
expression the same in every thread; is a local computed from the thread's indices only)."""

from __future__ import annotations

import re

from kernelbay.csource import Function

from .fission_ranges import Region, ranges
from .fission_scan import line_of, pad, skip_ws, split_top

TYPE = (
    r"(?:(?:const|unsigned|signed|long|short|volatile)\s+)*"
    r"(?:int|float|double|long|char|bool|short|unsigned|size_t|ptrdiff_t|u?int(?:8|16|32|64)_t|uint|ushort|ulong|uchar"
    r"|(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4])\b"
    r"(?:\s+const)?(?:\s*\*+(?:\s*const)?(?:\s*__restrict__)?)?"
)
#: A declaration of locals the loop path stores per thread (a plain arithmetic or pointer type).
#: CUDA's vector types (``float4``, ``uint2`` ...): plain data written member by member, as a struct's
VECTOR = re.compile(r"(?:const\s+)?(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4]")
DECL = re.compile(rf"(?P<type>{TYPE})(?:\s+|(?<=\*))(?P<rest>[A-Za-z_][^;]*);\s*$", re.S)
#: A struct of plain data the source defines (``struct __align__(8) SumMax { float maxval; float sum; };``):
#: its locals are stored per thread as those of arithmetic types are, never the block's.
_STRUCT = re.compile(
    r"\bstruct\s+(?:(?:__align__|alignas)\s*\(\s*\w+\s*\)\s*)?(?P<name>[A-Za-z_]\w*)\s*\{(?P<body>[^{}]*)\}\s*;"
)
_MEMBER = re.compile(
    rf"\s*(?:{TYPE})\s+[A-Za-z_]\w*(?:\s*\[\s*\d+\s*\])?(?:\s*,\s*[A-Za-z_]\w*(?:\s*\[\s*\d+\s*\])?)*\s*"
)


def plain_structs(code: str) -> set[str]:
    """The names of the structs of plain data (members of arithmetic or pointer types only) in ``code``."""
    return {
        m.group("name")
        for m in _STRUCT.finditer(code)
        if all(_MEMBER.fullmatch(p) for p in m.group("body").split(";")[:-1])
        and not m.group("body").split(";")[-1].strip()
    }


def template_params(head: str) -> list[tuple[str, bool]]:
    """The parameters of the template a function's ``head`` (its text before the parameter list)
    begins with, in order: (name, whether a type parameter: ``class T``, ``typename T``)."""
    m = re.match(r"\s*template\s*<([^<>]*)>", head)
    out = []
    for p in m.group(1).split(",") if m and m.group(1).strip() else []:
        n = re.search(r"([A-Za-z_]\w*)\s*(?:=[^=]*)?$", p.strip())
        out.append((n.group(1) if n else "", re.match(r"\s*(?:class|typename)\b", p) is not None))
    return out


#: What reads as a declaration of some other type.
LOOKS_DECL = re.compile(r"^(?:const\s+)?[A-Za-z_][\w:<>]*\s*[*&]*\s+[*&]*\s*[A-Za-z_]\w*\s*(?:[=;,\[({]|$)")
KEYWORD_START = re.compile(r"^(?:if|for|while|do|switch|else|case|default|return|__shared__|static|typedef)\b")
UNIFORM_WORDS = {
    "blockDim", "gridDim", "blockIdx", "x", "y", "z", "int", "unsigned", "long", "size_t", "const", "warpSize", "uint",
}  # fmt: skip
INDEX_WORDS = {
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
    "uint",
}


class Giveup(Exception):
    """The kernel has a shape the loop path does not take; the message says which."""


def params(fn: Function) -> set[str]:
    """The names of ``fn``'s parameters."""
    names = set()
    for p in fn.params:
        m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", p.text)
        if m:
            names.add(m.group(1))
    return names


class Rewrite:
    """One kernel body ``text[a:b]`` being rewritten (``code``: ``text`` with comments, literals
    and directives blanked, same offsets)."""

    def __init__(
        self,
        text: str,
        code: str,
        fn: Function,
        a: int,
        b: int,
        consts: set[str],
        values: frozenset[str] = frozenset(),
        types: frozenset[str] = frozenset(),
    ) -> None:
        self.text, self.code = text, code
        self.params = params(fn)
        self.fn_params = [p.text for p in fn.params]
        self.structs = plain_structs(code)
        #: a declaration of locals stored per thread: DECL's, of a struct of plain data, a pointer
        #: to a type parameter of the kernel's template (``T *sdata = SharedMemory<T>();``), or of
        #: one the entry makes an arithmetic type (``values``: ``T mySum`` of ``reduce3<int>``), or a
        #: pointer to a type the source or its headers name (``types``: llm.c's ``x128* s_in``)
        others = [rf"(?:const\s+)?(?:{'|'.join(sorted(self.structs))})(?!\w)"] if self.structs else []
        tparams = [n for n, is_type in template_params(code[fn.start : fn.parens[0]]) if is_type]
        ptr = r"\s*\*+(?:\s*const)?(?:\s*__restrict__)?"
        if tparams:
            others.append(rf"(?:const\s+)?(?:{'|'.join(tparams)})(?!\w){ptr}")
        if types:
            others.append(rf"(?:const\s+)?(?:{'|'.join(sorted(types))})(?!\w){ptr}")
        if values & set(tparams):
            others.append(rf"(?:const\s+)?(?:{'|'.join(sorted(values & set(tparams)))})(?!\w)(?:{ptr})?")
        self.decl = (
            re.compile(rf"(?P<type>{TYPE}|{'|'.join(others)})(?:\s+|(?<=\*))(?P<rest>[A-Za-z_][^;]*);\s*$", re.S)
            if others
            else DECL
        )
        self.edits: list[tuple[int, int, str]] = []  # (start, end, replacement) on text offsets
        self.arrays: dict[str, str] = {}  # per-thread local -> its type
        self.scalars: set[str] = set()  # uniform loop variables
        #: locals computed from the thread's and block's indices and unchanged kernel parameters
        #: only, never assigned again: name -> (type, initializer), in declaration order
        self.remat: dict[str, tuple[str, str]] = {}
        #: cooperative_groups objects: name -> the loop path's type (made again in each region)
        self.cg: dict[str, str] = {}
        self.tiles: dict[str, int] = {}  # the tiles among them: name -> threads
        self.lanes: set[str] = set()  # the lane arrays of the warp operations (reused statement by statement)
        self.sites = 0  # warp operations so far: each names its own type and mask
        #: locals every thread computes alike (from parameters and the block's geometry), never
        #: assigned again: declared once for the block, before the loops (name -> declaration)
        self.hoisted: dict[str, str] = {}
        self.cg_decls = 0
        self.body_code = code[a:b]
        self.fixed = {
            p
            for p in self.params
            if not re.search(
                rf"(?<![\w.])(?<!->){p}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{p}\b|\b{p}\s*(?:\+\+|--)",
                self.body_code,
            )
        }
        self.consts = consts  # names every thread reads alike that are no parameter (fission_params.py)
        self.fixed |= self.consts
        #: the top levels being rewritten (each an id, the innermost last), where each per-thread
        #: local was last declared, and how many times one was declared again beside its first
        self.scope: list[int] = []
        self.scopes: dict[str, list[int]] = {}
        self.redeclared: dict[str, int] = {}
        self.dims: dict[str, str] = {}  # the per-thread locals that are arrays: name -> their dimensions
        self.region: list[tuple[int, int]] = []  # the statements of the region not yet closed
        #: statements (by start) the loop path turned into nothing a thread runs (a local made
        #: again in each region or once for the block), and those that only read into locals
        #: (start -> the names they assign): what a region of only some threads may skip
        self.inert: set[int] = set()
        self.pure: dict[int, list[str]] = {}
        self.body_start, self.body_end = a, b
        self.decl_spans: list[tuple[int, int]] = []  # the declarations of per-thread locals (declare)
        self.loop_start = -1  # where the outermost uniform loop's body begins, inside one
        self.regions: list[Region] = []  # the regions closed so far, in order
        #: per-thread locals every write of which so far is a statement at a top level with a
        #: value every thread computes alike (name -> those statements' starts): the block's
        #: (block_vars) where no other write is found (finish)
        self.uniform_writes: dict[str, list[int]] = {}
        self.block_vars: dict[str, str] = {}
        #: the kernel returns early somewhere (fission_exit.py); live: its threads that return
        #: before its last region leave the regions after (kb_done)
        self.returns = re.search(r"\breturn\b", self.body_code) is not None
        self.live = False
        #: the barriers and tile syncs: (their edit, the tile's threads or 0 for the block's, line)
        self.syncs: list[tuple[int, int, int]] = []
        self.strided_starts: list[int] = []  # where the block-strided loops' regions begin
        self.parens = fn.parens
        self.copies: list[str] = []  # the parameters each thread has a copy of (fission_params.py)
        #: the warp-uniform ifs the statements being rewritten are in (fission_if.py): (the
        #: condition, the end of the threads that pass it or None where each thread's test
        #: decided it, the block of their warps), the regions' guard
        self.guards: list[tuple[str, str | None, str]] = []
        self.level_starts: set[int] = set()  # the statements of the top levels (fission_unroll.py)
        self.late_edits: list[tuple[int, int, str]] = []  # fission_index.py's, applied last

    def assigned(self, name: str) -> bool:
        writes = re.findall(rf"(?<![\w.])(?<!->){name}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", self.body_code)
        return (
            len(writes) > 1
            or re.search(rf"(?:\+\+|--|(?<!&)&)\s*{name}\b(?!\s*\[)|\b{name}\s*(?:\+\+|--)", self.body_code) is not None
        )

    def rematerializable(self, name: str, init: str) -> bool:
        if self.assigned(name) or re.search(r"\(\s*[^)]*\)\s*\(|\[", init):
            return False
        # (members and methods apart: a local named `x` or `size` is no `threadIdx.x`, no `tile.size()`)
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\.\s*[A-Za-z_]\w*", " ", init)))
        return words <= INDEX_WORDS - {"x", "y", "z"} | self.fixed | set(self.remat) | set(self.cg) | set(self.hoisted)

    def uniform(self, expr: str) -> bool:
        if re.search(r"[\[{]|->|\+\+|--|(?<![=!<>])=(?!=)", expr) or re.search(r"\b[A-Za-z_]\w*\s*\(", expr):
            return False
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"\.\s*[A-Za-z_]\w*", " ", expr)))
        return words <= UNIFORM_WORDS - {"x", "y", "z"} | self.fixed | self.scalars | set(self.hoisted)

    def again(self) -> str:
        """What a region makes again at its top: the cooperative_groups objects and the locals
        computed from the thread's indices."""
        objs = " ".join(f"{t} {n}{{kb_threadIdx, kb_blockDim, kb_blockIdx}};" for n, t in self.cg.items())
        return objs + " " + " ".join(f"{t} const {n} ={init};" for n, (t, init) in self.remat.items())

    def flush(self, tail: str = "", after: str = "", at: int = -1) -> None:
        """Close the open region: a loop over the threads, ``tail`` at its end, ``after`` after
        it (where no region is open, one of ``tail`` alone at ``at``). Which threads it loops
        over is decided at the end (:meth:`finish`)."""
        region = self.region
        if region or tail:
            at = region[0][0] if region else at
            end = region[-1][1] if region else at
            guard = self.guards[-1] if self.guards else None
            self.regions.append(
                Region(list(region), tail, len(self.edits), self.again(), self.loop_start, at, end, guard)
            )
            self.edits.append((at, at, ""))  # its beginning, filled in by finish()
            close = "}" if guard else ""  # (the guard's test, opened by finish())
            self.edits.append((end, end, f" {tail} {close} KB_REGION_END {after} "))
            region.clear()
        elif after:
            self.edits.append((at, at, f" {after} "))

    def uniform_write(self, s: int, e: int) -> bool:
        """Note ``code[s:e]``, a statement at a top level, if it is ``a = <what every thread
        computes alike>;`` of a local that may be the block's."""
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*);\s*", self.code[s:e], re.S)
        if not m or m.group(1) not in self.uniform_writes or not self.uniform(m.group(2)):
            return False
        self.uniform_writes[m.group(1)].append(s)
        return True

    def _block_vars(self) -> None:
        """The per-thread locals that every thread holds alike at every point: written only by
        statements at a top level with values every thread computes alike, never read before
        such a write in its region (another thread may have written it there). One variable for
        the block, whose loads are then contiguous (``x[i]``, not each thread's own pointer)."""
        body = self.body_code
        for name, writes in self.uniform_writes.items():
            if name not in self.arrays:
                continue
            if len(re.findall(rf"(?<![\w.])(?<!->){name}\s*=(?!=)", body)) != len(writes) or re.search(
                rf"(?<![\w.])(?<!->){name}\s*(?:[-+*/%&|^]|<<|>>)=|(?:\+\+|--|(?<!&)&)\s*{name}\b(?!\s*\[)|\b{name}\s*(?:\+\+|--)",
                body,
            ):
                continue
            mention = re.compile(rf"(?<![\w.])(?<!->)(?<!::){name}\b")
            if any(
                mention.search(self.code, a, b)
                for r in self.regions
                for k, (w, _) in enumerate(r.stmts)
                if w in writes
                for a, b in r.stmts[:k]
            ):
                continue
            self.block_vars[name] = self.arrays.pop(name)

    def finish(self) -> None:
        """Each region's beginning: over the threads of its range (fission_ranges.py) or all;
        the per-thread locals that are the block's."""
        self._block_vars()
        for r, got in zip(self.regions, ranges(self), strict=True):
            test = ""
            if r.guard is not None:  # a warp-uniform if's (fission_if.py): its threads, its warps
                test = f"if ({r.guard[0]}) {{ "
                if r.guard[1] is None:  # decided per thread (kb_off): every thread, the test deciding
                    got = None
                elif got is None or r.tail:
                    got = ("0", r.guard[1], "1")
            begin = "KB_REGION_BEGIN" if got is None else "KB_REGION_RANGE_BEGIN({}, {}, {})".format(*got)
            at, _, _ = self.edits[r.begin]
            self.edits[r.begin] = (at, at, f" {begin} {r.again} {test}")
            if r.tail and (r.guard is not None or (got is not None and got[2] == "1")):
                # the warp operation after it: only the warps of the range (of the guard: its
                # checks too, as the other warps do not reach it)
                k = r.begin + 1
                at, end, rep = self.edits[k]
                if r.guard is not None:
                    block = r.guard[2]
                else:
                    assert got is not None  # (the test above)
                    block = f"kb_fb.only({got[0]}, {got[1]})"
                rep = rep.replace("(kb_fb, kb_l", f"({block}, kb_l")
                if r.guard is not None:
                    rep = rep.replace("check(kb_fb,", f"check({block},")
                self.edits[k] = (at, end, rep)

    def blank(self, s: int, e: int, rep: str = "") -> None:
        self.edits.append((s, e, pad(rep, self.text[s:e])))

    def _local_array(self, name: str, dims: str, init: str | None, line: int) -> list[str]:
        """A local array ``name`` of constant ``dims``: each thread's copy in a buffer of the
        block's (include/kb_cpu_fission.h: scratch); what its initializer (none, or zeros) does."""
        words = set(re.findall(r"\b[A-Za-z_]\w*\b", dims))
        if not words <= self.consts or re.search(r"\[\s*\]", dims):
            raise Giveup(f"a local array whose size is not a constant the loop path reads (line {line})")
        if len(self.dims) == 8:
            raise Giveup(f"more than 8 local arrays (line {line})")
        self.dims[name] = " ".join(dims.split())
        if init is None:
            return []
        if not re.fullmatch(r"\s*\{\s*(?:(?:0+\.?0*|\.0+)[fF]?)?\s*\}\s*", init):
            raise Giveup(f"a local array with an initializer other than zeros (line {line})")
        return [f"__builtin_memset(&{name}, 0, sizeof({name}))"]

    def declare(self, s: int, e: int, d: re.Match[str], subs: list[tuple[int, int, str]], inside_loop: bool) -> None:
        """The declaration ``d`` (of :data:`DECL`) of ``code[s:e]``, its locals sorted and
        ``subs`` (edits inside it) applied."""
        text, code = self.text, self.code
        s0 = skip_ws(code, s, e)
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
        for part in split_top(code[rest0:semi]):
            m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\[\]]*\]\s*)+)?(?:=(.*))?", part, re.S)
            if not m:
                raise Giveup(f"a declaration the loop path does not split (line {line_of(code, s)})")
            name = m.group(1)
            was = self.scopes.get(name)
            if (  # again in a scope beside the first's (sibling loops): one array serves both
                name in self.arrays
                and was is not None
                and self.scope[: len(was)] != was
                and self.arrays[name] == t
                and name not in self.dims
                and not m.group(2)
            ):
                self.redeclared[name] = self.redeclared.get(name, 0) + 1
            elif name in {*self.arrays, *self.params, *self.scalars, *self.cg, *self.remat, *self.hoisted}:
                raise Giveup(f"{name} declared twice (line {line_of(code, s)})")
            self.scopes[name] = list(self.scope)
            self.arrays[name] = t
            if m.group(2):
                out.extend(self._local_array(name, m.group(2), m.group(3), line_of(code, s)))
                pos += len(part) + 1
                continue
            if t in self.structs or VECTOR.fullmatch(t):  # written member by member, which the tests below do not see
                if m.group(3) is not None:
                    out.append(f"{name} ={piece(pos + m.start(3), pos + len(part))}")
            elif m.group(3) is not None:
                init = pos + m.start(3)
                end = pos + len(part)
                # (not one that may divide by zero where a return before it is taken: all run it first)
                if (
                    not subs
                    and not inside_loop
                    and not self.assigned(name)
                    and self.uniform(code[init:end])
                    and not (self.returns and re.search(r"[/%]", code[init:end]))
                ):
                    del self.arrays[name]  # the same in every thread: once for the block
                    self.hoisted[name] = f"{t} const {name} ={text[init:end]};"
                elif not subs and self.rematerializable(name, code[init:end]):
                    # Recomputed at the top of each region instead of stored per thread: the
                    # compiler then sees `t` as the loop index (contiguous, vectorisable).
                    del self.arrays[name]
                    self.remat[name] = (t, text[init:end])
                else:
                    out.append(f"{name} ={piece(init, end)}")
                    if not subs and not inside_loop and self.uniform(code[init:end]):
                        self.uniform_writes[name] = [s]
            elif not inside_loop:
                self.uniform_writes[name] = []
            pos += len(part) + 1
        stmt = ("(void)0" if not out else ", ".join(out)) + ";"
        if not out and not subs:
            self.inert.add(s)
        self.decl_spans.append((s, e))
        self.edits.append((s, e, pad(stmt, text[s:e])))
