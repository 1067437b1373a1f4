"""``kernelbay profile`` and ``kernelbay precompile`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import WORKLOAD, load, spans

pytestmark = pytest.mark.kernelbay_device("cpu")

KB = [sys.executable, "-m", "kernelbay.cli"]


def kernelbay(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*KB, *args], capture_output=True, text=True, timeout=600, **kw)


def test_profile_prints_the_summary(tmp_path, cache_dir) -> None:
    out = tmp_path / "merged.json"
    proc = kernelbay("profile", "--trace", str(out), "--", sys.executable, WORKLOAD, "cpu", "7")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "workload ok" in text
    row = next(line for line in text.splitlines() if line.startswith("saxpy"))
    assert row.split()[1] == "8" and row.split()[-1] == "device"
    for direction in ("HtoD", "DtoH", "DtoD"):
        assert any(line.startswith(direction) for line in text.splitlines()), text
    assert "compile: 2 in" in text and "cache hit rate 50% (memory 1, miss 1)" in text
    assert "allocator cpu:0: 3 allocations (3.0 KiB), peak live 3.0 KiB" in text
    doc = load(str(out))
    assert len(spans(doc, "launch")) == 8


def test_profile_json(tmp_path, cache_dir) -> None:
    proc = kernelbay("profile", "--json", "--", sys.executable, WORKLOAD, "cpu", "2")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout[proc.stdout.index("{") :])
    (k,) = data["kernels"]
    assert k["kernel"] == "saxpy" and k["count"] == 3 and k["time"] == "device"
    assert k["min_us"] <= k["mean_us"] <= k["max_us"]
    copies = {c["direction"]: c for c in data["copies"]}
    assert copies["HtoD"]["count"] == 2 and copies["HtoD"]["bytes"] == 2048
    assert data["compiles"]["count"] == 2 and data["compiles"]["hit_rate"] == 0.5
    assert data["allocator"]["traced"]["cpu:0"]["peak_live"] == 3072


def test_profile_passes_on_the_exit_status_and_png(tmp_path, cache_dir) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    png = tmp_path / "t.png"
    proc = kernelbay("profile", "--png", str(png), "--", sys.executable, WORKLOAD, "cpu", "--raise")
    assert proc.returncode == 1 and "on purpose" in proc.stderr
    assert "saxpy" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_png_without_matplotlib_is_a_clear_error(tmp_path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None; from kernelbay import cli; "
        f"sys.exit(cli.main(['profile', '--png', {str(tmp_path / 'x.png')!r}, '--', 'true']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "--png needs matplotlib" in proc.stderr


def test_profile_of_a_program_without_kernelbay(tmp_path) -> None:
    proc = kernelbay("profile", "--", sys.executable, "-c", "print('hello')")
    assert proc.returncode == 1 and "wrote no trace" in proc.stderr


BROKEN = 'extern "C" __global__ void broken(float* y) { y[threadIdx.x] = undefined_name; }\n'
GOOD_CU = 'extern "C" __global__ void twice(float* y) { y[threadIdx.x] *= N; }\n'
GOOD_CPP = 'extern "C" void host_add(float* y) { y[0] += 1.0f; }\n'


def test_precompile_a_folder_with_one_broken_source(tmp_path, cache_dir) -> None:
    src = tmp_path / "kernels"
    (src / "sub").mkdir(parents=True)
    (src / "twice.cu").write_text(GOOD_CU)
    (src / "sub" / "broken.cu").write_text(BROKEN)
    (src / "common.cuh").write_text("// a header: not compiled on its own\n")
    (src / "kernelbay.toml").write_text('[sources."twice.cu"]\nname = "twice"\noptions = ["-DN=2"]\n')
    env = dict(os.environ, KERNELBAY_DEVICE="cpu")
    proc = kernelbay("precompile", str(src), env=env)
    assert proc.returncode == 1
    out = proc.stdout
    assert "precompiled 2 kernel source(s): 0 already cached, 1 compiled, 1 failed, 0 skipped" in out
    assert f"FAILED {src / 'sub' / 'broken.cu'} for cpu:0" in out
    assert "undefined_name" in out  # the compiler's log
    assert "precompile" in proc.stderr  # the progress bar
    # Fixed, the next run compiles only that one; the other is a disk hit.
    (src / "sub" / "broken.cu").write_text(BROKEN.replace("undefined_name", "1.0f"))
    proc = kernelbay("precompile", "--no-progress", str(src), env=env)
    assert proc.returncode == 0, proc.stdout
    assert "precompiled 2 kernel source(s): 1 already cached, 1 compiled, 0 failed, 0 skipped" in proc.stdout
    assert proc.stderr == ""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe (POSIX)")
def test_precompile_stops_a_compile_that_hangs_and_reports_it(tmp_path, cache_dir) -> None:
    fifo = tmp_path / "never-written.h"
    os.mkfifo(fifo)  # nobody writes it: a compile that includes it waits forever
    (tmp_path / "hangs.cu").write_text(f'#include "{fifo}"\n' + BROKEN.replace("undefined_name", "1.0f"))
    proc = kernelbay("precompile", "--no-progress", "--timeout", "5", "--device", "cpu", str(tmp_path / "hangs.cu"))
    assert proc.returncode == 1, proc.stdout
    assert "0 compiled, 1 failed" in proc.stdout
    assert "longer than 5 s and was stopped" in proc.stdout
    bad = kernelbay("precompile", "--timeout", "0", str(tmp_path / "hangs.cu"))
    assert bad.returncode != 0 and "--timeout must be" in bad.stderr


def test_precompiled_kernel_hits_the_cache_at_run_time(tmp_path, cache_dir) -> None:
    (tmp_path / "twice.cu").write_text(GOOD_CU)
    proc = kernelbay("precompile", "--no-progress", "--device", "cpu", "--option=-DN=2", str(tmp_path / "twice.cu"))
    assert proc.returncode == 0 and "1 compiled" in proc.stdout
    code = (
        "import kernelbay as kb; "
        f"s = kb.Source.from_file({str(tmp_path / 'twice.cu')!r}, options=('-DN=2',)); "
        "kb.compile(s, device='cpu')"
    )
    trace = tmp_path / "t.json"
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, KERNELBAY_TRACE=str(trace)), check=True)
    assert [e["args"]["cache"] for e in spans(load(str(trace)), "compile")] == ["disk"]


def test_precompile_skips_languages_the_device_does_not_take(tmp_path, cache_dir) -> None:
    (tmp_path / "k.ptx").write_text(".version 7.0\n")
    (tmp_path / "h.cpp").write_text(GOOD_CPP)
    (tmp_path / "kernelbay.toml").write_text(
        '[sources."h.cpp"]\nname = "host_add"  # a c++ source names its function\n'
    )
    proc = kernelbay("precompile", "--no-progress", "--device", "cpu", str(tmp_path))
    assert proc.returncode == 0, proc.stdout
    assert "1 compiled, 0 failed, 1 skipped" in proc.stdout
    assert "skipped" in proc.stdout and "cpu does not take ptx" in proc.stdout


def test_profile_names_allocator_waits_caused_by_other_streams() -> None:
    # What the cuda allocator reports in memory_stats().counters: the summary says why frees
    # were slow and what to do (merged from two processes: the counters add up).
    from kernelbay.tracing import profile

    def doc(pid: int, frees: int) -> dict:
        counters = {
            "cross_stream_frees": frees,
            "cross_stream_events": frees,
            "cross_stream_bytes": frees << 20,
            "misses_while_set_aside": 1,
            "event_waits": 0,
        }
        backend = {"cuda:0": {"active": 0, "peak": 1 << 20, "cached": 0, "limit": None, "counters": counters}}
        traced = {"cuda:0": {"allocations": 3, "bytes": 3 << 20, "peak_live": 1 << 20}}
        return {"traceEvents": [], "kernelbay": {"pid": pid, "allocator": {"traced": traced, "backend": backend}}}

    s = profile.summarise(profile.merge([doc(1, 2), doc(2, 3)])["kernelbay"])
    text = profile.render(s)
    assert "5 frees waited on events of other streams (5 events, 5.0 MiB set aside)" in text
    assert "2 allocations missed the cache meanwhile" in text
    assert "allocate it inside `with stream:`" in text


RUNNERS = r'''
import numpy as np, kernelbay as kb
src = """
__global__ void scale(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= 2; }
__global__ void shuffle(float* y) { __syncthreads(); y[threadIdx.x] = __shfl_sync(0xffffffffu, y[threadIdx.x], 0); }
__global__ void kept(float* y) { volatile float v = y[threadIdx.x]; __syncthreads(); y[threadIdx.x] = v; }
"""
y = kb.zeros(64, "float32", device="cpu")
for name in ("scale", "shuffle", "kept"):
    k = kb.compile(kb.Source(src, "cuda", name=name), "cpu")
    k.launch(1, 64, (y, np.int32(64)) if name == "scale" else (y,))
print("runners ok")
'''


def test_profile_says_how_each_cpu_kernel_ran(tmp_path, cache_dir) -> None:
    # The cpu runner is chosen per kernel: the profile says which, and why (issue #25).
    script = tmp_path / "runners.py"
    script.write_text(RUNNERS)
    proc = kernelbay("profile", "--", sys.executable, str(script))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "runners ok" in text and "how each kernel ran:" in text, text
    assert "  scale: cpu: the loop path" in text
    assert "  shuffle: cpu: the loop path (barriers and warp operations as loop boundaries" in text
    assert "  kept: cpu: fibers (__syncthreads at kernel.cu:4; not as loops: it uses volatile" in text
    proc = kernelbay("profile", "--json", "--", sys.executable, str(script))
    data = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert {k["kernel"]: k["note"].split(" (")[0] for k in data["kernels"]} == {
        "scale": "cpu: the loop path",
        "shuffle": "cpu: the loop path",
        "kept": "cpu: fibers",
    }
