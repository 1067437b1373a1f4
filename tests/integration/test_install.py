"""Real installs in fresh virtual environments: entry points, allowlist, broken plugins, CLI."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_core_alone_says_no_backend_and_how_to_install(core_only):
    r = core_only.py("import kernelbay as kb; kb.device()")
    assert r.returncode != 0
    assert "NoDeviceError: no kernelbay backend is installed; install one" in r.stderr
    assert "kernelbay[cpu]" in r.stderr

    info = core_only.kernelbay("info")
    assert info.returncode == 0 and "no backend installed" in info.stdout

    demo = core_only.kernelbay("demo")
    assert demo.returncode == 1
    assert demo.stderr.startswith("kernelbay: error: no kernelbay backend is installed")
    assert "Traceback" not in demo.stderr


def test_example_plugin_shows_up_and_runs(with_plugins):
    r = with_plugins.kernelbay("info", "--json")
    assert r.returncode == 0, r.stderr
    by = {b["name"]: b for b in json.loads(r.stdout)["backends"]}
    assert by["pyref"]["status"] == "available"
    assert by["pyref"]["distribution"] == "kernelbay-pyref" and by["pyref"]["version"] == "0.2.0"
    demo = with_plugins.kernelbay("demo", env={"KERNELBAY_DEVICE": "pyref"})
    assert demo.returncode == 0, demo.stderr
    assert "pyref:0" in demo.stdout and "matches numpy: OK" in demo.stdout
    # A reference backend is never chosen by default; the error says it could be named.
    plain = with_plugins.kernelbay("demo")
    assert plain.returncode == 1 and "pyref is a reference backend" in plain.stderr
    assert "KERNELBAY_DEVICE=pyref" in plain.stderr


def test_broken_plugins_are_isolated_and_explained(with_plugins):
    r = with_plugins.kernelbay("info", "--json")
    by = {b["name"]: b for b in json.loads(r.stdout)["backends"]}
    assert by["brokenimport"]["status"] == "broken"
    assert "kernelbay_dependency_that_does_not_exist" in by["brokenimport"]["reason"]
    assert by["brokensig"]["status"] == "broken"
    assert "do not match kernelbay's hookspecs" in by["brokensig"]["reason"]
    assert "alignment" in by["brokensig"]["reason"]
    # brokensig has the highest priority, and the default does not fall to the reference backend.
    assert json.loads(r.stdout)["default_device"] is None


def test_naming_a_broken_plugin_fails_with_its_cause(with_plugins):
    r = with_plugins.kernelbay("demo", env={"KERNELBAY_DEVICE": "brokenimport"})
    assert r.returncode == 1
    assert "kernelbay: error: backend 'brokenimport' (kernelbay-brokenimport) is broken" in r.stderr
    assert "kernelbay_dependency_that_does_not_exist" in r.stderr
    assert "Traceback" not in r.stderr
    p = with_plugins.py(
        """
        import kernelbay as kb
        try:
            kb.device("brokenimport")
        except kb.BackendBrokenError as e:
            print(type(e.__cause__).__name__)
        """
    )
    assert p.stdout.strip() == "ModuleNotFoundError"
    fallback = with_plugins.kernelbay("demo", env={"KERNELBAY_DEVICE": "brokensig,pyref"})
    assert fallback.returncode == 0 and "pyref:0" in fallback.stdout


def test_allowlist(with_plugins):
    only = with_plugins.kernelbay("info", "--json", env={"KERNELBAY_BACKENDS": "pyref"})
    by = {b["name"]: b["status"] for b in json.loads(only.stdout)["backends"]}
    assert by == {"pyref": "available", "brokenimport": "disabled", "brokensig": "disabled"}
    none = with_plugins.kernelbay("demo", env={"KERNELBAY_BACKENDS": ""})
    assert none.returncode == 1 and "leaves out every installed one" in none.stderr
    hidden = with_plugins.kernelbay("demo", env={"KERNELBAY_BACKENDS": "brokensig", "KERNELBAY_DEVICE": "pyref"})
    assert "'pyref' is installed but KERNELBAY_BACKENDS='brokensig' leaves it out" in hidden.stderr


def test_selector_errors_list_the_installed_backends(with_plugins):
    r = with_plugins.kernelbay("demo", env={"KERNELBAY_DEVICE": "pyref:3,nosuch"})
    assert r.returncode == 1
    err = r.stderr
    assert "no device matches KERNELBAY_DEVICE='pyref:3,nosuch'" in err
    assert "pyref:3: no such device; pyref has 1: pyref:0" in err
    assert "nosuch: backend 'nosuch' is not installed" in err
    assert "pyref (kernelbay-pyref): available: pyref:0 (a reference backend: used only when named)" in err
    bad = with_plugins.kernelbay("demo", env={"KERNELBAY_DEVICE": "py ref"})
    assert "bad device selector term 'py ref'" in bad.stderr


def test_listing_backends_imports_no_backend(with_plugins):
    r = with_plugins.py(
        """
        import sys, kernelbay as kb
        names = [b.name for b in kb.backends()]
        loaded = sorted(m for m in sys.modules if m.startswith(("kb_broken", "kernelbay_pyref", "numpy")))
        print(names, loaded)
        """
    )
    assert r.stdout.strip() == "['brokenimport', 'brokensig', 'pyref'] []", r.stderr


def test_child_processes_inherit_the_selection(with_plugins):
    r = with_plugins.py(
        """
        import subprocess, sys
        out = subprocess.run([sys.executable, "-c", "import kernelbay as kb; print(kb.device())"],
                             capture_output=True, text=True)
        print(out.stdout.strip() or out.stderr)
        """,
        env={"KERNELBAY_DEVICE": "nosuch"},
    )
    assert "backend 'nosuch' is not installed" in r.stdout
