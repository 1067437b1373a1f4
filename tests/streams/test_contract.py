"""hookspecs.py is the whole contract: every spec says what it is and documents its arguments."""

from __future__ import annotations

import inspect

import pytest
from kernelbay import _plugins, fallbacks, hookspecs

SPECS = [n for n in vars(hookspecs) if n.startswith("kernelbay_")]


@pytest.mark.parametrize("name", SPECS)
def test_every_spec_says_what_it_is(name: str) -> None:
    fn = getattr(hookspecs, name)
    doc = inspect.getdoc(fn) or ""
    assert doc.startswith(("*Required", "*Optional")), f"{name}: say Required or Optional first"
    assert (name in hookspecs.REQUIRED_HOOKS) == doc.startswith("*Required"), name
    if doc.startswith("*Optional"):
        assert "fallback" in doc or "Backends without it" in doc, f"{name}: name the fallback"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"{name}: document {param}"
    assert ".. versionadded::" in doc, name


def test_new_optional_hooks_have_a_fallback() -> None:
    for name in SPECS:
        if name.startswith(("kernelbay_stream", "kernelbay_event", "kernelbay_graph", "kernelbay_default_stream")):
            assert name in fallbacks.OPTIONAL, name
    assert "kernelbay_kernel_access" in fallbacks.OPTIONAL


def test_the_core_requires_what_the_contract_says() -> None:
    assert _plugins.REQUIRED_HOOKS == hookspecs.REQUIRED_HOOKS
    assert not hasattr(hookspecs, "HOT_HOOKS")
