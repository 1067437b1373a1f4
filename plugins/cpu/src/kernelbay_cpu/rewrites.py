"""The text rewrites that let g++ compile a CUDA source as written: nvcc's ``inline`` and
``__noinline__`` spellings, ``extern __shared__`` arrays as the launch's dynamic shared memory, and
the file-scope ``__constant__``/``__device__`` variables the host reaches. Positions and lines are
kept, so diagnostics still point at the user's lines. Pure text work: no compiler runs here."""

from __future__ import annotations

import re

from kernelbay.csource import strip_comments_and_strings

_NOINLINE_RE = re.compile(r"(?<!\(\()\b__noinline__\b")
# `extern __shared__ T name[];`, with an alignment, or with __shared__ after the type
# (`extern float __shared__ smem[];`, cuda-samples' threadFenceReduction).
_EXTERN_SHARED_RE = re.compile(
    r"\bextern\s+(?:__shared__\s+((?:alignas\s*\(\s*\w+\s*\)|__align__\s*\(\s*\w+\s*\))\s+)?"
    r"|(?:alignas\s*\(\s*\w+\s*\)|__align__\s*\(\s*\w+\s*\))\s+__shared__\s+"
    r"|(?=[A-Za-z_][\w:<>,\s]*?\s__shared__\s+[A-Za-z_]\w*\s*\[\s*\]\s*;))"
    r"(?P<type>[A-Za-z_][\w:<>,\s]*?[\w>])(?:\s+__shared__)?\s+(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;"
)


_TOKEN_RE = re.compile(r'[A-Za-z_]\w*|"C"')
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(.*)$", re.M)
_INLINE_WORDS = {"inline", "__inline__", "__inline"}
#: Words that may stand in one declaration's specifiers next to __device__.
_SPECIFIERS = {
    "static", "constexpr", "extern", '"C"', "__host__", "__device__", "__global__", "__forceinline__",
    "__noinline__", "virtual", "explicit", "friend", "const", "volatile", "unsigned", "signed",
    *_INLINE_WORDS,
}  # fmt: skip


def _macro_sets(texts: list[str]) -> tuple[set[str], set[str]]:
    """The names standing for ``__device__`` or ``__global__`` (``#define HD __host__ __device__``),
    and for ``inline``
    (``#define INLINE __inline__``) in the user's files, followed through macros of macros."""
    defs: dict[str, list[str]] = {}
    for t in texts:
        for m in _DEFINE_RE.finditer(strip_comments_and_strings(t)):
            defs[m.group(1)] = _TOKEN_RE.findall(m.group(2))
    device, inline = {"__device__", "__global__"}, set(_INLINE_WORDS)
    changed = True
    while changed:
        changed = False
        for name, body in defs.items():
            if name not in device and any(w in device for w in body):
                device.add(name)
                changed = True
            if name not in inline and body and all(w in inline for w in body):
                inline.add(name)
                changed = True
    return device, inline


def rewrite_inline(text: str, others: list[str]) -> str:
    """The user's ``inline`` dropped where ``__device__`` or ``__global__`` (which the prelude
    defines as ``inline``) stands in the same declaration: ``__device__ inline``, ``inline
    __device__``, ``HD inline``.

    ``__device__`` is ``inline`` so that the device functions of a header a kernel does not call
    cost no code generation (300 unused ones: 1.7 s to compile instead of 4.7 s). Positions and
    lines are kept. ``others`` are the other files, whose ``#define`` lines count too.
    """
    clean = strip_comments_and_strings(text)
    device, inline = _macro_sets([text, *others])
    toks = list(_TOKEN_RE.finditer(clean))
    words = [t.group(0) for t in toks]
    spec = _SPECIFIERS | device | inline
    drop: list[tuple[int, int]] = []
    for i, w in enumerate(words):
        if w not in inline:
            continue
        hit = False
        for step in (-1, 1):
            j, near = i + step, i
            # a run of specifiers on one line, only blanks between them, that holds a __device__
            while 0 <= j < len(words) and words[j] in spec:
                lo, hi = (toks[near], toks[j]) if step == 1 else (toks[j], toks[near])
                gap = clean[lo.end() : hi.start()]
                if gap.strip() or "\n" in gap:
                    break
                if words[j] in device:
                    hit = True
                    break
                near, j = j, j + step
            if hit:
                break
        if hit:
            drop.append(toks[i].span())
    out, pos = [], 0
    for a, b in drop:
        out.append(text[pos:a] + " " * (b - a))
        pos = b
    out.append(text[pos:])
    return "".join(out)


