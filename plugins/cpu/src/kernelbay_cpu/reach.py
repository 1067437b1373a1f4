"""What each kernel of a cuda source reaches: its body, the free functions it calls and the
macros it names, transitively, across the source and its headers. The runner is chosen per
kernel from that (see build.py), never from text the kernel cannot run: a header with one
block reduction no longer sends every elementwise kernel of a project to the fiber runner, and a
``namespace cg = cooperative_groups;`` line alone sends nothing there.

Pure text work, with kernelbay.csource's readers. Where the text hides what a kernel may run
(block operations inside a class's member functions, which a call cannot be traced to), every
kernel of the source is judged by the whole text, as before; but a class whose only block
operation is ``extern __shared__ T name[];`` (cuda-samples' ``SharedMemory<T>``) no longer sends
kernels with barriers of their own to the fibers.
"""

from __future__ import annotations

import dataclasses
import re

from kernelbay.csource import Function, find_functions, find_kernels, strip_comments_and_strings

#: What needs the threads of a block to run together (barriers, shared memory, warp operations,
#: cooperative groups); a kernel that reaches one runs its threads as fibers.
BLOCK_RE = re.compile(
    r"\b(?:__syncthreads\w*|__shared__|__syncwarp|__shfl\w*|__ballot\w*|__any_sync|__all_sync|__uni_sync"
    r"|__activemask|__match_\w+|__reduce_\w+_sync|cooperative_groups|this_thread_block|thread_block"
    r"|thread_block_tile|tiled_partition)\b"
    r"|\.\s*(?:sync|shfl\w*|ballot|any|all|match_\w+|thread_rank)\s*\("
    # a namespace's collective on a group passed in (``cg::sync(cta)``, ``cg::reduce(tile, ...)``
    # in a helper that declares no group of its own)
    r"|::\s*(?:sync|reduce|inclusive_scan|exclusive_scan)\s*(?:<[^;{}()]*>\s*)?\("
)
#: threadIdx and its kin: a function other than a kernel that reads them keeps its kernel off
#: the loop path (the loop declares them as locals of the kernel body only).
BUILTIN_RE = re.compile(r"\b(?:threadIdx|blockIdx|blockDim|gridDim)\b")
_CALL_RE = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>\s*)?\(")
_WORD_RE = re.compile(r"\b[A-Za-z_]\w*\b")
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)((?:[^\n]*\\\n)*[^\n]*)", re.MULTILINE)
_DIRECTIVE_RE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)
_CLASS_HEAD_RE = re.compile(r"\b(?:struct|class|union)\b[^;{}()]*$")
_SHARED_DECL_RE = re.compile(r"\b__shared__\b[^;{}]*?\b([A-Za-z_]\w*)\s*(?:\[[^;{}]*\])?\s*(?:=[^;{}]*)?;")
#: A statement that only declares the launch's dynamic shared memory (``extern __shared__ T n[];``).
_EXTERN_SHARED_RE = re.compile(
    r"\s*extern\s+(?:__shared__\s+(?:(?:alignas|__align__)\s*\(\s*\w+\s*\)\s+)?[A-Za-z_][\w:\s]*?\w"
    r"|[A-Za-z_][\w:\s]*?\w\s+__shared__)\s+[A-Za-z_]\w*\s*\[\s*\]\s*;"
)
_KEYWORDS = frozenset(
    [
        "if",
        "for",
        "while",
        "switch",
        "return",
        "sizeof",
        "alignof",
        "decltype",
        "static_cast",
        "reinterpret_cast",
        "const_cast",
        "dynamic_cast",
        "catch",
        "throw",
        "new",
        "delete",
        "typeid",
        "noexcept",
        "static_assert",
        "do",
        "else",
        "case",
    ]
)


@dataclasses.dataclass(frozen=True)
class Reach:
    """What one kernel reaches."""

    block: bool  #: a barrier, shared memory, a warp operation or cooperative groups
    #: a function other than a kernel reads threadIdx/blockIdx/blockDim/gridDim
    builtins_outside: bool
    why: str  #: the first block operation found and where, for the log ("" when none)
    #: a block operation outside the kernel's own body (a callee, a macro, file scope, a class)
    block_outside: bool = False


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


