"""Shared fixtures and the run's set-up. Backend-specific fixtures live beside their tests.

`make test` runs the suite on two processes (pytest-xdist, ``-n 2 --dist loadgroup``). Each test
runs in one worker process, so what a test does to its own process (environment variables,
signal handlers, the default device, the current directory) stays in that worker, as it does
in a serial run; the Ctrl-C tests interrupt their own process or a child of it, and the
process and thread counts some tests take are of their own process. What the workers do share
is the disk: the compile cache (which takes concurrent processes: ``tests/core/test_cache.py``)
and the source tree. :func:`pytest_collection_modifyitems` keeps on one worker the tests that
share more than that: see :func:`_xdist_group`.
"""

from __future__ import annotations

import signal
import warnings

import pytest

# Tests that write into the source tree: `pip wheel` and installs of plugins/cuda (setuptools)
# build in plugins/cuda/build, which two builds at once would trample.
_SOURCE_TREE_BUILDS = {
    "tests/integration/test_cuda_wheel.py",
    "tests/integration/test_cuda_variants.py",
}


def pytest_configure(config: pytest.Config) -> None:
    # A run started as a background job of a non-interactive shell (`make test &`, nohup, some CI
    # runners) inherits SIGINT ignored, and so does every child it starts: the Ctrl-C tests (in
    # this process and in the children they interrupt) then wait for a Ctrl-C that never comes,
    # until their hang timeouts. Give the run the Ctrl-C a terminal has, and say so (once: the
    # xdist workers inherit the restored handler from the run that started them).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        warnings.warn(
            "kernelbay tests: SIGINT was ignored (a background job of a non-interactive shell); "
            "Python's Ctrl-C handler is restored for this run and its children",
            stacklevel=1,
        )
    # Registered here too, so that a test file may name a group with --strict-markers in a run
    # without pytest-xdist.
    config.addinivalue_line("markers", "xdist_group(name): run on the same xdist worker as the group's other tests")


def _xdist_group(item: pytest.Item) -> str | None:
    """The worker group of ``item``: tests that would otherwise repeat or trample shared work.

    * a test that uses a fixture of module, class, package or session scope defined in these
      tests (a compiled kernel, a warm cache, a virtual environment) runs beside the rest of its
      module, so that the fixture is made once, not once per worker;
    * the tests that build plugins/cuda from the source tree run one after another.
    """
    path = item.nodeid.split("::", 1)[0]
    if path in _SOURCE_TREE_BUILDS:
        return "plugins-cuda-build"
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        fd = defs[-1]
        if fd.scope != "function" and fd.baseid:  # baseid "": pytest's own or a plugin's fixture
            return path
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker: no groups to schedule
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (group := _xdist_group(item)):
            item.add_marker(pytest.mark.xdist_group(group))
