"""What every thread of a fissioned kernel reads alike without its being a parameter (template
parameters, constant macros), and the parameters the body assigns: each CUDA thread has its own
copy of those, so here each thread's is a per-thread local filled from the argument."""

from __future__ import annotations

import re

from kernelbay.csource import Function

from .fission_scan import split_top
from .fission_state import INDEX_WORDS, TYPE, Giveup, Rewrite

#: every object-like #define (a function-like one's name is followed by "(" at once), and what
#: its value may hold to be a constant expression
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])[ \t]*((?:[^\n]|\\\n)*)$", re.M)
DEFINE = _DEFINE
_CONSTANT = re.compile(r"[\w \t()+\-*/%<>&|^~.]*")


def constants(text: str, code: str, fn: Function, options: dict[str, object], headers: list[str]) -> set[str]:
    """Names every thread reads alike that are no parameter: ``fn``'s template parameters and the
    object-like macros of ``text``, its ``headers`` and the build's ``-D`` options (``options``) whose value is a
    constant expression (``#define BLOCK 256``, ``#define HALF (BLOCK / 2)``)."""
    names: set[str] = set()
    m = re.match(r"template\s*<", code[fn.start : fn.parens[0]])
    if m:
        k, depth = fn.start + m.end(), 1
        for j in range(k, fn.parens[0]):
            depth += {"<": 1, ">": -1}.get(code[j], 0)
            if depth == 0:
                for part in split_top(code[k:j]):
                    got = re.search(r"([A-Za-z_]\w*)\s*(?:=.*)?$", part.strip(), re.S)
                    if got:
                        names.add(got.group(1))
                break
    macros: dict[str, list[str]] = {}  # every definition of each (one in a branch not taken too)
    for k, v in [
        *((k, v) for k, v in options.items() if isinstance(v, str)),
        *(d for t in [text, *headers] for d in _DEFINE.findall(t)),
    ]:
        macros.setdefault(k, []).append(v)
    grew = True
    while grew:  # a macro of macros already known
        grew = False
        for name, values in macros.items():
            words = set(re.findall(r"\b[A-Za-z_]\w*\b", " ".join(values)))
            if (
                name not in names
                and all(v.strip() and _CONSTANT.fullmatch(v) for v in values)
                and words <= names | INDEX_WORDS - {"threadIdx"}
            ):
                names.add(name)
                grew = True
    return names


def param_copies(rw: Rewrite, fn: Function) -> None:
    """The kernel parameters the body assigns (sgemm's ``A += BK;``, ``n -= ...``): each CUDA
    thread has its own copy, so here each thread's is a per-thread local (``rw.arrays``), made
    from the argument, renamed ``kb_arg_<name>`` in the signature (:meth:`Rewrite.copy_params`)."""
    body = rw.body_code
    for p in fn.params:
        m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", p.text)
        if not m or m.group(1) not in rw.params:
            continue
        name = m.group(1)
        # (a member of a vector or struct parameter written too: `v.x += 1;`, `++v.x`)
        member = rf"(?<![\w.])(?<!->){name}\s*\.\s*\w+\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)"
        if not (
            rw.assigned(name)
            or re.search(rf"(?<![\w.])(?<!->){name}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", body)
            or re.search(member, body)
            or re.search(rf"(?:\+\+|--)\s*{name}\s*\.", body)
        ):
            continue
        t = p.text[: m.start()]
        if re.search(r"[&\[(<]", p.text) or not re.fullmatch(TYPE, t.strip()):
            raise Giveup(f"it assigns the kernel parameter {name}, of a type the loop path does not copy per thread")
        t = re.sub(r"\b__restrict__\b", "", t)
        t = re.sub(r"\*\s*const\b", "*", t) if "*" in t else re.sub(r"\bconst\b", "", t)
        rw.arrays[name] = " ".join(t.split()).replace(" *", "*")
        rw.copies.append(name)
        rw.fixed.discard(name)


def copy_params(rw: Rewrite, head: str) -> tuple[str, str]:
    """``head`` (the text before the body) with the copied parameters renamed in the
    signature, and what fills each thread's copies from them."""
    lo, hi = rw.parens
    renames, pos = [], lo + 1
    for part in split_top(rw.code[lo + 1 : hi]):
        m = re.search(r"([A-Za-z_]\w*)\s*$", part)
        if m and m.group(1) in rw.copies:
            renames.append((pos + m.start(1), pos + m.end(1), m.group(1)))
        pos += len(part) + 1
    if len(renames) != len(rw.copies):
        raise Giveup("a parameter it assigns was not found in the signature")
    for s, e, name in reversed(renames):
        head = head[:s] + f"kb_arg_{name}" + head[e:]
    fill = " ".join(f"{n}[kb_i] = kb_arg_{n};" for n in rw.copies)
    return head, f" for (unsigned kb_i = 0; kb_i < kb_fb.n; ++kb_i) {{ {fill} }}" if fill else ""