def rewrite_noinline(text: str) -> str:
    """``__noinline__`` spelled ``__attribute__((noinline))``: it cannot be a macro of the prelude,
    because libstdc++ writes ``__attribute__((__noinline__))`` (as in ``<memory>``)."""
    return _NOINLINE_RE.sub("__attribute__((noinline))", text)


def blank_text(s: str) -> str:
    """``s`` with every character but newlines a space (positions and lines kept)."""
    return re.sub(r"[^\n]", " ", s)


def rewrite_extern_shared(text: str) -> str:
    """``extern __shared__ T name[];`` made a pointer to the launch's dynamic shared memory.

    Inside a function it becomes a local ``T* name``; at file scope, where it stands alone on its
    line, a ``#define``. Line numbers are kept, so diagnostics still point at the user's lines.
    """
    clean = strip_comments_and_strings(text)
    out: list[str] = []
    pos = 0
    for m in _EXTERN_SHARED_RE.finditer(clean):
        t, name = " ".join(m.group("type").split()), m.group("name")
        ptr = f"reinterpret_cast<{t}*>(::kb_cpu::dyn_shared())"
        depth = clean.count("{", 0, m.start()) - clean.count("}", 0, m.start())
        line_start = clean.rfind("\n", 0, m.start()) + 1
        line_end = clean.find("\n", m.end())
        line_end = len(clean) if line_end < 0 else line_end
        alone = not clean[line_start : m.start()].strip() and not clean[m.end() : line_end].strip()
        if depth == 0 and alone:
            repl = f"#define {name} ({ptr})"
        else:
            repl = f"{t}* const {name} = {ptr};"
        out.append(text[pos : m.start()] + repl)
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


# A `__constant__`/`__device__`/`__managed__` variable at namespace scope: `__constant__ float k[17];`,
# `static __device__ int n = 0;`, `__constant__ float a, b;` (not a function: its name is followed by
# `[...]`, `=`, `,` or `;`).
_GLOBAL_VAR_RE = re.compile(
    r"(?:^|(?<=[;}]))\s*(?:(?:static|extern|const|volatile)\s+)*(?:__constant__|__device__|__managed__)"
    r"(?:\s+(?:__constant__|__device__|__managed__|static|const|volatile))*\s+"
    r"[A-Za-z_][\w:<>,\s\*&]*?\b(?P<name>[A-Za-z_]\w*)\s*(?:\[[^\];{}()]*\]\s*)*(?:[=,][^;]*)?;",
    re.M,
)


def module_globals(text: str) -> list[str]:
    """The names of the `__constant__`/`__device__` variables defined at file scope of ``text``
    (outside any brace: a namespace's need their qualified name, which the host cannot give;
    outside preprocessor conditionals, which may compile them out)."""
    clean = strip_comments_and_strings(text)
    # Lines inside #if/#ifdef/#ifndef ... #endif may be compiled out: no accessor is made for a
    # variable there (one for a variable that is not compiled would break the build).
    cond, guarded = 0, []
    for text_line in clean.split("\n"):
        d = text_line.strip()
        if d.startswith("#") and d[1:].lstrip().startswith(("if", "ifdef", "ifndef")):
            cond += 1
        elif d.startswith("#") and d[1:].lstrip().startswith("endif"):
            cond = max(0, cond - 1)
        guarded.append(cond > 0)
    names: list[str] = []
    for m in _GLOBAL_VAR_RE.finditer(clean):
        depth = clean.count("{", 0, m.start()) - clean.count("}", 0, m.start())
        at = clean.count("\n", 0, m.end() - 1)
        if depth or guarded[at] or "extern" in m.group(0).split():
            continue
        names.extend(n for n in _declarators(m.group(0), m.group("name")) if n not in names)
    return names


def _declarators(decl: str, name: str) -> list[str]:
    """The names a declaration defines: `__constant__ float c_ax, c_bx;` defines both (the
    pattern above names one of them, ``name``)."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(decl):
        depth += ch in "<[({"
        depth -= ch in ">])}"
        if ch == "," and depth == 0:
            pieces.append(decl[start:i])
            start = i + 1
    if not pieces:
        return [name]
    pieces.append(decl[start:].rstrip().rstrip(";"))
    first = re.search(r"\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=.*)?$", pieces[0], re.S)
    rest = [re.match(r"[\s\*&]*([A-Za-z_]\w*)", p) for p in pieces[1:]]
    return [m.group(1) for m in (first, *rest) if m]
