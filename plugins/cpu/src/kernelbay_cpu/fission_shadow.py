"""Locals declared again inside a region's statement (``for (...) { int sj = j + 4; ... }``)
under the name of a per-thread local of the kernel (``int sj = threadIdx.y + 4;`` at a top
level): the inner one is a scope of its own, so it and its uses there are renamed
(``sj_kb_in``), and the per-thread local's indexing (``sj[kb_t]``) leaves them alone."""

from __future__ import annotations

import re

from .fission_scan import closing, skip_ws, statement_end
from .fission_state import TYPE, Giveup, Rewrite

#: a type named otherwise than TYPE: `Foo`, `ns::Foo`, `Foo<T>`
_NAMED = r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*(?:\s*<[^<>;]*>)?"
_KEYWORDS = {"else", "return", "case", "do", "goto", "sizeof", "new", "delete", "throw", "typedef", "using"}


def _scope(code: str, lo: int, k: int, hi: int) -> int:
    """Where the scope of the declaration at ``k`` (inside ``code[lo:hi]``) ends."""
    depth = 0
    for i in range(k - 1, lo - 1, -1):
        c = code[i]
        if c in ")]}":
            depth += 1
        elif c in "([{":
            if depth:
                depth -= 1
                continue
            if c == "{":
                return closing(code, i)
            if c == "(" and re.search(r"\bfor\s*$", code[lo:i]):
                return statement_end(code, skip_ws(code, closing(code, i) + 1, hi), hi)
            break
    return -1


def rename_shadows(rw: Rewrite) -> None:
    """Rename the inner declarations of the per-thread arrays' names and their uses (see above)."""
    code, a, b = rw.code, rw.body_start, rw.body_end
    for name in rw.arrays:
        decl = re.compile(rf"(?<![\w:])(?:const\s+)?(?P<type>{TYPE}|{_NAMED})\s*[*&]*\s+[*&]*{name}\s*[=;,\[)]")
        spans = []
        for m in decl.finditer(code, a, b):
            if any(s <= m.start() < e for s, e in rw.decl_spans):
                continue  # a top level's: the per-thread local itself
            before = code[a : m.start()].rstrip()
            if m.group("type").split()[0] in _KEYWORDS or (before and before[-1] not in ";{}("):
                continue  # a statement that uses it (`else sj = 3;`, `a > sj;`), no declaration
            end = _scope(code, a, m.start(), b)
            if end < 0:
                raise Giveup(f"{name} declared twice")
            spans.append((m.start(), end))
        if not spans:
            continue
        rw.redeclared[name] = rw.redeclared.get(name, 0) + len(spans)
        use = re.compile(rf"(?<![\w.])(?<!->)(?<!::){name}\b")
        seen: set[int] = set()
        for lo, hi in spans:
            for m in use.finditer(code, lo, hi):
                if m.start() in seen:
                    continue  # (a scope inside another)
                seen.add(m.start())
                if any(s < m.end() and m.start() < e for s, e, _ in rw.edits if e > s):
                    raise Giveup(f"{name} declared twice")
                rw.edits.append((m.start(), m.end(), f"{name}_kb_in"))