class Program:
    """The source and its headers read once, answering :meth:`reach` per kernel."""

    def __init__(self, files: list[tuple[str, str]]) -> None:
        self.files = files
        self.clean = {f: strip_comments_and_strings(t) for f, t in files}
        self.code = {
            f: _DIRECTIVE_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), c) for f, c in self.clean.items()
        }
        self.macros: dict[str, list[str]] = {}
        for _, c in self.clean.items():
            for m in _DEFINE_RE.finditer(c):
                self.macros.setdefault(m.group(1), []).append(m.group(2))
        self.shared_vars: set[str] = set()
        #: per file, names that may be a function defined at namespace scope (a superset)
        self.defined: dict[str, set[str]] = {}
        self.opaque = ""  # a block operation outside any free function's body, when one is found
        #: a class member's `extern __shared__ T name[];`, when one is found (and no other block
        #: operation in a class)
        self.dyn_class = ""
        for f, c in self.code.items():
            self._scan_file_scope(f, c)
        self._funcs: dict[str, list[tuple[str, Function]]] = {}
        self._kernels: list[tuple[str, Function]] | None = None

    def _scan_file_scope(self, fname: str, code: str) -> None:
        """Note ``__shared__`` variables at file scope, and block operations inside a class."""
        stack: list[str] = []  # per open brace: "ns" (namespace, extern "C"), "class" or "other"
        last = 0
        for m in re.finditer(r"[{};]", code):
            i, ch = m.start(), m.group(0)
            seg = code[last:i]
            in_class, in_other = "class" in stack, "other" in stack
            if ch == "{":
                at_scope = not in_class and not in_other  # file or namespace scope
                if at_scope and re.search(r"\b(?:namespace\b[\w\s:]*|extern\b[^;{}]*)$", seg):
                    stack.append("ns")
                elif _CLASS_HEAD_RE.search(seg) and ")" not in seg and not in_other:
                    stack.append("class")
                else:
                    if at_scope:  # a body at namespace scope: names in its head may be a function's
                        self.defined.setdefault(fname, set()).update(_CALL_RE.findall(seg))
                    stack.append("other")
            elif ch == "}" and stack:
                stack.pop()
            elif ch == ";" and not in_class and not in_other:
                d = _SHARED_DECL_RE.search(code, last, i + 1)
                if d:
                    self.shared_vars.add(d.group(1))
            last = i + 1
            if "class" in stack and not self.opaque:
                end = _next_bound(code, last)
                b = BLOCK_RE.search(code, last, end)
                # `extern __shared__ T name[];` in a member (cuda-samples' SharedMemory<T>) only
                # names the launch's dynamic shared memory: no barrier (see reach()).
                if b and _EXTERN_SHARED_RE.fullmatch(code, last, end + 1):
                    self.dyn_class = (
                        self.dyn_class or f"extern __shared__ in a class at {fname}:{_line(code, b.start())}"
                    )
                elif b:
                    self.opaque = f"{b.group(0).strip()} in a class at {fname}:{_line(code, b.start())}"

    def _functions(self, name: str) -> list[tuple[str, Function]]:
        got = self._funcs.get(name)
        if got is None:
            # find_functions reads the whole text per name: ask only where a body's head names it.
            got = [
                (f, fn)
                for f, t in self.files
                if name in self.defined.get(f, ())
                for fn in find_functions(t, name)
                if fn.body is not None
            ]
            self._funcs[name] = got
        return got

    def kernel(self, name: str) -> tuple[str, Function] | None:
        """The definition of the kernel an entry name (``ns::k<float>``) launches, when one is found."""
        bare = name.split("<", 1)[0].strip()
        if self._kernels is None:
            self._kernels = [(f, k) for f, t in self.files for k in find_kernels(t) if k.body is not None]
        hits = self._kernels
        exact = [(f, k) for f, k in hits if k.qualname == bare.lstrip(":").replace(" ", "")]
        found = exact or [(f, k) for f, k in hits if k.name == bare.rsplit("::", 1)[-1].strip()]
        return found[0] if len(found) == 1 or (found and all(k.name == found[0][1].name for _, k in found)) else None

    def reach(self, fname: str, fn: Function) -> Reach:
        """What the kernel ``fn`` (defined in ``fname``) reaches."""
        assert fn.body is not None
        todo: list[tuple[str, str, int, bool]] = [
            (fname, self.code[fname][fn.body[0] : fn.body[1] + 1], fn.body[0], True)
        ]
        seen_fn: set[tuple[str, int]] = {(fname, fn.body[0])}
        seen_names: set[tuple[str, bool]] = set()
        block, builtins, why, outside = False, False, "", False
        first = True
        while todo:
            f, body, at, is_kernel = todo.pop()
            b = BLOCK_RE.search(body)
            if b and not first:
                outside = True
            first = False
            if b and not block:
                block, why = True, f"{b.group(0).strip()} at {f}:{_line(self.code[f], at + b.start())}"
            if not is_kernel and BUILTIN_RE.search(body):
                builtins = True
            for w in set(_WORD_RE.findall(body)):
                if (w, is_kernel) in seen_names:
                    continue
                seen_names.add((w, is_kernel))
                if w in self.shared_vars:
                    outside = True
                    if not block:
                        block, why = True, f"__shared__ {w} (file scope), used at {f}"
                for mb in self.macros.get(w, ()):
                    # A macro expands where it is named: its text is the kernel's own.
                    todo.append((f, mb, at, is_kernel))
            for c in {m.group(1) for m in _CALL_RE.finditer(body)} - _KEYWORDS:
                for g, callee in self._functions(c):
                    key = (g, callee.start)
                    if callee.body is None or key in seen_fn:
                        continue
                    seen_fn.add(key)
                    a, z = callee.body
                    todo.append((g, self.code[g][a : z + 1], a, callee.kernel))
        if self.opaque:
            outside = True
            if not block:
                block, why = True, f"{self.opaque} (a call into a class cannot be followed)"
        elif self.dyn_class and not block:
            # A kernel with no block operation of its own may still use the class's dynamic
            # shared memory: it keeps the fibers. One with a barrier in its own body runs split
            # at it, the declaration served as the kernel's own (rewrites.rewrite_extern_shared).
            outside, block, why = True, True, f"{self.dyn_class} (a call into a class cannot be followed)"
        return Reach(block, builtins, why, outside)


def _next_bound(code: str, i: int) -> int:
    m = re.compile(r"[{};]").search(code, i)
    return m.start() if m else len(code)
