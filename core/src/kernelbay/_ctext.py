"""The layout of C-like source text, for :mod:`kernelbay.csource`: comments and literals
blanked, preprocessor directives ignored, and the braces, namespaces and statement boundaries
that are left.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re

__all__ = ["Scope", "Text", "match", "read", "skip", "strip_comments_and_strings"]

_SPACE = re.compile(r"\s*")


def skip(code: str, i: int) -> int:
    """``i`` past the blanks there."""
    return _SPACE.match(code, i).end()  # type: ignore[union-attr]


# --- blanking comments and literals ------------------------------------------------------------

_STRIP_START = re.compile(r"""//|/\*|["']""")
_NOT_NL = re.compile(r"[^\n]")


def strip_comments_and_strings(text: str) -> str:
    """``text`` with comments, string and char literals blanked out (``"abc"`` becomes ``"   "``),
    newlines and offsets kept.

    One pass, linear in the text: each token's end is found with ``str.find`` (or a scan of its
    line for literals), never by a backtracking pattern, so an unterminated literal or comment
    costs what its length costs (a 1 MB source in milliseconds).
    """
    out: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _STRIP_START.search(text, pos)
        if m is None:
            break
        start = m.start()
        tok = m.group(0)
        if tok == "//":
            end = text.find("\n", start)
            end = n if end < 0 else end
            out.append(text[pos:start])
            out.append(" " * (end - start))
        elif tok == "/*":
            close = text.find("*/", start + 2)
            end = n if close < 0 else close + 2
            out.append(text[pos:start])
            out.append(_NOT_NL.sub(" ", text[start:end]))
        else:  # a string or char literal: ends at its unescaped quote, or (unterminated) at the line's end
            i = start + 1
            while i < n:
                c = text[i]
                if c == "\\":
                    i += 2
                    continue
                if c == tok or c == "\n":
                    break
                i += 1
            if i < n and text[i] == tok:
                end = i + 1
                out.append(text[pos : start + 1])
                out.append(_NOT_NL.sub(" ", text[start + 1 : i]))
                out.append(tok)
            else:  # unterminated: the rest of its line is left as it is (the compiler will say so)
                end = min(i, n)
                out.append(text[pos:end])
        pos = end
    out.append(text[pos:])
    return "".join(out)


# --- the text's structure: scopes and statement boundaries --------------------------------------

_DIRECTIVE = re.compile(r"^[ \t]*#(?:.*\\\n)*.*", re.MULTILINE)
_NAMESPACE_HEAD = re.compile(r"\bnamespace\s*([\w:]*)\s*$")
_EXTERN_HEAD = re.compile(r'\bextern\s*"([^"\n]*)"\s*$')
_EXTERN = re.compile(r'\bextern\s*"([^"\n]*)"')


@dataclasses.dataclass(slots=True)
class Scope:
    """A pair of braces."""

    open: int
    close: int  # len(code) while (or when never) closed
    kind: str  # "namespace" | "extern" (an extern "C" block) | "block" (any other braces)
    name: str  # a namespace's ("a::b" for `namespace a::b`, "" when anonymous)
    parent: int  # index of the enclosing scope, -1 at file scope


@dataclasses.dataclass(slots=True)
class Text:
    """``text`` read once: its code (comments, literals, directives blanked) and its braces."""

    text: str
    code: str
    scopes: list[Scope]  # in the order they open
    opens: list[int]  # each scope's open, ascending
    bounds: list[int]  # offsets of every ";", "{" and "}", ascending

    def enclosing(self, pos: int) -> list[Scope]:
        """The scopes around ``pos``, innermost first."""
        # The innermost is the last one opened before pos, or one of its ancestors.
        i = bisect.bisect_left(self.opens, pos) - 1
        out = []
        while i >= 0:
            s = self.scopes[i]
            if s.close > pos:
                out.append(s)
            i = s.parent
        return out

    def body(self, open_: int) -> tuple[int, int] | None:
        i = bisect.bisect_left(self.opens, open_)
        if i < len(self.opens) and self.opens[i] == open_ and self.scopes[i].close < len(self.code):
            return open_, self.scopes[i].close
        return None

    def statement_start(self, pos: int) -> int:
        i = bisect.bisect_left(self.bounds, pos)
        return self.bounds[i - 1] + 1 if i else 0

    def extern_c(self, start: int, end: int, pattern: re.Pattern[str] = _EXTERN) -> bool:
        # The literal's content is blanked in the code: read it from the text at its offsets.
        return any(
            self.text[m.start(1) + start : m.end(1) + start] == "C" for m in pattern.finditer(self.code[start:end])
        )


# A backend asks about many names of one source in a row (the functions each kernel calls, per
# kernel): each question re-read the whole text. Read results are never mutated by callers.
@functools.lru_cache(maxsize=16)
def read(text: str) -> Text:
    """``text``'s code and structure, in one pass over its braces and semicolons."""
    code = _DIRECTIVE.sub(lambda m: _NOT_NL.sub(" ", m.group(0)), strip_comments_and_strings(text))
    t = Text(text, code, [], [], [])
    stack: list[int] = []
    last = 0
    for m in re.finditer(r"[{};]", code):
        i = m.start()
        t.bounds.append(i)
        if m.group(0) == "{":
            head = code[last:i]
            ns = _NAMESPACE_HEAD.search(head)
            if ns:
                kind, name = "namespace", ns.group(1)
            elif t.extern_c(last, i, _EXTERN_HEAD):
                kind, name = "extern", ""
            else:
                kind, name = "block", ""
            stack.append(len(t.scopes))
            t.scopes.append(Scope(i, len(code), kind, name, stack[-2] if len(stack) > 1 else -1))
            t.opens.append(i)
        elif m.group(0) == "}" and stack:
            t.scopes[stack.pop()].close = i
        last = i + 1
    return t


def match(code: str, i: int, opening: str, closing: str) -> int:
    """Offset of the bracket closing the one at ``i``, or -1."""
    depth = 0
    for j in range(i, len(code)):
        c = code[j]
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return j
        elif c in ";{}" and opening != "{":
            return -1
    return -1
