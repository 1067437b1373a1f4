"""The threads a launch uses: KERNELBAY_CPU_THREADS, OMP_NUM_THREADS, the affinity mask and the
cgroup CPU quota, reported truthfully in dev.properties["threads"]; the runtime's pool runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kernelbay import cpus
from kernelbay.errors import SettingError
from kernelbay_cpu import _threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="affinity and cgroups are Linux's")


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("KERNELBAY_CPU_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def _cgroup(tmp_path, monkeypatch, line: str, files: dict[str, str]) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text(line + "\n")
    root = tmp_path / "fs"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    monkeypatch.setattr(cpus, "PROC_CGROUP", str(proc))
    monkeypatch.setattr(cpus, "CGROUP_ROOT", str(root))


def test_kernelbay_cpu_threads_wins(monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_THREADS", "3")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _threads.threads() == (3, "KERNELBAY_CPU_THREADS")


def test_a_bad_kernelbay_cpu_threads_says_so(monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_THREADS", "many")
    with pytest.raises(SettingError, match="KERNELBAY_CPU_THREADS"):
        _threads.threads()


def test_omp_num_threads_is_honoured(no_env, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _threads.threads() == (1, "OMP_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # nested levels: the outer one
    assert _threads.threads() == (4, "OMP_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")  # OpenMP ignores it too
    assert _threads.threads()[1] in ("affinity", "cgroup cpu quota")


def test_cgroup_v2_quota_caps_the_threads(no_env, tmp_path, monkeypatch):
    _cgroup(tmp_path, monkeypatch, "0::/job/task", {"job/task/cpu.max": "50000 100000", "job/cpu.max": "max 100000"})
    assert _threads.quota_cpus() == 0.5
    assert _threads.threads() == (1, "cgroup cpu quota")


def test_cgroup_v2_parent_quota_counts(no_env, tmp_path, monkeypatch):
    _cgroup(tmp_path, monkeypatch, "0::/job/task", {"job/task/cpu.max": "max 100000", "job/cpu.max": "20000 100000"})
    assert _threads.quota_cpus() == 0.2


def test_cgroup_v1_quota_and_no_quota(no_env, tmp_path, monkeypatch):
    _cgroup(
        tmp_path,
        monkeypatch,
        "4:cpu,cpuacct:/docker/abc",
        {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "100000", "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"},
    )
    assert _threads.quota_cpus() == 1.0
    assert _threads.threads() == (1, "cgroup cpu quota")
    _cgroup(
        tmp_path,
        monkeypatch,
        "4:cpu,cpuacct:/docker/abc",
        {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1", "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000"},
    )
    assert _threads.quota_cpus() is None
    assert _threads.threads() == (_threads.affinity_cpus(), "affinity")


def test_a_new_module_takes_the_devices_figure_until_a_setting_changes(no_env, tmp_path, monkeypatch):
    monkeypatch.setattr(_threads, "_probed", None)
    _cgroup(tmp_path, monkeypatch, "0::/job", {"job/cpu.max": "100000 100000"})
    assert _threads.probe() == (1, "cgroup cpu quota")  # what dev.properties["threads"] reports
    (tmp_path / "fs" / "job" / "cpu.max").write_text("max 100000\n")  # quota lifted after the probe
    assert _threads.for_launch() == 1  # the device's figure: the cgroup files are not read again
    monkeypatch.setenv("KERNELBAY_CPU_THREADS", "3")
    assert _threads.for_launch() == 3  # a setting changed since the probe: read anew
    monkeypatch.delenv("KERNELBAY_CPU_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _threads.for_launch() == 2
    monkeypatch.delenv("OMP_NUM_THREADS")
    (tmp_path / "other").mkdir()
    _cgroup(tmp_path / "other", monkeypatch, "0::/", {})  # other cgroup files: read anew
    assert _threads.for_launch() == _threads.affinity_cpus()


_CHILD = r"""
import json, os, sys
import numpy as np
import kernelbay as kb
if len(sys.argv) > 1:
    os.sched_setaffinity(0, {int(sys.argv[1])})
dev = kb.device("cpu")
src = r'''
#include <sys/syscall.h>
#include <unistd.h>
__global__ void who(long long* t) { if (threadIdx.x == 0) t[blockIdx.x] = (long long)syscall(SYS_gettid); }
'''
k = kb.compile(kb.Source(src, lang="cuda", name="who"), dev)
seen = set()
for _ in range(20):
    t = kb.asarray(np.full(4096, -1, np.int64), device=dev)
    k.launch(4096, 32, (t,))
    seen |= set(t.numpy().tolist())
