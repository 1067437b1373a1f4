"""Reading C, C++ and CUDA source text: the kernels it defines and what their parameters are.

For backend authors. A backend that compiles C-like text needs a few facts about it before (or
without) a compiler: which ``__global__`` function to launch when ``Source.name`` is not given
(:func:`default_kernel`), where each kernel's body lies, to rewrite it (:func:`find_kernels`),
and which pointer parameters a function only reads, so that ``kernelbay_kernel_access`` can
tell a graph that two launches reading one buffer need not wait for each other
(:func:`pointer_access`). Every backend reads them here, the same way.

What is read: the text as written, with comments, string and character literals blanked
(:func:`strip_comments_and_strings`) and preprocessor directives ignored. No macro is expanded
and both branches of an ``#if`` are read, so a kernel that only a macro spells out is not seen.
Offsets returned index the text given: blanking keeps every character's position.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from ._ctext import Text, match, read, skip, strip_comments_and_strings
from .errors import InvalidArgumentError

__all__ = [
    "Function",
    "Param",
    "default_kernel",
    "find_functions",
    "find_kernels",
    "pointer_access",
    "strip_comments_and_strings",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Param:
    """One parameter of a function, as declared."""

    #: The declaration, whitespace folded: ``"const float* __restrict__ x"``.
    text: str
    #: ``"r"`` for a pointer, array or reference to ``const`` data, ``"rw"`` for another one,
    #: ``None`` for a value (a function pointer included: it points to no data).
    access: str | None

    @property
    def pointer(self) -> bool:
        """Whether the parameter points to data: a pointer, an array or a reference."""
        return self.access is not None


@dataclasses.dataclass(frozen=True)
class Function:
    """A function declaration or definition found in source text."""

    name: str  #: as declared, without qualification: ``"saxpy"``
    qualname: str  #: with the enclosing namespaces: ``"blas::saxpy"`` (``name`` at file scope)
    kernel: bool  #: declared ``__global__``
    template: bool
    extern_c: bool  #: declared ``extern "C"``, or inside an ``extern "C" { }`` block
    #: The parameter list as written, between its parentheses (comments blanked).
    param_text: str
    start: int  #: offset of its first token (``template``, ``extern``, ``static``, ...)
    parens: tuple[int, int]  #: offsets of the parameter list's ``(`` and ``)``
    #: Offsets of the body's ``{`` and ``}``; ``None`` for a declaration, and where the reader
    #: could not follow what comes after the parameters (then ``declaration`` is False too).
    body: tuple[int, int] | None
    declaration: bool  #: a declaration without a body (``__global__ void k(float*);``)

    @functools.cached_property
    def params(self) -> tuple[Param, ...]:
        """The parameters, in order (``()`` for ``(void)``)."""
        return _params(self.param_text)


# --- functions ----------------------------------------------------------------------------------

_IDENT = re.compile(r"(?:::\s*)?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*")
_GLOBAL = re.compile(r"\b__global__\b")
# Attribute-like words with parentheses: `__launch_bounds__(256)` is not the function's name.
_ATTRIBUTE = re.compile(r"\b(?:__\w+__|alignas|decltype|__declspec|noexcept|throw)\s*(?=\()")
_NOT_A_TYPE_END = {"return", "else", "new", "delete", "throw", "case", "do", "sizeof", "typeid", "co_return"}


def _skip_decorations(code: str, i: int) -> int:
    """``i`` past blanks, ``[[attributes]]`` and ``__attribute__(...)``-like groups; -1 where
    one never closes."""
    while True:
        i = skip(code, i)
        if code.startswith("[[", i):
            j = code.find("]]", i)
        elif m := _ATTRIBUTE.match(code, i):
            j = match(code, m.end(), "(", ")")
        else:
            return i
        if j < 0:
            return -1
        i = j + (2 if code[j] == "]" else 1)


def _after_params(t: Text, i: int) -> tuple[tuple[int, int] | None, bool]:
    """What follows a parameter list ending before ``i``: (body, is a declaration)."""
    code = t.code
    while True:
        i = _skip_decorations(code, i)
        if i < 0 or i >= len(code):
            return None, False
        if code[i] == "{":
            return t.body(i), False
        if code[i] in ";=":  # `= delete;`, `= 0;` declare too
            return None, True
        m = _IDENT.match(code, i)
        if m is not None:  # `const`, `override`, a trailing return type's names
            i = m.end()
        elif code[i] in "*&<>,-":
            i += 1
        else:
            return None, False


def _function(t: Text, name_at: int, name: str, open_: int, kernel: bool | None) -> Function | None:
    code = t.code
    close = match(code, open_, "(", ")")
    if close < 0:
        return None
    body, declaration = _after_params(t, close + 1)
    start = skip(code, t.statement_start(name_at))
    prefix = code[start:name_at]
    scopes = t.enclosing(name_at)
    written = [p.strip() for p in name.split("::") if p.strip()]
    qual = [p for s in reversed(scopes) if s.kind == "namespace" for p in s.name.split("::") if p]
    return Function(
        name=written[-1],
        qualname="::".join(qual + written),
        kernel=bool(_GLOBAL.search(prefix)) if kernel is None else kernel,
        template=re.search(r"\btemplate\s*<", prefix) is not None,
        extern_c=any(s.kind == "extern" for s in scopes) or t.extern_c(start, name_at),
        param_text=code[open_ + 1 : close],
        start=start,
        parens=(open_, close),
        body=body,
        declaration=declaration,
    )


def _kernel_at(t: Text, at: int) -> Function | None:
    """The function whose declaration has ``__global__`` ending at ``at``."""
    code = t.code
    i = at
    while True:
        i = _skip_decorations(code, i)
        if i < 0 or i >= len(code) or code[i] in ";{}()=":
            return None
        if code[i] == "<":  # template arguments of the return type
            i = match(code, i, "<", ">")
            if i < 0:
                return None
            i += 1
            continue
        m = _IDENT.match(code, i)
        if m is None:
            i += 1  # "*", "&" of the return type
            continue
        j = skip(code, m.end())
        if code.startswith("<", j):  # `k<float>(` specialises a template; `Vec<float> k(` returns one
            k = match(code, j, "<", ">")
            if k >= 0 and code.startswith("(", skip(code, k + 1)):
                j = skip(code, k + 1)
        if code.startswith("(", j):
            return _function(t, m.start(), m.group(0), j, kernel=True)
        i = m.end()


def find_kernels(text: str) -> list[Function]:
    """Every ``__global__`` function of ``text``, declarations included, in order.

    A ``__global__`` whose name or parameter list cannot be read (a macro spelling them) is
    left out.
    """
    t = read(text)
    found = (_kernel_at(t, m.end()) for m in _GLOBAL.finditer(t.code))
    return [f for f in found if f is not None]


def _base_name(name: str) -> tuple[str, str]:
    """``"ns::k<float>"`` -> ``("k", "ns::k")``: template arguments are not part of the name."""
    bare = name.split("<", 1)[0].strip().lstrip(":").strip()
    return bare.rsplit("::", 1)[-1].strip(), "::".join(p.strip() for p in bare.split("::"))


def find_functions(text: str, name: str) -> list[Function]:
    """Every declaration or definition of the free function ``name`` in ``text``, in order.

    :param name: ``"saxpy"``, qualified (``"blas::saxpy"`` matches ``saxpy`` in namespace
        ``blas``), or with template arguments, which are ignored (``"axpy<float>"``).
        Members of classes and functions local to others are not free functions.
    """
    bare, qualified = _base_name(name)
    if not bare:
        return []
    t = read(text)
    code = t.code
    out = []
    for m in re.finditer(rf"(?<![\w:])(?:(?:::\s*)?[A-Za-z_]\w*\s*::\s*)*{re.escape(bare)}\s*\(", code):
        before = code[max(0, m.start() - 256) : m.start()].rstrip()
        word = re.search(r"[A-Za-z_]\w*$", before)
        if word:
            if word.group(0) in _NOT_A_TYPE_END:
                continue
        elif before.endswith(")"):  # `__launch_bounds__(256) k(`, not `f(x) k(`
            opening = before.rfind("(")  # attribute arguments hold no parentheses of their own
            if not re.search(r"__\w+__\s*\(?$", before[: opening + 1]):
                continue
        elif not before.endswith(("*", "&", ">", "]")):
            continue
        if any(s.kind == "block" for s in t.enclosing(m.start())):
            continue
        f = _function(t, m.start(), m.group(0)[:-1].strip(), m.end() - 1, kernel=None)
        if f is not None and (f.qualname == qualified or f.qualname.endswith("::" + qualified)):
            out.append(f)
    return out


def pointer_access(text: str, name: str) -> tuple[str | None, ...] | None:
    """Access modes of a C/C++/CUDA function's parameters, read from its source.

    For backends implementing ``kernelbay_kernel_access`` from source text: ``"r"`` for a
    pointer to ``const`` data, ``"rw"`` for another pointer, ``None`` for a value parameter.
    (:class:`Param` says what counts as a pointer.)

    :param name: as :func:`find_functions` takes it.
    :return: one mode per parameter, or ``None`` when the definition is not found (or found
        more than once: overloads).
    """
    defs = [f for f in find_functions(text, name) if f.body is not None]
    if len(defs) != 1:
        return None
    return tuple(p.access for p in defs[0].params)


def default_kernel(text: str) -> str:
    """The kernel to launch from ``text`` when ``Source.name`` is not given: its one
    ``__global__`` function, by qualified name.

    :raises InvalidArgumentError: when ``text`` declares none, several (overloads included), or
        only a template (whose instantiation must be named).
    """
    kernels = find_kernels(text)
    names = list(dict.fromkeys(k.qualname for k in kernels))
    how = "; pass Source(..., name='kernel') (or name='axpy<float>' for a template)"
    if len(names) != 1:
        found = f"the source defines {', '.join(names)}" if names else "the source defines no __global__ function"
        raise InvalidArgumentError(f"cannot tell which kernel to launch: {found}{how}")
    if any(k.template for k in kernels):
        raise InvalidArgumentError(
            f"cannot tell which kernel to launch: {names[0]} is a template; "
            f"pass Source(..., name='{names[0]}<float>') naming its instantiation"
        )
    if sum(k.body is not None for k in kernels) > 1:
        raise InvalidArgumentError(
            f"cannot tell which kernel to launch: {names[0]} is overloaded; give each overload its own name"
        )
    return names[0]


# --- parameters -----------------------------------------------------------------------------

_QUALIFIERS = re.compile(
    r"\b(?:__\w+__|alignas)\s*(?:\((?:[^()]|\([^()]*\))*\))?|\[\[.*?\]\]|\b(?:__restrict|restrict|volatile|register)\b"
)
_TOKEN = re.compile(r"[A-Za-z_]\w*|::|&&|[*&\[(]")
_ANGLES = re.compile(r"(?<=[\w>])<[^<>]*>")


_PAIRS = {")": "(", "]": "[", "}": "{", ">": "<"}


def _top_level(text: str, char: str) -> list[int]:
    """Offsets of ``char`` outside any brackets and template arguments of ``text`` (a ``<``
    right after a name opens them: ``Pair<int, T>``, not ``a < b``)."""
    out: list[int] = []
    if char not in text:
        return out
    stack: list[str] = []
    for i, c in enumerate(text):
        if c in "([{" or (c == "<" and i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>")):
            stack.append(c)
        elif c in _PAIRS and stack and stack[-1] == _PAIRS[c]:
            stack.pop()
        elif c == char and not stack:
            out.append(i)
    return out


def _blank_angles(decl: str) -> str:
    """Template arguments dropped, innermost first: ``Pair<int, float*>`` holds no pointer."""
    while (shorter := _ANGLES.sub(" ", decl)) != decl:
        decl = shorter
    return decl


def _access(decl: str) -> str | None:
    eq = _top_level(decl, "=")
    if eq:  # a default argument
        decl = decl[: eq[0]]
    clean = _QUALIFIERS.sub(" ", _blank_angles(decl))
    tokens = _TOKEN.findall(clean)
    if "(" in tokens:
        # `void (*f)(int)` points to code, not data; `float (*rows)[4]` to an array.
        rest = clean[clean.index("(") :]
        if not re.match(r"\(\s*[*&][^()]*\)\s*\[", rest):
            return None
        tokens = tokens[: tokens.index("(")] + ["*"]
    if "[" in tokens:  # an array parameter is a pointer to its first element
        element = tokens[: tokens.index("[")]
        if len(element) > 1 and element[-1] not in ("*", "&", "&&", "::", "const"):
            element = element[:-1]  # the parameter's name
        tokens = [*element, "*"]
    marks = [i for i, tok in enumerate(tokens) if tok in ("*", "&", "&&")]
    if not marks:
        return None
    pointee = tokens[: marks[-1]]
    inner = [i for i, tok in enumerate(pointee) if tok in ("*", "&", "&&")]
    # The pointee's own qualifiers: after its last "*" when it is a pointer itself, else any.
    own = pointee[inner[-1] + 1 :] if inner else pointee
    return "r" if "const" in own else "rw"


def _params(params: str) -> tuple[Param, ...]:
    cuts = [-1, *_top_level(params, ","), len(params)]
    decls = [d for d in (params[a + 1 : b] for a, b in zip(cuts, cuts[1:])) if d.strip()]
    if len(decls) == 1 and decls[0].strip() == "void":
        return ()
    return tuple(Param(" ".join(d.split()), _access(d)) for d in decls)
