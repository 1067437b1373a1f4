"""Plugin code cannot hang, exit or corrupt the caller (issue #17): imports and probes run
under a deadline, SystemExit/KeyboardInterrupt from a plugin are reported, prints go to stderr."""

from __future__ import annotations

import os
import threading
import time

import kernelbay as kb
import pytest
from kernelbay._plugins import runtime

from .conftest import FakeBackend

_release = threading.Event()


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch):
    # Long enough for the quick fakes' probes on a loaded machine; the hanging ones wait 60 s.
    monkeypatch.setenv("KERNELBAY_PLUGIN_TIMEOUT", "3")
    yield
    _release.set()  # let any hung probe thread of the test finish
    _release.clear()


class HangingProbe(FakeBackend):
    @kb.hookimpl
    def kernelbay_devices(self):
        _release.wait(60)
        return []


class ExitingProbe(FakeBackend):
    def __init__(self, exc, **kw):
        super().__init__(**kw)
        self.exc = exc

    @kb.hookimpl
    def kernelbay_devices(self):
        raise self.exc


class PrintingProbe(FakeBackend):
    @kb.hookimpl
    def kernelbay_devices(self):
        print("hello from the probe")
        return super().kernelbay_devices()


def test_a_hanging_probe_is_left_out_after_the_deadline(add_backend):
    add_backend(HangingProbe("slow", priority=90))
    add_backend(FakeBackend("ok", priority=10))
    t0 = time.monotonic()
    assert kb.device() == kb.Device("ok", 0)
    rec = {b.name: b for b in kb.backends()}["slow"]
    assert rec.status == "unavailable"
    assert "its probe did not answer within 3 s" in rec.reason and "KERNELBAY_PLUGIN_TIMEOUT" in rec.reason
    assert time.monotonic() - t0 < 50  # the deadline, not the probe's 60 s


def test_a_hanging_import_is_left_out_after_the_deadline(add_backend):
    rec = add_backend(FakeBackend("ok", priority=10)) and runtime.add_backend(None, "hangs", "kernelbay-hangs")
    rec._load = lambda: _release.wait(60)
    assert kb.device() == kb.Device("ok", 0)
    hangs = {b.name: b for b in kb.backends()}["hangs"]
    assert hangs.status == "broken" and "did not answer within 3 s" in hangs.reason


@pytest.mark.parametrize("exc", [SystemExit(7), KeyboardInterrupt(), SystemExit("bye")])
def test_system_exit_and_keyboard_interrupt_from_a_probe_are_reported(add_backend, exc):
    add_backend(ExitingProbe(exc, name="quits", priority=90))
    add_backend(FakeBackend("ok", priority=10))
    assert kb.device() == kb.Device("ok", 0)
    rec = {b.name: b for b in kb.backends()}["quits"]
    assert rec.status == "broken" and type(exc).__name__ in rec.reason


def test_system_exit_on_import_is_reported(add_backend):
    add_backend(FakeBackend("ok", priority=10))
    rec = runtime.add_backend(None, "exits", "kernelbay-exits")

    def load():
        raise SystemExit(3)

    rec._load = load
    assert kb.device() == kb.Device("ok", 0)
    assert "SystemExit(3)" in {b.name: b for b in kb.backends()}["exits"].reason


def test_a_probe_that_prints_writes_to_stderr_not_stdout(add_backend, capsys):
    add_backend(PrintingProbe("chatty"))
    print("before")
    assert kb.device("chatty") == kb.Device("chatty", 0)
    print("after")
    out, err = capsys.readouterr()
    assert out == "before\nafter\n" and "hello from the probe" in err


def test_a_bad_setting_in_a_probe_says_which_setting_not_reinstall(add_backend):
    class BadSetting(FakeBackend):
        @kb.hookimpl
        def kernelbay_devices(self):
            raise kb.SettingError("KERNELBAY_FAKE_THREADS='abc' is not a whole number")

    add_backend(BadSetting("conf"))
    with pytest.raises(kb.BackendUnavailableError, match="KERNELBAY_FAKE_THREADS") as ei:
        kb.device("conf")
    assert "einstall" not in str(ei.value).split("\n")[0]


@pytest.mark.parametrize("raw", ["abc", "-1", "nan", "1e9"])
def test_the_deadline_setting_is_checked(monkeypatch, raw):
    from kernelbay._isolate import deadline

    monkeypatch.setenv("KERNELBAY_PLUGIN_TIMEOUT", raw)
    with pytest.raises(kb.SettingError, match="KERNELBAY_PLUGIN_TIMEOUT"):
        deadline()


def test_a_real_ctrl_c_still_interrupts_the_wait(add_backend, monkeypatch):
    import signal

    class InterruptedProbe(FakeBackend):
        @kb.hookimpl
        def kernelbay_devices(self):
            # Ctrl-C once the caller is surely waiting on this probe (no timer guessing when).
            os.kill(os.getpid(), signal.SIGINT)
            _release.wait(60)
            return []

    monkeypatch.setenv("KERNELBAY_PLUGIN_TIMEOUT", "120")
    add_backend(InterruptedProbe("slow"))
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        kb.device("slow")
    assert time.monotonic() - t0 < 50  # at once, not after the probe's 60 s or the 120 s deadline


def test_the_default_deadline_grows_with_the_load(monkeypatch):
    from kernelbay import _isolate

    monkeypatch.delenv("KERNELBAY_PLUGIN_TIMEOUT")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    monkeypatch.setattr(_isolate.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert _isolate.deadline() == _isolate.DEFAULT_TIMEOUT == 30.0
    monkeypatch.setattr(_isolate.os, "getloadavg", lambda: (2.0 * cpus, 0.0, 0.0))
    assert _isolate.deadline() == 60.0  # twice as many runnable processes as cores
    monkeypatch.setattr(_isolate.os, "getloadavg", lambda: (1000.0 * cpus, 0.0, 0.0))
    assert _isolate.deadline() == _isolate.MAX_DEFAULT_TIMEOUT
    monkeypatch.setenv("KERNELBAY_PLUGIN_TIMEOUT", "7")
    assert _isolate.deadline() == 7.0  # a setting is taken as given
