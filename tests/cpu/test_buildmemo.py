"""A fresh process's disk-cache hit finds the module by its memo (buildmemo.py): no plan of the
source, no read of the package's headers, the same runners and notes; an edited file the
compiler read, or another build of the backend, takes the long way."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SRC = r"""
#include "ext.cuh"
__global__ void total(const int* x, int* out, int n) {
    __shared__ int s[64];
    int t = threadIdx.x;
    s[t] = t < n ? x[t] : 0;
    __syncthreads();
    for (int k = 32; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[0] = s[0] + EXTRA;
}
"""

CHILD = textwrap.dedent(
    """
    import sys, numpy as np, kernelbay as kb
    from kernelbay_cpu import build
    if sys.argv[2] == "no-plan":  # the memo path must not plan the source nor read the headers
        def refuse(*a, **k):
            raise AssertionError("planned or read the headers on a memo hit")
        build.cuda_plan = refuse
        build.preludes = refuse
    src = kb.Source(sys.argv[1], lang="cuda", name="total", options=("-I" + sys.argv[3],))
    k = kb.compile(src, "cpu")
    x = kb.asarray(np.arange(64, dtype=np.int32), device="cpu")
    out = kb.zeros(1, "int32", device="cpu")
    k.launch(1, 64, (x, out, np.int32(64)))
    print(out.numpy()[0], "|", k.handle.profile_note)
    """
)


def _run(tmp_path, mode: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KERNELBAY_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run(
        [sys.executable, "-c", CHILD, SRC, mode, str(tmp_path / "inc")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_fresh_process_finds_its_module_without_planning_it(tmp_path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "ext.cuh").write_text("#define EXTRA 1\n")
    first = _run(tmp_path, "plain")
    assert first.returncode == 0, first.stderr
    value, note = first.stdout.strip().split(" | ")
    assert value == str(sum(range(64)) + 1)
    assert "loop path" in note
    second = _run(tmp_path, "no-plan")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == first.stdout.strip()  # same result, same runner note


def test_an_edited_file_the_compiler_read_takes_the_long_way(tmp_path) -> None:
    (tmp_path / "inc").mkdir()
    ext = tmp_path / "inc" / "ext.cuh"
    ext.write_text("#define EXTRA 1\n")
    assert _run(tmp_path, "plain").returncode == 0
    ext.write_text("#define EXTRA 1000\n")
    st = os.stat(ext)
    os.utime(ext, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    again = _run(tmp_path, "plain")
    assert again.returncode == 0, again.stderr
    assert again.stdout.split(" | ")[0] == str(sum(range(64)) + 1000)  # not the stale module
    refused = _run(tmp_path, "no-plan")  # the memo now names the new module
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout.split(" | ")[0] == str(sum(range(64)) + 1000)


def test_the_memo_key_covers_the_raw_inputs_and_the_backends_files(monkeypatch) -> None:
    import kernelbay as kb
    from kernelbay_cpu import _driver, buildmemo

    tc = _driver.toolchain()
    argv = _driver.plain_argv(tc)
    src = kb.Source("__global__ void k(int* y) { y[0] = 1; }", lang="cuda", name="k")
    base = buildmemo.key(tc, argv, ["-O2"], src, ["k"])
    assert base == buildmemo.key(tc, argv, ["-O2"], src, ["k"])
    assert base != buildmemo.key(tc, argv, ["-O3"], src, ["k"])
    other = kb.Source("__global__ void k(int* y) { y[0] = 2; }", lang="cuda", name="k")
    assert base != buildmemo.key(tc, argv, ["-O2"], other, ["k"])
    with_header = kb.Source(src.code, lang="cuda", name="k", headers={"h.cuh": "// 1"})
    assert base != buildmemo.key(tc, argv, ["-O2"], with_header, ["k"])
    assert "include/kb_cpu_cuda.h:" in buildmemo.package_stamp()
    monkeypatch.setattr(buildmemo, "_stamp", "another build of the backend")
    assert base != buildmemo.key(tc, argv, ["-O2"], src, ["k"])


def test_the_runtime_is_found_by_the_package_stamp_then_by_its_sources(tmp_path, monkeypatch) -> None:
    from kernelbay import cache
    from kernelbay_cpu import _driver, _runtime, buildmemo

    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "cache"))
    tc = _driver.toolchain()
    built = _runtime._build(tc)  # compiled: stored under both keys
    assert built[:4] == b"\x7fELF"

    def no_compiler(*a, **k):
        raise AssertionError("compiled the runtime again")

    def no_read():
        raise AssertionError("read the runtime's sources on a stamped hit")

    monkeypatch.setattr(_runtime, "_compile", no_compiler)
    monkeypatch.setattr(_runtime, "_texts", no_read)
    assert _runtime._build(tc) == built  # by the stamp: no source read
    # another build of the backend (any file of it edited): found by the sources' text, no rebuild
    monkeypatch.undo()
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_runtime, "_compile", no_compiler)
    monkeypatch.setattr(buildmemo, "_stamp", "another build of the backend")
    assert _runtime._build(tc) == built
    stamped = _runtime._key(tc, _driver.plain_argv(tc), "cpu-runtime-stamped", "", {"package": buildmemo._stamp})
    entry = cache.default_cache().get(stamped)  # and kept under the new stamp
    assert entry is not None and entry.payload == built
    # a damaged stamped entry is a miss (dropped), and the sources' key still answers
    path = cache.default_cache().path_for(stamped)
    with open(path, "r+b") as f:
        f.seek(-40, os.SEEK_END)
        f.write(b"\0" * 8)
    assert _runtime._build(tc) == built
    # an edited runtime source: neither key matches, so it is compiled again
    real = _runtime._texts
    monkeypatch.setattr(
        _runtime, "_texts", lambda: {**real(), _runtime.HEADER: real()[_runtime.HEADER] + "\n// edited"}
    )
    monkeypatch.setattr(buildmemo, "_stamp", "the runtime's header edited")
    try:
        _runtime._build(tc)
    except AssertionError as exc:
        assert "compiled the runtime again" in str(exc)
    else:
        raise AssertionError("an edited runtime source was not compiled")
