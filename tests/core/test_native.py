"""kernelbay.native: C extensions built at first use and kept in the disk cache."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import sysconfig
import textwrap

import pytest
from kernelbay import native

pytestmark = pytest.mark.skipif(
    not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")),
    reason="Python's C headers are not installed here (python3-dev)",
)


def _source(name: str, body: str = "return PyLong_FromLong(PyLong_AsLong(a[0]) + PyLong_AsLong(a[1]));") -> str:
    return textwrap.dedent(
        f"""
        #define PY_SSIZE_T_CLEAN
        #include <Python.h>
        static PyObject *add(PyObject *s, PyObject *const *a, Py_ssize_t n) {{ {body} }}
        static PyMethodDef m[] = {{{{"add", (PyCFunction)(void (*)(void))add, METH_FASTCALL, NULL}}, {{NULL}}}};
        static struct PyModuleDef d = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, m}};
        PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&d); }}
        """
    )


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "kbcache"
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(d))
    monkeypatch.delenv(native.ENV_NATIVE, raising=False)
    return d


def test_build_and_call(cache_dir) -> None:
    mod = native.load_extension("_kb_test_add", _source("_kb_test_add"))
    assert mod.add(2, 40) == 42
    assert native.load_extension("_kb_test_add", "ignored: loaded once per process") is mod
    assert any(p.suffix == ".kbc" for p in cache_dir.rglob("*"))


def test_compile_error_says_why(cache_dir) -> None:
    with pytest.raises(
        native.NativeUnavailable, match=r"(?s)building _kb_test_bad failed .*error: .undeclared_thing. undeclared"
    ):
        native.load_extension("_kb_test_bad", _source("_kb_test_bad", "return undeclared_thing;"))


def test_turned_off(cache_dir, monkeypatch) -> None:
    monkeypatch.setenv(native.ENV_NATIVE, "0")
    assert native.disabled()
    with pytest.raises(native.NativeUnavailable, match="KERNELBAY_NATIVE"):
        native.load_extension("_kb_test_off", _source("_kb_test_off"))


def test_missing_compiler(cache_dir, monkeypatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: None)
    with pytest.raises(native.NativeUnavailable, match=r"no C compiler found .*CC='/nonexistent/cc'"):
        native.load_extension("_kb_test_nocc", _source("_kb_test_nocc"))


def test_fresh_process_loads_from_the_cache_without_compiling(cache_dir, tmp_path) -> None:
    import shutil

    real = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if real is None:
        pytest.skip("no C compiler on PATH")
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "cc-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    code = (
        "from kernelbay import native; import sys; "
        f"print(native.load_extension('_kb_test_fresh', {_source('_kb_test_fresh')!r}).add(1, 2))"
    )
    env = {**os.environ, "CC": str(wrapper), "KERNELBAY_CACHE_DIR": str(cache_dir)}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "3"
    assert log.read_text().count("run") == 1  # built by the first process only


def _counting_cc(tmp_path):
    import shutil

    real = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if real is None:
        pytest.skip("no C compiler on PATH")
    log = tmp_path / "cc.log"
    wrapper = tmp_path / "cc-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, log


def test_a_failed_build_is_remembered_per_key(cache_dir, tmp_path) -> None:
    wrapper, log = _counting_cc(tmp_path)
    bad = _source("_kb_test_fail", "return nope;")
    code = f"from kernelbay import native\ntry:\n    native.load_extension('_kb_test_fail', {bad!r})\nexcept native.NativeUnavailable as e:\n    print(e)\n"
    env = {**os.environ, "CC": str(wrapper), "KERNELBAY_CACHE_DIR": str(cache_dir)}
    outs = []
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert log.read_text().count("run") == 1  # the later processes did not retry
    assert "failed earlier with this compiler and source; not retried" in outs[1] and "nope" in outs[1]
    # A changed source is a new key: built (and failing) again.
    code2 = code.replace("return nope;", "return nope2;")
    subprocess.run([sys.executable, "-c", code2], env=env, capture_output=True, text=True, timeout=600)
    assert log.read_text().count("run") == 2


def test_cold_processes_build_once(cache_dir, tmp_path) -> None:
    wrapper, log = _counting_cc(tmp_path)
    code = (
        "from kernelbay import native; "
        f"print(native.load_extension('_kb_test_many', {_source('_kb_test_many')!r}).add(2, 3))"
    )
    env = {**os.environ, "CC": str(wrapper), "KERNELBAY_CACHE_DIR": str(cache_dir)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert out.strip() == "5"
    assert log.read_text().count("run") == 1


def test_loaded_from_a_private_cache_subdirectory_not_tmpdir(cache_dir) -> None:
    mod = native.load_extension("_kb_test_where", _source("_kb_test_where"))
    d = cache_dir / "native-load"
    assert os.path.dirname(mod.__file__) == str(d)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert not os.path.exists(mod.__file__)  # unlinked once loaded
    assert native.load_dir() == str(d)


def test_statuses_report_registered_backends() -> None:
    native.register_status("_kb_test_backend", lambda: "python (no compiler)")
    native.register_status("_kb_test_raises", lambda: 1 / 0)
    try:
        got = native.statuses()
        assert got["_kb_test_backend"] == "python (no compiler)"
        assert got["_kb_test_raises"].startswith("unknown (ZeroDivisionError")
    finally:
        native._status_fns.pop("_kb_test_backend")
        native._status_fns.pop("_kb_test_raises")


# --- a cache directory that cannot be written: the process's own directory, one warning -------

ROOT = hasattr(os, "getuid") and os.getuid() == 0


@pytest.fixture
def degraded(cache_dir, monkeypatch):
    """A clean slate for the fallback (it is per process), restored after."""
    monkeypatch.setattr(native, "_fallback", None)
    monkeypatch.setattr(native, "_load_dir", {})
    return cache_dir


def _full_in(monkeypatch, prefix: str) -> None:
    """Writes under ``prefix`` fail as on a full disk."""
    import errno

    real = native._write_private

    def write(image, pfx, suffix, d):
        if d.startswith(prefix):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(image, pfx, suffix, d)

    monkeypatch.setattr(native, "_write_private", write)


def _check_fallback(mod, cache_dir) -> None:
    d = os.path.dirname(mod.__file__)
    assert not d.startswith(str(cache_dir)) and native.load_dir() == d
    assert os.path.dirname(d) == os.path.realpath(__import__("tempfile").gettempdir())
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_full_cache_disk_falls_back_with_one_warning(degraded, monkeypatch, caplog) -> None:
    _full_in(monkeypatch, str(degraded))
    with pytest.warns(RuntimeWarning, match=r"cannot be used to load compiled code \(the disk is full"):
        mod = native.load_extension("_kb_test_full", _source("_kb_test_full"))
    assert mod.add(2, 3) == 5
    _check_fallback(mod, degraded)
    assert "the disk is full" in caplog.text
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per process
        assert native.load_extension("_kb_test_full2", _source("_kb_test_full2")).add(1, 1) == 2


def test_nowhere_to_write_names_the_disk_not_the_compiler(degraded, monkeypatch) -> None:
    _full_in(monkeypatch, "/")
    with pytest.warns(RuntimeWarning), pytest.raises(native.NativeUnavailable, match="the disk is full") as info:
        native.load_extension("_kb_test_nowhere", _source("_kb_test_nowhere"))
    assert "compiler" not in str(info.value)


def test_cache_deleted_mid_run_falls_back(degraded) -> None:
    import shutil

    assert native.load_extension("_kb_test_del1", _source("_kb_test_del1")).add(1, 2) == 3
    shutil.rmtree(degraded)
    with pytest.warns(RuntimeWarning, match="the directory was deleted"):
        mod = native.load_extension("_kb_test_del2", _source("_kb_test_del2"))
    assert mod.add(2, 2) == 4
    _check_fallback(mod, degraded)


def test_read_only_cache_simulated(degraded, monkeypatch) -> None:
    """As root (who ignores modes) a read-only directory is simulated: EACCES on every write there."""
    import errno

    real = native._write_private

    def write(image, pfx, suffix, d):
        if d.startswith(str(degraded)):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(image, pfx, suffix, d)

    monkeypatch.setattr(native, "_write_private", write)
    with pytest.warns(RuntimeWarning, match="permission denied"):
        mod = native.load_extension("_kb_test_ro_sim", _source("_kb_test_ro_sim"))
    assert mod.add(3, 4) == 7
    _check_fallback(mod, degraded)


@pytest.mark.skipif(ROOT, reason="root ignores file modes: a 0500 directory is writable to it")
@pytest.mark.parametrize("made", [False, True], ids=["fresh", "native-load-made"])
def test_read_only_cache_falls_back(degraded, made) -> None:
    if made:
        native.load_extension("_kb_test_ro0", _source("_kb_test_ro0"))
        os.chmod(degraded / "native-load", 0o500)
    else:
        degraded.mkdir(mode=0o700)
    os.chmod(degraded, 0o500)
    try:
        name = f"_kb_test_ro{int(made) + 1}"
        with pytest.warns(RuntimeWarning, match="permission denied"):
            mod = native.load_extension(name, _source(name))
        assert mod.add(1, 4) == 5
        _check_fallback(mod, degraded)
    finally:
        os.chmod(degraded, 0o700)
        if made:
            os.chmod(degraded / "native-load", 0o700)
