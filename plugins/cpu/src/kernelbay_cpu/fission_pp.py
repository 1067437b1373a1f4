"""Preprocessor lines inside a kernel body, for barrier loop fission: the conditionals
(``#if``/``#ifdef``/``#ifndef``/``#elif``/``#else``/``#endif``) are decided as the compile
decides them -- by the build's ``-D``/``-U`` options and the ``#define``/``#undef`` lines of the
source before the kernel (and of its headers it ``#include``s by name) -- and the body keeps the
lines of the branches taken; ``#pragma`` lines go (g++ reads CUDA's ``#pragma unroll`` as an
unknown pragma; one before a loop that becomes several would stand before the wrong statement).
Every line is blanked in place (spaces, newlines kept), so diagnostics keep the user's lines.

A condition on a macro whose value is not known here (a system header's, one defined under a
condition not decided) or that is not an integer expression, and any other directive inside the
body (``#define``, ``#include`` ...), keeps the kernel on fibers (:class:`Giveup`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kernelbay.csource import strip_comments_and_strings

from .fission_state import Giveup

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w*)(.*)$")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_UNKNOWN = object()  # a macro defined under a condition not decided: its value is not known
_FUNCTION = object()  # a function-like macro: never expanded here


def defines(options: Sequence[str]) -> dict[str, object]:
    """The macros ``-DNAME[=VALUE]`` options define (``-UNAME`` removes one), in order."""
    out: dict[str, object] = {}
    opts = list(options)
    for i, o in enumerate(opts):
        if o in ("-D", "-U") and i + 1 < len(opts):
            o = o + opts[i + 1]
        if o.startswith("-D") and len(o) > 2:
            name, _, value = o[2:].partition("=")
            out[name.strip()] = value if "=" in o else "1"
        elif o.startswith("-U") and len(o) > 2:
            out.pop(o[2:].strip(), None)
    return out


def _lines(code: str, lo: int, hi: int) -> list[tuple[int, int, str]]:
    """The logical lines starting in ``code[lo:hi]`` (backslash continuations joined) as
    (start, end, text)."""
    out = []
    i = lo
    while i < hi:
        j = code.find("\n", i)
        j = len(code) if j < 0 else j
        while j < len(code) and code[j - 1] == "\\":
            k = code.find("\n", j + 1)
            j = len(code) if k < 0 else k
        out.append((i, j, code[i:j].replace("\\\n", " ")))
        i = j + 1
    return out


def _define(rest: str, decided: bool) -> tuple[str, object] | None:
    """The macro a ``#define`` line's text after ``define`` makes: (name, value), the value
    _UNKNOWN where the line stands under a condition not decided, _FUNCTION for a function-like one."""
    d = re.match(r"\s*([A-Za-z_]\w*)(\()?\s*(.*)$", rest, re.S)
    if not d:
        return None
    return d.group(1), (_FUNCTION if d.group(2) else d.group(3).strip()) if decided else _UNKNOWN


def evaluate(expr: str, values: dict[str, object]) -> bool | None:
    """An ``#if`` condition's value, or None where it is not decided here: a name not defined
    (the preprocessor reads it as 0, but it may be a system header's macro), a macro of unknown
    value, or anything but an integer expression whose meaning Python's operators keep."""

    def defined(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return " _KB_UNDECIDED " if values.get(name) is _UNKNOWN else (" 1 " if name in values else " 0 ")

    expr = re.sub(r"\bdefined\s*\(\s*([A-Za-z_]\w*)\s*\)|\bdefined\s+([A-Za-z_]\w*)", defined, expr)
    for _ in range(32):  # object-like macros, expanded
        names = _IDENT.findall(re.sub(r"\b0[xX][0-9a-fA-F]+|\d\w*", " ", expr))
        if not names:
            break
        if any(not isinstance(values.get(n), str) for n in names):
            return None
        expr = re.sub(r"\b(?<!\d)[A-Za-z_]\w*\b", lambda m: f" ({values.get(m.group(0), m.group(0))}) ", expr)
    else:
        return None
    py = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr)
    if not re.fullmatch(r"[\w\s()+\-*/%<>=!&|^~]*", py) or re.search(
        r"[A-Za-z_]", re.sub(r"\b0[xX][0-9a-fA-F]+\b", "", py)
    ):
        return None
    compare = re.search(r"[<>]|==|!=", py)
    bitwise = re.search(r"(?<!&)&(?!&)|(?<!\|)\|(?!\|)|\^", py)
    if (compare and (bitwise or re.search(r"!(?!=)", py))) or (re.search(r"-", py) and re.search(r"[/%]", py)):
        return None  # C's precedence or division, not Python's
    py = py.replace("&&", " and ").replace("||", " or ").replace("/", "//")
    py = re.sub(r"!(?!=)", " not ", py)
    try:
        return bool(eval(py, {"__builtins__": {}}, {}))
    except Exception:
        return None


class _Conditionals:
    """The conditionals open at a point: each (this branch taken, some branch of it taken), True,
    False or None (not decided)."""

    def __init__(self) -> None:
        self.stack: list[tuple[bool | None, bool | None]] = []

    @property
    def state(self) -> bool | None:
        if any(s[0] is False for s in self.stack):
            return False
        return True if all(s[0] is True for s in self.stack) else None

    def line(self, kind: str, rest: str, values: dict[str, object], where: str) -> None:
        if kind in ("if", "ifdef", "ifndef"):
            outer = self.state
            if kind == "if":
                v = evaluate(rest, values)
            else:
                name = (rest.split() or [""])[0]
                v = None if values.get(name) is _UNKNOWN else (name in values) == (kind == "ifdef")
            self.stack.append((v, v) if outer is not False else (False, True))
            return
        if not self.stack:
            raise Giveup(f"an #{kind} without #if ({where})")
        if kind == "endif":
            self.stack.pop()
            return
        _, taken = self.stack.pop()
        v = evaluate(rest, values) if kind == "elif" else True
        if taken is True or self.state is False:
            self.stack.append((False, True))
        elif taken is None or v is None:
            self.stack.append((None, None))
        else:
            self.stack.append((v, v))


_CONDITIONAL = ("if", "ifdef", "ifndef", "elif", "else", "endif")


def active_body(
    text: str,
    code: str,
    a: int,
    b: int,
    start: dict[str, object],
    headers: dict[str, str],
    unrolls: list[tuple[int, str]] | None = None,
) -> tuple[str, str]:
    """``text`` and ``code`` with the preprocessor lines of the body ``code[a:b]`` and the lines
    of the branches not taken blanked (see the module docstring). ``unrolls`` gets where each
    ``#pragma unroll`` line of a branch taken ends and what follows ``unroll`` on it
    (fission_unroll.py)."""
    values = dict(start)
    conds = _Conditionals()
    seen: set[str] = set()

    def where(s: int) -> str:
        return f"line {code.count(chr(10), 0, s) + 1}"

    def macro_lines(src: str, lo: int, hi: int, top: bool) -> None:
        for s, _, line in _lines(src, lo, hi):
            m = _DIRECTIVE.match(line)
            if not m:
                continue
            kind, rest = m.group(1), m.group(2)
            if kind in _CONDITIONAL:
                conds.line(kind, rest, values, where(s) if top else "a header")
            elif conds.state is False:
                continue
            elif kind == "define":
                d = _define(rest, conds.state is True)
                if d:
                    values[d[0]] = d[1]
            elif kind == "undef":
                name = (rest.split() or [""])[0]
                if conds.state is True:
                    values.pop(name, None)
                else:
                    values[name] = _UNKNOWN
            elif kind == "include":
                inc = re.match(r'\s*"([^"]+)"', rest)
                if inc and inc.group(1) in headers and inc.group(1) not in seen:
                    seen.add(inc.group(1))
                    h = strip_comments_and_strings(headers[inc.group(1)])
                    depth = len(conds.stack)
                    macro_lines(h, 0, len(h), False)
                    del conds.stack[depth:]  # (a header's own unbalanced conditionals)

    macro_lines(code, 0, a, True)
    # Inside the body: each conditional decided, what is not taken blanked.
    base = len(conds.stack)
    if conds.state is not True:
        raise Giveup("the kernel stands under a preprocessor condition not decided here")
    out_text, out_code = list(text[a:b]), list(code[a:b])
    for s, e, line in _lines(code, a, b):
        m = _DIRECTIVE.match(line)
        blank = conds.state is False
        if m:
            kind = m.group(1)
            if kind in _CONDITIONAL:
                if kind != "if" and not kind.startswith("if") and len(conds.stack) <= base:
                    raise Giveup(f"a conditional that begins outside the kernel body ({where(s)})")
                conds.line(kind, m.group(2), values, where(s))
                if conds.state is None:
                    raise Giveup(f"a preprocessor condition the build's defines do not decide ({where(s)})")
            elif kind != "pragma" and conds.state is True:
                raise Giveup(f"a #{kind} line inside the kernel body ({where(s)})")
            elif unrolls is not None and conds.state is True:
                u = re.fullmatch(r"\s*unroll\b(.*)", m.group(2))
                if u:
                    unrolls.append((e, u.group(1).strip()))
            blank = True
        if blank:
            for k in range(s, min(e, b)):
                if out_code[k - a] != "\n":
                    out_text[k - a] = out_code[k - a] = " "
    if len(conds.stack) != base:
        raise Giveup("a conditional that ends outside the kernel body")
    return text[:a] + "".join(out_text) + text[b:], code[:a] + "".join(out_code) + code[b:]
