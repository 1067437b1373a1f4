"""uv.lock agrees with the pyprojects: `make` installs from it (uv sync --locked, or pip with its pins)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("uvlock", ROOT / "tools" / "uvlock.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _copy_workspace(dst: Path) -> None:
    for rel in ["pyproject.toml", "uv.lock", *(str(p.relative_to(ROOT)) for p in ROOT.glob("*/pyproject.toml"))]:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, dst / rel)
    for p in [*ROOT.glob("plugins/*/pyproject.toml"), *ROOT.glob("examples/plugins/*/pyproject.toml")]:
        rel = p.relative_to(ROOT)
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dst / rel)


def test_the_lock_agrees_with_the_pyprojects() -> None:
    assert _tool().check(ROOT) == [], "uv.lock is stale: run `uv lock` and commit it"


@pytest.mark.parametrize(
    ("path", "old", "new", "named"),
    [
        ("core/pyproject.toml", '"pluggy>=1.5"', '"pluggy>=1.6"', "core/pyproject.toml: pluggy>=1.6 is not in uv.lock"),
        (
            "core/pyproject.toml",
            'nvtx = ["nvtx>=0.2"]',
            'nvtx = ["nvtx>=0.2"]\nextra2 = ["rich"]',
            "rich; extra == 'extra2'",
        ),
        (
            "plugins/cpu/pyproject.toml",
            "dependencies = [",
            'dependencies = ["rich", ',
            "plugins/cpu/pyproject.toml: rich",
        ),
        ("pyproject.toml", '"ruff==0.17.6"', '"ruff==0.17.7"', "dependency group 'dev': ruff==0.17.7 differs"),
    ],
)
def test_a_disagreement_is_found_and_named(tmp_path, path, old, new, named) -> None:
    _copy_workspace(tmp_path)
    f = tmp_path / path
    text = f.read_text()
    assert old in text, f"{path} changed: update this test's edit"
    f.write_text(text.replace(old, new, 1))
    problems = _tool().check(tmp_path)
    assert any(named in p for p in problems), problems


def test_the_command_fails_on_a_stale_lock(tmp_path) -> None:
    _copy_workspace(tmp_path)
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "uvlock.py", tmp_path / "tools" / "uvlock.py")
    f = tmp_path / "core" / "pyproject.toml"
    f.write_text(f.read_text().replace('"attrs>=23.1"', '"attrs>=24"'))
    r = subprocess.run([sys.executable, str(tmp_path / "tools" / "uvlock.py"), "check"], capture_output=True, text=True)
    assert r.returncode == 1 and "attrs>=24 is not in uv.lock" in r.stderr and "uv lock" in r.stderr


def test_pins_for_this_interpreter() -> None:
    pins = _tool().constraints(ROOT)
    by = dict(p.split("==") for p in pins if not p.startswith("#"))
    assert not any(p.startswith("# numpy") for p in pins)  # two numpy versions, told apart by the Python
    assert "pluggy" in by and "ruff" in by and "kernelbay" not in by  # members come from the checkout
    assert any(p.startswith("# cuda-bindings:") for p in pins)  # 12 and 13: the extra decides


@pytest.mark.skipif(
    shutil.which("uv") is None and not (Path(sys.prefix) / "bin" / "uv").exists(),
    reason="uv is not installed (make bootstraps it into .venv where it can): tools/uvlock.py check stands in",
)
def test_uv_itself_finds_the_lock_current() -> None:
    uv = str(Path(sys.prefix) / "bin" / "uv") if (Path(sys.prefix) / "bin" / "uv").exists() else shutil.which("uv")
    r = subprocess.run([uv, "lock", "--check", "--offline"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr


def test_the_makefile_pip_path_installs_the_dev_group() -> None:
    """Without uv, `make test` installs TEST_DEPS with pip: the same list as the dev group uv syncs."""
    import re
    import tomllib

    text = (ROOT / "Makefile").read_text()
    m = re.search(r"^TEST_DEPS\s*:=\s*(.*)$", text, re.M)
    assert m is not None
    make_deps = sorted(re.findall(r'"([^"]+)"', m.group(1)))
    dev = sorted(tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["dev"])
    assert make_deps == dev
