"""Kernel source: :class:`Source`, the value every backend's compiler receives.

A value with no state: it pickles, hashes and gives a stable :meth:`Source.digest` for cache
keys. It imports nothing of kernelbay but the errors.
"""

from __future__ import annotations

import hashlib
import os
import types as _pytypes
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["SUFFIX_LANG", "Source"]


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return _pytypes.MappingProxyType(dict(value or {}))


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    # converter=tuple, typed (type checkers cannot infer tuple's element type as a converter)
    return tuple(value)


#: File suffix -> language, for :meth:`Source.from_file` and ``kernelbay precompile``.
SUFFIX_LANG = {
    ".cu": "cuda",
    ".cuh": "cuda",
    ".cpp": "c++",
    ".cc": "c++",
    ".cxx": "c++",
    ".ptx": "ptx",
    ".cubin": "cubin",
    ".fatbin": "fatbin",
}
_BINARY_LANGS = {"cubin", "fatbin"}


def _lang(value: object) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"Source lang must be a language name such as 'cuda' or 'c++', not {value!r}")
    return value.lower()


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        raise InvalidArgumentError(
            f"{what} holds a character UTF-8 cannot encode ({text[exc.start]!r}, a lone surrogate, at line "
            f"{line}); sources are UTF-8 text: remove it, or decode the file with errors='replace'"
        ) from None


