"""The cpu backend: launch host cost, saxpy against numpy, compile cache hits.

* Launch: a 4-argument kernel (x, y, a, n) on a 1-block grid, through ``k.launch``; peers:
  the backend's native launcher called with its prepacked ``void**`` (the floor: no argument
  conversion, no checks) and numpy doing the same 256-element ``y += a*x``.
* saxpy on 2^26 float32 (2^16 with ``--quick``): one launch + synchronize against numpy's
  in-place ``y += a*x``, interleaved.
* Compile cache: ``kb.compile`` of a source already compiled in this process; in a fresh
  process with a warm disk cache (``KERNELBAY_CACHE_DIR`` in a temporary directory, warmed by
  a first child); and, for scale, a miss that runs the C++ compiler.
"""

from __future__ import annotations

import shutil
import sys
import tempfile

from . import _kernels
from ._timing import find, goal, interleaved_samples, record, skipped, stats, subprocess_samples

SUITE = "cpu"

LAUNCH = "cpu launch: 4-arg kernel, 1 block of 256 threads"
SAXPY = "saxpy, 2^26 float32 (launch + synchronize)"
SAXPY_QUICK = "saxpy, 2^16 float32 (launch + synchronize)"
HIT = "compile: in-process cache hit"
DISK = "compile: fresh process, disk cache hit"
MISS = "compile: cache miss (runs the C++ compiler)"


def _device():
    import kernelbay as kb

    recs = {b.name: b for b in kb.backends()}
    rec = recs.get("cpu")
    if rec is None:
        return None, "kernelbay-cpu is not installed (pip install 'kernelbay[cpu]')"
    if rec.status != "available":
        return None, f"the cpu backend is {rec.status}: {(rec.reason or '').splitlines()[0]}"
    return kb.device("cpu"), ""


def launch_cost(quick: bool, dev) -> list[dict]:  # noqa: ANN001
    import numpy as np

    import kernelbay as kb

    k = _kernels.saxpy_kernel("cpu", dev)
    n = 256
    xs, ys = np.ones(n, np.float32), np.zeros(n, np.float32)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    a = np.float32(0.5)
    args = (x, y, a, np.int32(n))
    launch = k.launch
    cases = {
        "kernelbay": lambda: launch(1, 256, args),
        "numpy y += a*x (256 elements)": lambda: ys.__iadd__(a * xs),
    }
    native = _native_launcher(k, args)
    if native is not None:
        cases["native launcher, prepacked args"] = native
    s = interleaved_samples(cases, number=200 if quick else 5000, repeat=3 if quick else 40,
                            warmup=1 if quick else 3, after_batch=dev.synchronize)
    out = [record(LAUNCH, name, stats(v)) for name, v in s.items()]
    if native is None:
        out.append(skipped(LAUNCH, "native launcher, prepacked args", "the cpu backend's native launcher did not run as this benchmark expects (internals changed)"))
    return out


