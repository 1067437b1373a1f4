"""Helper device functions with warp operations, or that read ``threadIdx`` (or ``blockIdx``,
``blockDim``, ``gridDim``), inlined where a kernel calls them, so that barrier loop fission sees
the warp operations in the kernel's body, and the loop path's per-thread ``threadIdx`` serves the
helper's reads (a call keeps its kernel off the loop path). llm.c's
``maxval = warpReduceMax(maxval);`` with

    __device__ float warpReduceMax(float val) {
        for (int offset = 16; offset > 0; offset /= 2)
            val = fmaxf(val, __shfl_down_sync(0xFFFFFFFF, val, offset));
        return val;
    }

becomes, on the call's line, ``float kb_h0_val = (maxval); for (int kb_h0_offset = 16; ...)
kb_h0_val = fmaxf(kb_h0_val, __shfl_down_sync(0xFFFFFFFF, kb_h0_val, kb_h0_offset)); maxval =
((float)(kb_h0_val));``. What is inlined: a free ``__device__`` function defined once in the
kernel's own text or its headers, not a template, whose parameters are arithmetic or pointer
values, whose locals are declared with such types, whose one ``return`` is its last statement.
The call: the only one of a helper in a statement ``[T] a = ...;`` or ``a op= ...;`` at the top
level of a kernel's body, or inside the braces of a ``for``, an ``if``/``else`` or a block there;
the whole right side (``maxval = f(x);``), or a part of it whose other parts may run after the
helper's body (:func:`_sequenced`: ``v = warpReduceSum(v) / C;``), the call's value then used in
its place. The meaning is the same (arguments evaluated once, in order, into the parameters),
for every runner; other calls stay calls (and keep such a kernel on fibers)."""

from __future__ import annotations

import re

from kernelbay.csource import Function, find_functions, find_kernels, strip_comments_and_strings

from .fission_scan import arguments, closing, skip_ws, statements
from .fission_state import TYPE
from .reach import BUILTIN_RE

_WARP = re.compile(
    r"\b(?:__syncthreads|__syncwarp|__shfl_(?:up_|down_|xor_)?sync|__ballot_sync|__any_sync|__all_sync)\s*\("
)
_DEVICE = re.compile(r"__device__[^;{}()]*?\b([A-Za-z_]\w*)\s*\(")
_PARAM = re.compile(rf"\s*(?:{TYPE})\s+([A-Za-z_]\w*)\s*")
_LOCAL = re.compile(rf"(?:^|[;{{}}(])\s*(?:{TYPE})\s+([A-Za-z_]\w*)\s*(?==|;|,|\[)")


class _Helper:
    """What an inlined call needs: the parameters' types and names, every name the body
    declares, the body before its return (one line), what it returns."""

    def __init__(self, types: list[str], params: list[str], names: list[str], body: str, ret: str) -> None:
        self.types, self.params, self.names, self.body, self.ret = types, params, names, body, ret


def _flat(text: str, code: str, a: int, b: int) -> str:
    """``text[a:b]`` on one line, comments out (``code`` blanks them)."""
    out = []
    k = a
    while k < b:
        if code[k] == " " and text[k] != " " and text.startswith(("//", "/*"), k):
            j = k
            while j < b and code[j] == " " and text[j] not in "\n":
                j += 1
            if text.startswith("/*", k):
                j = text.find("*/", k) + 2
            k = j
            out.append(" ")
            continue
        out.append(" " if text[k] == "\n" else text[k])
        k += 1
    return "".join(out)


def _helper(text: str, code: str, fn: Function) -> _Helper | None:
    if fn.body is None or fn.template or fn.kernel:
        return None
    a, b = fn.body[0] + 1, fn.body[1]
    body = code[a:b]
    if not (_WARP.search(body) or BUILTIN_RE.search(body)) or re.search(
        r"\b(?:__shared__|static|auto|goto|asm|volatile)\b|::|<[^<=]", body
    ):
        return None
    head = re.sub(
        r"\b(?:__device__|__host__|__forceinline__|__noinline__|inline|static|extern)\b",
        " ",
        code[fn.start : fn.parens[0]],
    )
    rtype = re.fullmatch(rf"\s*({TYPE})\s+{re.escape(fn.name)}\s*", head)
    if not rtype:
        return None
    params, types = [], []
    for p in fn.params:
        m = _PARAM.fullmatch(p.text)
        if not m:
            return None
        params.append(m.group(1))
        types.append(" ".join(p.text[: p.text.rindex(m.group(1))].split()))
    stmts = statements(code, a, b)
    if not stmts:
        return None
    last = code[stmts[-1][0] : stmts[-1][1]]
    ret = re.fullmatch(r"return\b(.*);\s*", last, re.S)
    if not ret or re.search(r"\breturn\b", code[a : stmts[-1][0]]):
        return None
    names = params + _LOCAL.findall(body)
    if len(set(names)) != len(names) or any(
        "," in re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "", body[m.end() : body.find(";", m.end())])
        for m in _LOCAL.finditer(body)
    ):
        return None  # two locals in one declaration: only the first would be renamed
    s0, s1 = stmts[-1]
    r0 = s0 + len("return")
    ret_text = f"({' '.join(rtype.group(1).split())})({_flat(text, code, r0, s1 - 1).strip()})"
    return _Helper(types, params, names, _flat(text, code, a, s0), ret_text)


def _captured(h: _Helper, code: str, kernel: Function) -> bool:
    """Whether a name the helper's body reads from outside it (a global, a macro) is one the
    kernel declares: inlined, it would read the kernel's."""
    if kernel.body is None:
        return True
    words = set(re.findall(r"(?<![.\w])(?<!->)[A-Za-z_]\w*\b", h.body + " " + h.ret)) - set(h.names)  # (not members)
    mine = {p.text.split()[-1].strip("*&") for p in kernel.params if p.text.split()}
    body = code[kernel.body[0] : kernel.body[1]]
    return any(w in mine or re.search(rf"[\w*&>]\s+\**{w}\s*[=;,\[)]", body) for w in words)