def _check_headers(_inst: object, _attr: attrs.Attribute, value: Mapping[str, Any]) -> None:
    """Header names are relative paths inside the build directory: no absolute or ``..`` names."""
    for name, text in value.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise ArgumentTypeError(
                f"Source headers map names (str) to text (str), got {name!r}: {type(text).__name__}"
            )
        parts = name.replace("\\", "/").split("/")
        if (
            not name
            or "\0" in name
            or name.startswith(("/", "\\"))
            or (len(name) > 1 and name[1] == ":")
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise InvalidArgumentError(
                f"Source header name {name!r} is not a plain relative path: header names are what "
                '#include "name" says, such as "util.h" or "sub/util.h", with no absolute path, empty, "." '
                'or ".." parts; pass other directories with -I options instead'
            )
        _check_text(text, f"Source header {name!r}")


# Validators as functions passed to attrs.field(), not @field.validator methods: type checkers
# see a field as its value's type and cannot follow the decorator.
def _check_code(_inst: object, _attr: attrs.Attribute, value: object) -> None:
    if not isinstance(value, (str, bytes)) and not callable(value):
        raise ArgumentTypeError(f"Source code must be str, bytes or a function, not {type(value).__name__}")
    if isinstance(value, str):
        _check_text(value, "Source code")


def _check_lang(_inst: object, _attr: attrs.Attribute, value: str) -> None:
    if not value:
        raise InvalidArgumentError("Source lang must be a language name such as 'cuda' or 'c++'")


@attrs.frozen
class Source:
    """Kernel source in one language.

    :ivar code: the text (``str``), a binary image (``bytes``, for ``cubin``/``fatbin``), or a
        Python function (``pallas``; a ``@triton.jit`` function for ``triton``).
    :ivar lang: the language: ``cuda``, ``c++``, ``ptx``, ``cubin``, ``fatbin``, ``pallas``, or
        whatever a third-party backend accepts.
    :ivar name: the kernel's entry name (``None``: the backend's default, where it has one).
    :ivar options: compiler options, passed through (``-DN=4``, ``--std=c++17``, ``-O2``...).
    :ivar headers: extra header files by include name, for ``#include "name"``.
    :ivar name_expressions: template instantiations to compile, e.g. ``("axpy<float>",)``;
        launch one with ``kernel = kb.compile(src)["axpy<float>"]``... see the backend docs.
    :ivar meta: language-specific settings (Pallas output-only and in-place arguments, block
        specs...), read-only.
    """

    code: str | bytes | Callable[..., Any] = attrs.field(validator=_check_code)
    lang: str = attrs.field(converter=_lang, validator=_check_lang)
    name: str | None = None
    options: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    headers: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_mapping, hash=False, validator=_check_headers
    )
    name_expressions: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    meta: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, hash=False)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], lang: str | None = None, **kwargs: Any) -> Source:
        """Read a source file; ``lang`` defaults from the suffix (.cu, .cpp, .ptx, .cubin...)."""
        path = os.fspath(path)
        suffix = os.path.splitext(path)[1].lower()
        if lang is None:
            if suffix not in SUFFIX_LANG:
                raise InvalidArgumentError(
                    f"cannot tell the language of {path!r} from its suffix; pass lang= "
                    f"(known suffixes: {', '.join(sorted(SUFFIX_LANG))})"
                )
            lang = SUFFIX_LANG[suffix]
        try:
            if lang.lower() in _BINARY_LANGS:
                with open(path, "rb") as fb:
                    code: str | bytes = fb.read()
            else:
                with open(path, encoding="utf-8") as ft:
                    code = ft.read()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read kernel source {path!r}: {exc.strerror}") from exc
        return cls(code, lang=lang, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # a value: pickles with its mappings as plain dicts (a Pallas function by reference)
        return (
            _make_source,
            (self.code, self.lang, self.name, self.options, dict(self.headers), self.name_expressions, dict(self.meta)),
        )

    @property
    def text(self) -> str:
        """The code as text (binary images and functions give an empty string)."""
        return self.code if isinstance(self.code, str) else ""

    def digest(self) -> str:
        """A sha256 over everything that defines the compiled result, for cache keys.

        A Python function (Pallas) is keyed by its content where that defines it: its bytecode,
        constants, names, defaults, and the values its closure and globals bind -- numbers,
        strings, tuples of them, modules (by name), classes (by qualified name) and functions
        (recursively). One that binds anything else (an array, an object) is keyed by its
        identity instead, valid in this process only. ``meta`` is hashed with it where it can be
        (its values by the same rules). A ``triton`` function is keyed by its source text
        (``fn.src``) and ``meta`` (its signature and constexprs define the compiled result).
        """
        h = hashlib.sha256()
        code = self.code
        if isinstance(code, str):
            h.update(b"s" + code.encode())
        elif isinstance(code, bytes):
            h.update(b"b" + code)
        elif self.lang == "triton" and isinstance(src := getattr(code, "src", None), str):
            h.update(b"t" + src.encode() + repr(sorted(self.meta.items())).encode())
        else:
            stable = _fn_content(code, set())
            if stable is not None and (meta := _value_content(dict(self.meta), set())) is not None:
                h.update(b"c" + stable.encode() + b"\0" + meta.encode())
            else:
                h.update(f"f{getattr(code, '__module__', '')}.{getattr(code, '__qualname__', '')}:{id(code)}".encode())
        for part in (
            self.lang,
            self.name or "",
            *self.options,
            *[f"{k}\0{v}" for k, v in sorted(self.headers.items())],
            *self.name_expressions,
        ):
            h.update(b"\0" + part.encode())
        return h.hexdigest()


_PLAIN = (int, float, complex, str, bytes, bool, type(None), type(Ellipsis))


def _value_content(v: Any, seen: set[int]) -> str | None:
    """A text that stands for ``v`` across processes, or ``None`` when there is none."""
    if isinstance(v, _PLAIN):
        return f"{type(v).__name__}:{v!r}"
    if isinstance(v, (tuple, list, frozenset, set)):
        items = [_value_content(x, seen) for x in v]
        if any(x is None for x in items):
            return None
        if isinstance(v, (frozenset, set)):
            items = sorted(items)  # type: ignore[type-var]
        return f"{type(v).__name__}({','.join(items)})"  # type: ignore[arg-type]
    if isinstance(v, dict):
        parts = []
        for k in sorted(v, key=repr):
            kv, vv = _value_content(k, seen), _value_content(v[k], seen)
            if kv is None or vv is None:
                return None
            parts.append(f"{kv}={vv}")
        return "{" + ",".join(parts) + "}"
    if isinstance(v, _pytypes.ModuleType):
        return f"module:{v.__name__}"
    if isinstance(v, (type, _pytypes.BuiltinFunctionType)):
        return f"named:{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', '')}"
    if isinstance(v, _pytypes.FunctionType):
        return _fn_content(v, seen)
    if isinstance(v, _pytypes.CodeType):
        return _code_content(v, seen)
    return None


def _code_content(code: _pytypes.CodeType, seen: set[int]) -> str | None:
    consts = [_value_content(c, seen) for c in code.co_consts]
    if any(c is None for c in consts):
        return None
    return "|".join(
        [code.co_code.hex(), ";".join(consts), ",".join(code.co_names), ",".join(code.co_varnames)]  # type: ignore[arg-type]
    )


def _fn_content(fn: Any, seen: set[int]) -> str | None:
    """The content of a Python function (see :meth:`Source.digest`), ``None`` where it has none."""
    fn = getattr(fn, "__wrapped__", fn)  # functools.wraps, jax.jit: the function beneath
    if not isinstance(fn, _pytypes.FunctionType):
        return None
    if id(fn) in seen:  # recursion: named once
        return f"self:{fn.__qualname__}"
    seen.add(id(fn))
    code = _code_content(fn.__code__, seen)
    if code is None:
        return None
    parts = [fn.__qualname__, code]
    for extra in (fn.__defaults__ or (), dict(fn.__kwdefaults__ or {})):
        if (c := _value_content(extra, seen)) is None:
            return None
        parts.append(c)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            c = _value_content(cell.cell_contents, seen)
        except ValueError:  # an empty cell
            c = "empty"
        if c is None:
            return None
        parts.append(f"{name}={c}")
    names: set[str] = set()
    stack = [fn.__code__]
    while stack:  # the globals the function and its nested functions read
        co = stack.pop()
        names.update(co.co_names)
        stack.extend(c for c in co.co_consts if isinstance(c, _pytypes.CodeType))
    for name in sorted(names):
        if name in fn.__globals__:
            if (c := _value_content(fn.__globals__[name], seen)) is None:
                return None
            parts.append(f"{name}={c}")
    return "\n".join(parts)


def _make_source(
    code: Any, lang: str, name: Any, options: Any, headers: Any, name_expressions: Any, meta: Any
) -> Source:
    return Source(code, lang, name, options, headers, name_expressions, meta)