def _native_launcher(k, args):  # noqa: ANN001
    """The compiled launcher called with the kernel's own, already filled ``void**`` and a
    prevalidated geometry: the floor under ``k.launch``. It reads the backend's internals
    (kernelbay_cpu.launcher), which may change: a child process tries the call first, so a
    changed native signature costs this peer, not the whole module."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", _NATIVE_PROBE], env=_kernels.child_env(), capture_output=True, timeout=300)
    if r.returncode != 0:
        return None
    from kernelbay_cpu import launcher as ln_mod

    k.launch(1, 256, args)  # fills the slots and builds the launcher
    h = k.handle
    fn, argv, geom = h.launcher.fn, h._argv, ln_mod.geometry(1, 256)
    return lambda: fn(argv, geom)


_NATIVE_PROBE = """
import numpy as np, kernelbay as kb
from benchmarks import _kernels
from kernelbay_cpu import launcher as ln_mod
d = kb.device('cpu'); k = _kernels.saxpy_kernel('cpu', d)
x = kb.asarray(np.ones(256, np.float32), device=d); y = kb.asarray(np.zeros(256, np.float32), device=d)
k.launch(1, 256, (x, y, np.float32(2), np.int32(256)))
h = k.handle
assert h.launcher.fn(h._argv, ln_mod.geometry(1, 256)) == 0
assert float(y.numpy()[0]) == 4.0
"""


def saxpy(quick: bool, dev) -> list[dict]:  # noqa: ANN001
    import numpy as np

    import kernelbay as kb

    n = 1 << (16 if quick else 26)
    k = _kernels.saxpy_kernel("cpu", dev)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(n, dtype=np.float32)
    ys = rng.standard_normal(n, dtype=np.float32)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    a = np.float32(0.5)
    args = (x, y, a, np.int32(n))
    grid = (n + 255) // 256
    sync = dev.synchronize

    def kernelbay() -> None:
        k.launch(grid, 256, args)
        sync()

    def numpy() -> None:
        ys.__iadd__(a * xs)  # y += a*x, in place

    s = interleaved_samples({"kernelbay": kernelbay, "numpy y += a*x": numpy},
                            number=1, repeat=3 if quick else 25, warmup=1 if quick else 3)
    group = SAXPY_QUICK if quick else SAXPY
    gbs = 3 * n * 4 / 1e9  # bytes moved: read x, read y, write y
    out = []
    for name, v in s.items():
        st = {key: (val / 1000 if key != "n" else val) for key, val in stats(v).items()}
        out.append(record(group, name, st, unit="ms", note=f"{gbs / (st['median'] / 1000):.1f} GB/s effective"))
    return out


def compile_hits(quick: bool, dev) -> list[dict]:  # noqa: ANN001
    import kernelbay as kb

    src = kb.Source(_kernels.SAXPY_CUDA, lang="cuda", name="saxpy")
    kb.compile(src, device=dev)
    s = interleaved_samples({"kernelbay": lambda: kb.compile(src, device=dev)},
                            number=100 if quick else 2000, repeat=3 if quick else 30, warmup=1)
    out = [record(HIT, "kernelbay", stats(s["kernelbay"]))]

    tmp = tempfile.mkdtemp(prefix="kb-bench-cache-")
    try:
        env = _kernels.child_env(KERNELBAY_CACHE_DIR=tmp)
        hit = _child("import kernelbay as kb; from benchmarks._kernels import SAXPY_CUDA as S", "S")
        # A new source each run: a comment the compiler ignores changes the cache key.
        miss = _child("import kernelbay as kb, uuid; from benchmarks._kernels import SAXPY_CUDA as S",
                      "S + '// ' + uuid.uuid4().hex")
        # The warm-up of "hit" is its first compile (a miss) and fills the disk cache.
        d = subprocess_samples({"kernelbay": (hit, env)}, repeat=2 if quick else 20, warmup=1)
        out.append(record(DISK, "kernelbay", _ms(stats(d["kernelbay"])), unit="ms",
                          note="kb.compile in a new process; import and device pick not counted"))
        m = subprocess_samples({"kernelbay": (miss, env)}, repeat=1 if quick else 3, warmup=0, timeout=600)
        out.append(record(MISS, "kernelbay", _ms(stats(m["kernelbay"])), unit="ms"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _child(setup: str, code_expr: str) -> list[str]:
    code = (
        f"{setup}; import time; d = kb.device('cpu'); src = kb.Source({code_expr}, lang='cuda', name='saxpy'); "
        "t = time.perf_counter(); kb.compile(src, device=d); print(time.perf_counter() - t)"
    )
    return [sys.executable, "-c", code]


def _ms(st: dict) -> dict:
    return {k: (v / 1000 if k != "n" else v) for k, v in st.items()}


def run(quick: bool) -> list[dict]:
    dev, why = _device()
    if dev is None:
        return [skipped(g, "kernelbay", why) for g in (LAUNCH, SAXPY, HIT, DISK)]
    return launch_cost(quick, dev) + saxpy(quick, dev) + compile_hits(quick, dev)


def goals(records: list[dict]) -> list[dict]:
    out = []
    r = find(records, LAUNCH, "kernelbay")
    if r and "median" in r:
        out.append(goal("cpu: launch host cost, 4-arg kernel, 1-block grid ≤ 3 µs", r["median"], 3.0) | {"unit": "µs"})
    for group in (SAXPY, SAXPY_QUICK):
        kbr, npr = find(records, group, "kernelbay"), find(records, group, "numpy y += a*x")
        if kbr and npr and "median" in kbr and "median" in npr:
            text = "cpu: saxpy 2^26 float32 at least numpy `y += a*x` speed (numpy time ÷ kernelbay time ≥ 1)"
            if group == SAXPY_QUICK:
                text += " [quick run: 2^16]"
            out.append(goal(text, npr["median"] / kbr["median"], 1.0, higher_is_better=True) | {"unit": "×"})
    r = find(records, HIT, "kernelbay")
    if r and "median" in r:
        out.append(goal("cpu: in-process compile cache hit ≤ 20 µs", r["median"], 20.0) | {"unit": "µs"})
    r = find(records, DISK, "kernelbay")
    if r and "median" in r:
        out.append(goal("cpu: fresh-process disk cache hit ≤ 5 ms", r["median"], 5.0) | {"unit": "ms"})
    return out


if __name__ == "__main__":  # pragma: no cover -- handy when working on one module
    import json

    recs = run("--quick" in sys.argv)
    print(json.dumps({"records": recs, "goals": goals(recs)}, indent=1))
