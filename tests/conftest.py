"""Shared fixtures. Backend-specific fixtures live beside their tests."""

from __future__ import annotations

import signal
import warnings

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # A run started as a background job of a non-interactive shell (`make test &`, nohup, some CI
    # runners) inherits SIGINT ignored, and so does every child it starts: the Ctrl-C tests (in
    # this process and in the children they interrupt) then wait for a Ctrl-C that never comes,
    # until their hang timeouts. Give the run the Ctrl-C a terminal has, and say so.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        warnings.warn(
            "kernelbay tests: SIGINT was ignored (a background job of a non-interactive shell); "
            "Python's Ctrl-C handler is restored for this run and its children",
            stacklevel=1,
        )
