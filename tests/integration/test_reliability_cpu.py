"""Reliability promises that need a real backend (issue #17), on cpu: the compile cache keyed by
every file the compiler read, one compile for N processes, kernels that can be released."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap

import kernelbay as kb
import numpy as np
import pytest

try:
    CPU = kb.device("cpu")
except kb.KernelbayError as exc:  # pragma: no cover - no compiler here
    pytest.skip(f"no cpu device: {exc}", allow_module_level=True)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "cache"))


def _value_of(src: kb.Source) -> int:
    x = kb.zeros(1, "int32", CPU)
    kb.compile(src, CPU).launch(1, 1, (x,))
    return int(x.numpy()[0])


def _run(code: str, env: dict[str, str]) -> str:
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_an_edited_header_reached_through_include_paths_is_recompiled(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "val.h").write_text("#define VAL 1\n")
    (inc / "abs.h").write_text("#define ABS 10\n")
    code = f"""
        import kernelbay as kb
        src = kb.Source('#include "val.h"\\n#include <{inc}/abs.h>\\n__global__ void k(int* x) {{ x[0] = VAL + ABS; }}',
                        "cuda", options=("-I{inc}",))
        x = kb.zeros(1, "int32", "cpu")
        kb.compile(src, "cpu").launch(1, 1, (x,))
        print(int(x.numpy()[0]))
    """
    env = {"KERNELBAY_CACHE_DIR": str(tmp_path / "cache")}
    assert _run(code, env) == "11"
    assert _run(code, env) == "11"  # a hit
    (inc / "val.h").write_text("#define VAL 2\n")
    assert _run(code, env) == "12"  # -I header edited: not the stale entry
    (inc / "abs.h").write_text("#define ABS 20\n")
    assert _run(code, env) == "22"  # absolute #include <...> edited


def test_an_edited_header_is_seen_within_one_process_too(tmp_path):
    (tmp_path / "v.h").write_text("#define V 3\n")
    src = kb.Source('#include "v.h"\n__global__ void k(int* x) { x[0] = V; }', "cuda", options=(f"-I{tmp_path}",))
    assert _value_of(src) == 3
    (tmp_path / "v.h").write_text("#define V 4  \n")  # another size, so the stamp differs at once
    assert _value_of(src) == 4


@pytest.mark.parametrize("name", ["/tmp/kb-evil.h", "../evil.h", "a/../../evil.h", "kb_main.cpp"])
def test_header_names_cannot_write_outside_the_build(name, tmp_path):
    with pytest.raises(kb.InvalidArgumentError, match="header name"):
        kb.compile(kb.Source("__global__ void k(int* x) {}", "cuda", headers={name: "int evil;"}), CPU)
    assert not os.path.exists("/tmp/kb-evil.h")


def _cold_worker(d):
    os.environ["KERNELBAY_CACHE_DIR"] = d
    import kernelbay as kb
    from kernelbay_cpu import build

    made = []
    real = build.run_compiler

    def counting(*a, **k):
        made.append(1)
        return real(*a, **k)

    build.run_compiler = counting
    x = kb.zeros(1, "int32", "cpu")
    kb.compile(kb.Source("__global__ void cold(int* x) { x[0] = 7; }", "cuda"), "cpu").launch(1, 1, (x,))
    return len(made), int(x.numpy()[0])


def test_processes_on_a_cold_cache_compile_once(tmp_path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        got = pool.map(_cold_worker, [str(tmp_path / "cold")] * 8)
    assert [v for _, v in got] == [7] * 8
    assert sum(n for n, _ in got) == 1


def _maps() -> int:
    """How many kernel modules are mapped into this process now."""
    with open("/proc/self/maps") as f:
        return len(
            {
                line.split()[-2] if line.rstrip().endswith("(deleted)") else line.split()[-1]
                for line in f
                if "kernelbay-cpu-" in line
            }
        )


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
def test_closed_kernels_release_their_modules(monkeypatch):
    from kernelbay_cpu import compiler

    # four distinct modules; every later compile of one is a disk-cache hit and a fresh dlopen,
    # so a module that were never unloaded would cost its mappings again each time
    srcs = [kb.Source(f"__global__ void k{i}(int* x) {{ x[0] = {i}; }}", "cuda") for i in range(4)]

    def compile_n(n, close):
        for i in range(n):
            k = kb.compile(srcs[i % 4], CPU)
            if close:
                k.close()

    compile_n(8, True)
    before = _maps()
    compile_n(200, True)
    # unloaded at the latest every 32 releases (200 modules mapped if none were)
    assert _maps() - before <= 32
    k = kb.compile(srcs[0], CPU)
    k.close()
    k.close()
    with pytest.raises(kb.UseAfterFreeError, match="after close"):
        k.launch(1, 1, (kb.zeros(1, "int32", CPU),))
    # without close(), the bounded module cache keeps the mappings bounded too
    monkeypatch.setattr(compiler._modules, "bound", 2)
    before = _maps()
    compile_n(200, False)
    assert _maps() - before <= 2 + 32


def test_a_module_shared_by_two_kernels_stays_loaded_until_both_close():
    src = kb.Source("__global__ void shared(int* x) { x[0] = 9; }", "cuda")
    a, b = kb.compile(src, CPU), kb.compile(src, CPU)
    a.close()
    x = kb.zeros(1, "int32", CPU)
    b.launch(1, 1, (x,))
    assert x.numpy()[0] == 9
    b.close()
    np.testing.assert_array_equal(x.numpy(), [9])
