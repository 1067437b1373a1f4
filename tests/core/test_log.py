"""KERNELBAY_LOG: the logging switch, and its refusal of malformed values."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from kernelbay import _log
from kernelbay.errors import InvalidArgumentError


def test_parse_default_and_per_logger_levels() -> None:
    assert _log.parse("info") == {"": logging.INFO}
    assert _log.parse("warning, cache=debug, kernelbay.cpu=info") == {
        "": logging.WARNING,
        "cache": logging.DEBUG,
        "cpu": logging.INFO,
    }


@pytest.mark.parametrize("bad", ["verbose", "cache=loud", "=debug", "1", "a b=info"])
def test_malformed_values_name_the_variable_and_the_form(bad: str) -> None:
    with pytest.raises(ValueError, match=r"KERNELBAY_LOG=.*use one of debug, info"):
        _log.parse(bad)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    e = {k: v for k, v in os.environ.items() if not k.startswith("KERNELBAY_")}
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=600)


def test_kernelbay_log_sends_records_to_stderr() -> None:
    r = _run("import kernelbay._log as l; l.get('cache').debug('hello from the cache')", KERNELBAY_LOG="cache=debug")
    assert r.returncode == 0, r.stderr
    assert "kernelbay.cache DEBUG: hello from the cache" in r.stderr


def test_silent_by_default() -> None:
    r = _run("import kernelbay._log as l; l.get('cache').warning('nobody asked')")
    assert r.returncode == 0 and r.stderr == ""


def test_a_malformed_value_is_an_error_on_use_not_on_import() -> None:
    r = _run(
        "import kernelbay, kernelbay._log as l\ntry:\n l.check()\nexcept kernelbay.InvalidArgumentError as e: print(e)",
        KERNELBAY_LOG="loud",
    )
    assert r.returncode == 0, r.stderr
    assert "KERNELBAY_LOG='loud'" in r.stdout


def test_check_raises_the_kernelbay_error(monkeypatch) -> None:
    monkeypatch.setattr(_log, "_error", ["KERNELBAY_LOG='x': bad"])
    with pytest.raises(InvalidArgumentError, match="KERNELBAY_LOG"):
        _log.check()
