"""Fresh virtual environments with real installs, driven through subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _uv() -> str | None:
    cand = Path(sys.executable).parent / "uv"
    return str(cand) if cand.exists() else shutil.which("uv")


class Venv:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.python = str(path / "bin" / "python")
        self.bin = path / "bin"

    def run(self, *args: str, env: dict[str, str] | None = None, check: bool = False) -> subprocess.CompletedProcess:
        e = {k: v for k, v in os.environ.items() if not k.startswith("KERNELBAY_")}
        e.update(env or {})
        return subprocess.run(list(args), capture_output=True, text=True, env=e, check=check, timeout=600)

    def py(self, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.run(self.python, "-c", textwrap.dedent(code), env=env)

    def kernelbay(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return self.run(str(self.bin / "kernelbay"), *args, env=env)


def make_venv(path: Path, *packages: str) -> Venv:
    uv = _uv()
    if uv:
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(path)], check=True, capture_output=True)
        cmd = [uv, "pip", "install", "-q", "--python", str(path / "bin" / "python"), *packages]
        # Offline first: the outer install filled uv's cache with every dependency.
        if subprocess.run([*cmd, "--offline"], capture_output=True).returncode != 0:
            subprocess.run(cmd, check=True, capture_output=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "-q", *packages], check=True)
    return Venv(path)


def _pyproject(name: str) -> str:
    """A backend package ``kernelbay-<name>`` whose entry point is ``kb_<name>.plugin``."""
    return f"""
        [build-system]
        requires = ["hatchling"]
        build-backend = "hatchling.build"
        [project]
        name = "kernelbay-{name}"
        version = "0.0.1"
        [project.entry-points."kernelbay.backends"]
        {name} = "kb_{name}.plugin"
        [tool.hatch.build.targets.wheel]
        packages = ["kb_{name}"]
    """


BROKEN_IMPORT = {
    "pyproject.toml": _pyproject("brokenimport"),
    "kb_brokenimport/__init__.py": "",
    "kb_brokenimport/plugin.py": "import kernelbay_dependency_that_does_not_exist\n",
}

BROKEN_SIGNATURE = {
    "pyproject.toml": _pyproject("brokensig"),
    "kb_brokensig/__init__.py": "",
    "kb_brokensig/plugin.py": """
        import kernelbay as kb
        from kernelbay import hookimpl

        @hookimpl
        def kernelbay_backend():
            return kb.BackendSpec("brokensig", 999, ("python",), kb.API_VERSION)

        @hookimpl
        def kernelbay_allocate(device, nbytes, alignment):  # not in the spec
            return bytearray(nbytes)
    """,
}


def write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    return root


@pytest.fixture(scope="session")
def core_only(tmp_path_factory) -> Venv:
    return make_venv(tmp_path_factory.mktemp("core-only") / "venv", str(ROOT / "core"))


@pytest.fixture(scope="session")
def with_plugins(tmp_path_factory) -> Venv:
    src = tmp_path_factory.mktemp("pkgs")
    bi = write_package(src / "brokenimport", BROKEN_IMPORT)
    bs = write_package(src / "brokensig", BROKEN_SIGNATURE)
    return make_venv(
        tmp_path_factory.mktemp("plugins") / "venv",
        str(ROOT / "core"),
        str(ROOT / "examples" / "plugins" / "kernelbay-pyref"),
        str(bi),
        str(bs),
    )


@pytest.fixture(scope="session")
def venv_factory(tmp_path_factory):
    """``make(label, *packages) -> Venv``: a fresh virtual environment with those installs."""

    def make(label: str, *packages: str) -> Venv:
        return make_venv(tmp_path_factory.mktemp(label) / "venv", *packages)

    return make
