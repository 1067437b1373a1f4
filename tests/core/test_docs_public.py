"""Every public name (``kernelbay.__all__``) and each public method and property of its classes has a docstring."""

from __future__ import annotations

import inspect

import attrs
import kernelbay as kb

VALUES = {"API_VERSION", "__version__", "hookimpl"}  # constants and the pluggy marker: documented in the API page


def _public() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for name in kb.__all__:
        if name in VALUES:
            continue
        obj = getattr(kb, name)
        out.append((name, obj))
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            fields = {f.name for f in attrs.fields(obj)} if attrs.has(obj) else set()  # in the class docstring
            for member, v in vars(obj).items():
                if member.startswith("_") or member in fields:
                    continue
                if isinstance(v, (staticmethod, classmethod)):
                    v = v.__func__
                if inspect.isfunction(v) or isinstance(v, property):
                    out.append((f"{name}.{member}", v))
    return out


def test_every_public_name_has_a_docstring() -> None:
    names = _public()
    missing = [n for n, obj in names if not (getattr(obj, "__doc__", None) or "").strip()]
    assert len(names) > 80 and not missing, f"{len(missing)} of {len(names)} public names lack a docstring: {missing}"