# the OS threads that ran blocks, by count (the caller's first)
print(json.dumps({"threads": dev.properties["threads"], "from": dev.properties["threads_from"], "seen": len(seen),
                  "caller": os.getpid() in seen}))
"""


def _child(env: dict[str, str], *args: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in ("KERNELBAY_CPU_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], env={**base, **env}, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_launch_uses_what_the_device_reports():
    got = _child({"OMP_NUM_THREADS": "1"})
    assert got == {"threads": 1, "from": "OMP_NUM_THREADS", "seen": 1, "caller": True}
    got = _child({"KERNELBAY_CPU_THREADS": "2", "OMP_NUM_THREADS": "1"})
    # the calling thread takes chunks too; a worker the scheduler has not run yet may take none
    assert got["threads"] == 2 and got["from"] == "KERNELBAY_CPU_THREADS" and got["seen"] in (1, 2) and got["caller"]
    got = _child({"KERNELBAY_CPU_THREADS": "2", "KERNELBAY_CPU_RUNTIME": "0"})  # OpenMP without the runtime's pool
    assert got["threads"] == 2 and got["seen"] in (1, 2) and got["caller"]


_CONCURRENT = r"""
import threading
import numpy as np
import kernelbay as kb
dev = kb.device("cpu")
k = kb.compile(kb.Source('''__global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }''', lang="cuda", name="axpy"), dev)
n = 1 << 16
x = kb.asarray(np.arange(n, dtype=np.float32), device=dev)
bad = []
def work(j):
    y = kb.zeros(n, "float32", device=dev)
    for _ in range(50):
        k.launch(n // 128, 128, (np.float32(j), x, y, n))
    dev.synchronize()
    if not np.array_equal(y.numpy(), 50 * np.float32(j) * np.arange(n, dtype=np.float32)):
        bad.append(j)
ts = [threading.Thread(target=work, args=(j,)) for j in range(1, 5)]
for t in ts: t.start()
for t in ts: t.join()
print("bad", bad)
"""


def test_launches_from_several_threads_at_once_are_each_complete():
    # one launch at a time runs on the runtime's pool; the others meanwhile on OpenMP
    base = {k: v for k, v in os.environ.items() if k not in ("KERNELBAY_CPU_THREADS", "OMP_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", _CONCURRENT],
        env={**base, "KERNELBAY_CPU_THREADS": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "bad []" in out.stdout


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to narrow the mask to one")
def test_the_affinity_mask_is_honoured():
    cpu = min(os.sched_getaffinity(0))
    got = _child({}, str(cpu))
    assert got == {"threads": 1, "from": "affinity", "seen": 1, "caller": True}


_WAIT_CHILD = r"""
import os
import kernelbay as kb
dev = kb.device("cpu")
kb.compile(kb.Source("__global__ void f(float* y) { y[threadIdx.x] = 1.0f; }", lang="cuda", name="f"), dev)
print("policy", dev.properties["wait_policy"], "env", os.environ.get("OMP_WAIT_POLICY"))
"""


def _wait_child(env: dict[str, str]) -> tuple[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KERNELBAY_CPU_WAIT")}
    out = subprocess.run(
        [sys.executable, "-c", _WAIT_CHILD],
        env={**base, "OMP_DISPLAY_ENV": "VERBOSE", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, out.stderr


def test_openmp_threads_wait_passively_by_default_without_leaking_the_setting():
    stdout, stderr = _wait_child({})
    assert "GOMP_SPINCOUNT = '0'" in stderr  # libgomp read passive when it loaded: no spinning
    assert "policy passive env None" in stdout  # the process's environment is left as it was


def test_spin_and_the_users_own_policy_are_kept():
    _, stderr = _wait_child({"KERNELBAY_CPU_WAIT": "spin"})
    assert "GOMP_SPINCOUNT = '0'" not in stderr and "GOMP_SPINCOUNT = '" in stderr
    _, stderr = _wait_child({"OMP_WAIT_POLICY": "active"})
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in stderr


def test_a_bad_wait_policy_says_so(monkeypatch):
    monkeypatch.setenv("KERNELBAY_CPU_WAIT", "sometimes")
    with pytest.raises(SettingError, match="KERNELBAY_CPU_WAIT"):
        _threads.wait_policy()
