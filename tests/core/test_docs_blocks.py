"""Every code block in README.md, docs/ and the backends' READMEs is labelled, and the Python ones run.

A block's fence info string says what it is and how this test treats it:

* ``python``: run on the cpu backend (``KERNELBAY_DEVICE=cpu``), after the file's earlier
  ``python`` blocks, as a reader would type them one after the other; it must exit 0.
* ``python needs=torch,cupy``: the same, skipped (naming the missing module) where one of those
  optional dependencies is not installed.
* ``python gpu``: needs a CUDA device: run where ``kb.device("cuda")`` finds one, else skipped
  with that reason. Checked for syntax everywhere.
* ``python KERNELBAY_TPU_INTERPRET=1``: words of the form ``NAME=value`` are set in the
  environment the block runs in (the tpu backend's interpret mode, for a machine with no TPU).
* ``python fragment``: a piece of a larger file (a plugin module shown part by part): checked
  for syntax, not run.
* ``toml`` and ``json``: parsed. ``bash``, ``sh``, ``console``, ``text``, ``c++``, ``cuda``:
  shown, not run (shell commands change the machine: ``make test`` is itself what runs them).

A block with no info string fails: say what it is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
FILES += sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("plugins/*/README.md"))
SHOWN = {"bash", "sh", "console", "text", "c++", "cpp", "cuda", "c", "diff", "ini", "yaml"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")


def blocks(path: str) -> list[tuple[int, str, str]]:
    """``(line, info, code)`` of each fenced block of ``path``."""
    out = []
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = m.groups()
        body = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        out.append((i + 1, info.strip(), "\n".join(body) + "\n"))
        i = j + 1
    return out


CASES = [(f, line, info, code) for f in FILES for line, info, code in blocks(f)]


def _python_blocks_before(path: str, line: int) -> list[str]:
    """The code of ``path``'s runnable python blocks up to ``line``: the reader's session so far."""
    return [code for ln, code in _reader_blocks(path) if ln <= line]


def _runs(info: str) -> bool:
    words = info.split()[1:]
    return "fragment" not in words and "gpu" not in words


def _needs(info: str) -> list[str]:
    return [m for w in info.split()[1:] if w.startswith("needs=") for m in w[6:].split(",") if m]


def _has_cuda() -> bool:
    import kernelbay as kb

    try:
        kb.device("cuda")
    except kb.KernelbayError:
        return False
    return True


def _reader_env() -> dict[str, str]:
    """A reader's environment: no KERNELBAY_* settings of the test session (the disk cache's aside)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("KERNELBAY_") or k == "KERNELBAY_CACHE_DIR"}


# One file's blocks run on one xdist worker: its reader's session (_session) runs once, not once per worker.
@pytest.mark.parametrize(
    ("path", "line", "info", "code"),
    [pytest.param(*c, id=f"{c[0]}:{c[1]}", marks=pytest.mark.xdist_group(f"docs:{c[0]}")) for c in CASES],
)
def test_block(path: str, line: int, info: str, code: str, tmp_path, tmp_path_factory) -> None:
    kind = info.split()[0] if info else ""
    if not kind:
        pytest.fail(f"{path}:{line}: a code block without an info string: label it (python, bash, toml, text...)")
    if kind == "toml":
        tomllib.loads(code)
        return
    if kind == "json":
        json.loads(code)
        return
    if kind in SHOWN:
        return
    assert kind == "python", f"{path}:{line}: unknown block kind {kind!r}; {__doc__}"
    compile(code, f"{path}:{line}", "exec")  # every python block is at least valid Python
    words = info.split()[1:]
    if "fragment" in words:
        return
    missing = [m for m in _needs(info) if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{path}:{line} needs the optional {', '.join(missing)}, not installed")
    if "gpu" in words:
        if not _has_cuda():
            pytest.skip(f"{path}:{line} needs a CUDA device; none here")
        (tmp_path / "docs_blocks.py").write_text(code, encoding="utf-8")
        r = _run_script(tmp_path, _reader_env())
        assert r.returncode == 0, f"{path}:{line} failed:\n{textwrap.indent(code, '    ')}\n{r.stderr[-3000:]}"
        return
    settings = _settings(info)
    returncode, reached, stderr = _session(path, settings, tmp_path_factory)
    script = "\n".join(_python_blocks_before(path, line))
    last = line == max(ln for ln, _ in _session_blocks(path, settings))
    ok = line in reached and (returncode == 0 or not last)
    assert ok, f"{path}:{line} failed:\n{textwrap.indent(script, '    ')}\n{stderr[-3000:]}"


def _run_script(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # A script file, as a reader runs it (spawned workers, as kb.tune's, re-import the main file).
    return subprocess.run(
        [sys.executable, "docs_blocks.py"], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _session_blocks(path: str, settings: tuple[str, ...]) -> list[tuple[int, str]]:
    """``(line, code)`` of ``path``'s runnable python blocks, up to its last one run with ``settings``."""
    mine = [ln for ln, info, _ in blocks(path) if info.split()[:1] == ["python"] and _settings(info) == settings]
    return [(ln, code) for ln, code in _reader_blocks(path) if ln <= max(mine)]


def _reader_blocks(path: str) -> list[tuple[int, str]]:
    """``(line, code)`` of ``path``'s python blocks that run here (not fragments, gpu or missing needs)."""
    return [
        (ln, code)
        for ln, info, code in blocks(path)
        if info.split()[:1] == ["python"] and _runs(info) and all(importlib.util.find_spec(m) for m in _needs(info))
    ]


def _settings(info: str) -> tuple[str, ...]:
    return tuple(w for w in info.split()[1:] if re.match(r"[A-Z_][A-Z0-9_]*=", w))


_SESSIONS: dict[tuple[str, tuple[str, ...]], tuple[int, set[int], str]] = {}
_MARK = "kb-docs-block-done"


def _session(path: str, settings: tuple[str, ...], factory: pytest.TempPathFactory) -> tuple[int, set[int], str]:
    """A reader's whole session with ``path``: its python blocks in one script, once per test run.

    Block N's own run would be blocks 1..N in a fresh process under N's settings; one script of
    every block up to the last with the same settings, marking each block's end on stderr, is
    that run for each of them (a fresh interpreter per block cost seconds and repeated every
    earlier block). ``(returncode, lines of the blocks that ended, stderr)``.
    """
    key = (path, settings)
    if key not in _SESSIONS:
        parts = []
        for ln, code in _session_blocks(path, settings):
            parts.append(code)
            # Only the reader's process marks: spawned workers re-import this file as __mp_main__.
            parts.append(
                f"if __name__ == '__main__':\n    print({_MARK!r}, {ln}, file=__import__('sys').stderr, flush=True)\n"
            )
        cwd = factory.mktemp("docs_blocks")
        (cwd / "docs_blocks.py").write_text("\n".join(parts), encoding="utf-8")
        env = dict(_reader_env(), KERNELBAY_DEVICE="cpu")
        env.update(w.split("=", 1) for w in settings)
        r = _run_script(cwd, env)
        reached = {int(m) for m in re.findall(rf"^{_MARK} (\d+)$", r.stderr, re.M)}
        _SESSIONS[key] = (r.returncode, reached, r.stderr)
    return _SESSIONS[key]
