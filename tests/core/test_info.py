"""``kernelbay info``: the environment report (versions, driver, cache, native helpers), exit codes, logging."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from kernelbay import _envinfo, cli, native

from .conftest import FakeBackend


def test_info_json_reports_the_environment(add_backend, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "c"))
    add_backend(FakeBackend("fast", priority=90))
    native.register_status("_kb_info_test", lambda: "python (no C compiler found)")
    try:
        assert cli.main(["info", "--json"]) == 0
    finally:
        native._status_fns.pop("_kb_info_test")
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == _envinfo.SCHEMA_VERSION
    assert data["system"]["python"] == data["python"] and data["system"]["os"]
    assert data["packages"]["kernelbay"] == data["kernelbay"]
    import numpy

    assert data["packages"]["numpy"] == numpy.__version__
    assert set(data["nvidia_driver"]) == {"release", "cuda", "error"}
    assert data["cache"]["directory"] == str(tmp_path / "c") and data["cache"]["usable"] is True
    assert data["native_helpers"]["_kb_info_test"] == "python (no C compiler found)"


def test_info_text_says_when_the_cache_is_unusable(add_backend, capsys, tmp_path, monkeypatch):
    bad = tmp_path / "open"
    bad.mkdir()
    bad.chmod(0o777)
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(bad))
    add_backend(FakeBackend("fast"))
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "cache:" in out and "NOT USABLE" in out and "writable by group and others" in out
    assert "nvidia driver:" in out and "python:" in out
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "usable:    NO" in out and "owner ok:  NO (refused)" in out


def test_driver_version_without_a_driver_is_a_reason_not_an_error(monkeypatch):
    import ctypes

    def nolib(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", nolib)
    got = _envinfo.nvidia_driver()
    assert got["cuda"] is None and "libcuda.so.1" in got["error"]


def test_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit codes: 0 success; 1 error" in out and "130 interrupted" in out


def test_malformed_kernelbay_log_is_a_clear_error():
    r = subprocess.run(
        [sys.executable, "-m", "kernelbay", "info"],
        # PYTHONPATH carried: where the packages are installed with --target (the GPU machine)
        env={"KERNELBAY_LOG": "verbose", "PATH": "/usr/bin:/bin"}
        | ({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == cli.EXIT_ERROR
    assert r.stderr.startswith("kernelbay: error: KERNELBAY_LOG='verbose'")


def test_probe_and_choice_are_logged(add_backend, caplog):
    import kernelbay as kb

    add_backend(FakeBackend("fast"))
    with caplog.at_level(logging.INFO, logger="kernelbay"):
        kb.device("fast")
    text = caplog.text
    assert "fast: probe found 1 device(s)" in text
    assert "device fast:0" in text and "chosen for selector 'fast'" in text


def test_info_prints_a_broken_backends_whole_reason(capsys):
    """A plugin's SyntaxError: the traceback's last line, "SyntaxError: expected ':'", is printed,
    and the default-device error below keeps it too."""
    from kernelbay._discovery import Backend
    from kernelbay._plugins import runtime

    def load():
        exec(compile("def kernelbay_backend()\n    pass\n", "plugin.py", "exec"), {})

    runtime._extra["typo"] = Backend("typo", "kernelbay-typo", "1.0", "kernelbay_typo.plugin", load=load)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    section = out.split("default device:")
    assert "SyntaxError: expected ':'" in section[0], out
    assert "SyntaxError: expected ':'" in section[1], out
