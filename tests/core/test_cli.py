import json

import pytest
from kernelbay import cli

from .conftest import FakeBackend, UnavailableBackend


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for word in ("info", "demo", "cache", "KERNELBAY_DEVICE"):
        assert word in out


def test_info_json(add_backend, capsys):
    add_backend(FakeBackend("fast", priority=90))
    add_backend(UnavailableBackend("gone", priority=99))
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by = {b["name"]: b for b in data["backends"]}
    assert by["fast"]["status"] == "available" and by["fast"]["devices"][0]["device"] == "fast:0"
    assert by["gone"]["status"] == "unavailable" and "no fake chip" in by["gone"]["reason"]
    assert data["default_device"] == "fast:0"


def test_info_text(add_backend, capsys):
    add_backend(UnavailableBackend("gone"))
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "gone" in out and "unavailable" in out and "default device: none" in out


def test_user_error_is_one_clear_line(add_backend, capsys, monkeypatch):
    add_backend(FakeBackend("fast"))
    monkeypatch.setenv("KERNELBAY_DEVICE", "nosuch")
    assert cli.main(["demo"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kernelbay: error: backend 'nosuch' is not installed")
    assert "Traceback" not in err


def test_demo_runs_on_a_python_backend(add_backend, capsys):
    plugin = pytest.importorskip("kernelbay_pyref.plugin", reason="examples/plugins/kernelbay-pyref is not installed")

    add_backend(plugin, "pyref")
    assert cli.main(["demo", "--device", "pyref"]) == 0
    out = capsys.readouterr().out
    assert "pyref:0" in out and "matches numpy: OK" in out


def test_cache_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path))
    assert cli.main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["directory"] == str(tmp_path)
    assert cli.main(["cache", "clear"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