def _renamed(s: str, names: list[str], prefix: str) -> str:
    for n in names:
        s = re.sub(rf"(?<![\w.])(?<!->)(?<!::)\b{n}\b", prefix + n, s)
    return s


#: A statement that assigns or declares one local: ``[T] name =``, or a compound ``name op=``.
_LHS = re.compile(rf"\s*(?:(?:{TYPE})\s+)?[A-Za-z_]\w*\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)\s*")


def _sequenced(rest: str) -> bool:
    """Whether the right side of an assignment around a helper's call (``rest``: its text but
    the call) lets the helper's body run before it: every part is evaluated unconditionally
    (no ``&&``, ``||``, ``?:``), nothing in it is ordered before the call (no comma operator, no
    ``<<``/``>>``, which C++17 orders left to right) and it writes nothing (no assignment,
    ``++``, ``--``), and no operand is unevaluated (``sizeof``, ``decltype``)."""
    if re.search(
        r"[{}]|&&|\|\||\?|\+\+|--|<<|>>|(?<![=!<>])=(?!=)|\b(?:sizeof|decltype|alignof|noexcept|typeid)\b", rest
    ):
        return False
    calls: list[bool] = []  # per open bracket: a call's parentheses (where a comma separates arguments)
    for k, ch in enumerate(rest):
        if ch in "([{":
            calls.append(ch == "(" and re.search(r"[\w>]\s*$", rest[:k]) is not None)
        elif ch in ")]}":
            if calls:
                calls.pop()
        elif ch == "," and not (calls and calls[-1]):
            return False
    return True


def _blocks(code: str, s: int, e: int) -> list[tuple[int, int]] | None:
    """The insides of the braced bodies of the statement ``code[s:e]`` when it is a ``for``, an
    ``if`` (with its ``else``s) or a block, else None: calls there are inlined too."""
    if code[s] == "{":
        return [(s + 1, closing(code, s))]
    m = re.match(r"(for|if)\s*\(", code[s:e])
    if not m:
        return None
    out = []
    k = closing(code, s + m.end() - 1)  # the header's closing parenthesis
    while k > 0:
        j = skip_ws(code, k + 1, e)
        if j >= e or code[j] != "{":
            break
        z = closing(code, j)
        out.append((j + 1, z))
        els = re.match(r"\s*else\b\s*", code[z + 1 : e]) if m.group(1) == "if" else None
        if not els:
            break
        at = z + 1 + els.end()
        nested = re.match(r"if\s*\(", code[at:e])
        k = closing(code, at + nested.end() - 1) if nested else at - 1
    return out


def inline_helpers(text: str, headers: list[str] | None = None) -> str:
    """``text`` with calls of helpers (module docstring; defined in ``text`` or one of the
    ``headers`` it may include) inlined; ``text`` itself where none is."""
    code = strip_comments_and_strings(text)
    if not any(_WARP.search(t) or BUILTIN_RE.search(t) for t in [code, *(headers or [])]):
        return text
    texts = [text, *(headers or [])]
    helpers: dict[str, _Helper] = {}
    for t in texts:
        c = strip_comments_and_strings(t)
        for name in set(_DEVICE.findall(c)):
            found = [(u, f) for u in texts for f in find_functions(u, name)]
            if name not in helpers and len(found) == 1 and found[0][0] is t:
                h = _helper(t, c, found[0][1])
                if h is not None:
                    helpers[name] = h
    if not helpers:
        return text
    call = re.compile(rf"(?<![\w.>:])(?P<fn>{'|'.join(map(re.escape, helpers))})\s*\(")
    edits: list[tuple[int, int, str]] = []
    count = 0

    def level(lo: int, hi: int, kernel: Function) -> None:
        nonlocal count
        for s, e in statements(code, lo, hi) or []:
            block = _blocks(code, s, e)
            if block is not None:
                for x, y in block:
                    level(x, y, kernel)
                continue
            calls = list(call.finditer(code, s, e))
            m = _LHS.match(code, s, e)
            if len(calls) != 1 or not m:
                continue
            c = calls[0]
            paren = c.end() - 1
            close = closing(code, paren)
            semi = code.rindex(";", s, e)
            if close < 0 or close > semi or code[semi + 1 : e].strip():
                continue
            if not (c.start() == m.end() and not code[close + 1 : semi].strip()) and not _sequenced(
                code[m.end() : c.start()] + " " + code[close + 1 : semi]
            ):
                continue
            h = helpers[c.group("fn")]
            args = [_flat(text, code, x, y).strip() for x, y in arguments(code, paren, close)]
            if len(args) != len(h.params) or _captured(h, code, kernel):
                continue
            prefix = f"kb_h{count}_"
            count += 1
            head = " ".join(f"{t} {prefix}{n} = ({a});" for t, n, a in zip(h.types, h.params, args, strict=True))
            rest = f"{_flat(text, code, s, c.start())}({_renamed(h.ret, h.names, prefix)}){_flat(text, code, close + 1, e)}"
            rep = f"{head} {_renamed(h.body, h.names, prefix)} {rest}"
            edits.append((s, e, rep + "\n" * text[s:e].count("\n")))

    for kernel in find_kernels(text):
        if kernel.body is not None:
            level(kernel.body[0] + 1, kernel.body[1], kernel)
    if not edits:
        return text
    out, pos = [], 0
    for s, e, rep in sorted(edits):
        out.append(text[pos:s] + rep)
        pos = e
    return "".join(out) + text[pos:]
