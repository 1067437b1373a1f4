"""The contract's labels agree: hook versions, distribution versions, pins and api_version literals (issue #28)."""

from __future__ import annotations

import re
from pathlib import Path

import kernelbay as kb
from kernelbay import hookspecs

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = sorted(
    p
    for p in [*ROOT.glob("plugins/*/src/*/plugin.py"), *ROOT.glob("examples/plugins/*/src/*/plugin.py")]
    if "kernelbay_broken" not in str(p)
)


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def test_every_hook_says_when_it_was_added_and_no_later_than_this_core() -> None:
    core = _minor(kb.__version__)
    for name in (n for n in vars(hookspecs) if n.startswith("kernelbay_")):
        doc = getattr(hookspecs, name).__doc__ or ""
        added = re.findall(r"\.\. versionadded:: (\S+)", doc)
        assert len(added) == 1, f"{name}: one `.. versionadded::` expected, found {added}"
        assert _minor(added[0]) <= core, f"{name} says it was added in {added[0]}, but this core is {kb.__version__}"


def test_every_distribution_has_the_cores_version_and_pins_its_minor() -> None:
    major, minor = _minor(kb.__version__)
    pin = f"kernelbay>={major}.{minor},<{major}.{minor + 1}"
    for init in [*ROOT.glob("plugins/*/src/*/__init__.py"), *ROOT.glob("examples/plugins/*/src/*/__init__.py")]:
        text = init.read_text(encoding="utf-8")
        assert f'__version__ = "{kb.__version__}"' in text, f"{init.relative_to(ROOT)}: not {kb.__version__}"
    for toml in [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("examples/plugins/*/pyproject.toml")]:
        deps = re.findall(r'"kernelbay(?:\[[^\]]*\])?[<>=!~][^"]*"', toml.read_text(encoding="utf-8"))
        assert deps and all(pin in d for d in deps), f"{toml.relative_to(ROOT)}: {deps}, expected {pin}"
    core = (ROOT / "core" / "pyproject.toml").read_text(encoding="utf-8")
    extras = re.findall(r'"kernelbay-\w+(?:\[[^\]]*\])?([<>=][^"]*)"', core)
    assert extras and all(e == f">={major}.{minor},<{major}.{minor + 1}" for e in extras), extras
    guide = (ROOT / "docs" / "authoring-a-backend.md").read_text(encoding="utf-8")
    assert f'"{pin}"' in guide


def test_api_version_is_a_literal_in_every_plugin_and_the_guide() -> None:
    """``api_version=kb.API_VERSION`` compares the core with itself: the check could never fire."""
    assert PLUGINS
    for p in PLUGINS:
        text = p.read_text(encoding="utf-8")
        assert re.search(r"api_version=\d+", text), f"{p.relative_to(ROOT)}: api_version must be a literal"
        assert "API_VERSION" not in text, f"{p.relative_to(ROOT)} reads the core's API_VERSION"
    guide = (ROOT / "docs" / "authoring-a-backend.md").read_text(encoding="utf-8")
    assert re.search(r"api_version=\d+", guide) and "api_version=kb.API_VERSION" not in guide
