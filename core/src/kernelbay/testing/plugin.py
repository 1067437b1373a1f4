"""pytest plugin: device requirements that skip where the device is absent, or fail if required.

Registered through the ``pytest11`` entry point, so any project with kernelbay installed has:

* ``--kernelbay-require=NAMES`` (or ``KERNELBAY_REQUIRE=NAMES``): comma-separated backend
  names whose tests must run; a test that would skip for lack of one of them fails instead.
* the marker ``@pytest.mark.kernelbay_device("cuda")`` and the function
  :func:`require_device` for fixtures.
"""

from __future__ import annotations

import os

import pytest

ENV_REQUIRE = "KERNELBAY_REQUIRE"
_required: set[str] = set()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernelbay")
    group.addoption(
        "--kernelbay-require",
        default=None,
        metavar="NAMES",
        help="comma-separated kernelbay backends whose device tests must run: a skip for a "
        f"missing device becomes a failure (also ${ENV_REQUIRE})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kernelbay_device(name): needs an available device of backend `name` (skips otherwise)"
    )
    raw = config.getoption("--kernelbay-require") or os.environ.get(ENV_REQUIRE, "")
    _required.clear()
    _required.update(n.strip() for n in raw.split(",") if n.strip())


def required_backends() -> set[str]:
    """Backends whose tests must not skip in this run."""
    if not _required:
        raw = os.environ.get(ENV_REQUIRE, "")
        return {n.strip() for n in raw.split(",") if n.strip()}
    return set(_required)


def require_device(backend: str, index: int = 0, *, strict: bool = False):
    """The device ``backend:index``; skips the test if it is not available here, or fails it
    when ``backend`` is required (``--kernelbay-require``).

    With ``strict`` (the conformance suite's choice) a backend that is broken or not installed
    fails the test with its whole reason, flag or no flag: only "no device here" may skip."""
    import kernelbay as kb

    try:
        return kb.device(f"{backend}:{index}")
    except kb.BackendError as exc:
        reason = str(exc)
        if strict and isinstance(exc, (kb.BackendBrokenError, kb.BackendNotInstalledError)):
            pytest.fail(f"backend {backend!r} cannot be tested: {reason}", pytrace=False)
        if backend in required_backends():
            pytest.fail(f"{backend} is required (--kernelbay-require) but not usable here: {reason}", pytrace=False)
        pytest.skip(f"no {backend} device: {reason}")


def reprobe(backend: str) -> None:
    """Make the core forget ``backend``'s probe result, so the next request probes it again.

    For tests (and long-lived processes) whose environment changed after the first probe: a
    driver installed, an interpret-mode flag set. Devices already handed out stay valid.
    """
    # The runtime is the core's private state; this is its one public door for tests.
    from kernelbay._plugins import runtime

    runtime.reprobe(backend)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("kernelbay_device"):
        require_device(*mark.args, **mark.kwargs)
