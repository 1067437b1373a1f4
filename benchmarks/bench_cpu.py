"""The cpu backend: launch host cost, saxpy against numpy and numba, block kernels, compile cache hits.

* Launch: a 4-argument kernel (x, y, a, n) on a 1-block grid, through ``k.launch``; peers:
  the backend's native launcher called with its prepacked ``void**`` (the floor: no argument
  conversion, no checks) and numpy doing the same 256-element ``y += a*x``.
* saxpy on 2^26 float32 (2^16 with ``--quick``): one launch + synchronize against numpy's
  in-place ``y += a*x`` and numba ``@njit(parallel=True)`` on the same arrays, interleaved
  (numba is a benchmark-only dependency: its row is skipped when it is not installed).
* Block kernels: ns per thread per ``__syncthreads`` (one 256-thread block, on the loop path:
  the barrier is a loop boundary); a
  grid-stride block reduction of 2^24 float32 (264 x 256) against numpy ``x.sum()``; and block
  reduction, tiled matmul and warp-shuffle reduction against numba's CUDA simulator
  (``NUMBA_ENABLE_CUDASIM=1``, in a child process, small sizes; benchmarks/_cpu_blocks.py).
* Compile cache: ``kb.compile`` of a source already compiled in this process; in a fresh
  process with a warm disk cache (``KERNELBAY_CACHE_DIR`` in a temporary directory, warmed by
  a first child); and, for scale, a miss that runs the C++ compiler.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time

from . import _cpu_blocks, _kernels
from ._timing import find, goal, interleaved_samples, record, skipped, stats, subprocess_samples

SUITE = "cpu"

LAUNCH = "cpu launch: 4-arg kernel, 1 block of 256 threads"
SAXPY = "saxpy, 2^26 float32 (launch + synchronize)"
SAXPY_QUICK = "saxpy, 2^16 float32 (launch + synchronize)"
HIT = "compile: in-process cache hit"
DISK = "compile: fresh process, disk cache hit"
MISS = "compile: cache miss (runs the C++ compiler)"
NUMBA = "numba @njit(parallel=True)"
BARRIER = "cpu __syncthreads: ns per thread per barrier, 256-thread block"
GRID_SUM = "block reduction, 2^24 float32, 264 blocks x 256 (launch + host sum of partials)"
GRID_SUM_QUICK = "block reduction, 2^16 float32, 264 blocks x 256 (launch + host sum of partials)"
SIM = "vs numba CUDA simulator: {}"
SIM_NAMES = {
    "block_reduce": "block reduction, 4096 float32",
    "matmul": "tiled matmul 32x32, 16x16 tiles",
    "warp_reduce": "warp-shuffle reduction, 4096 float32",
}


def _device():
    import kernelbay as kb

    recs = {b.name: b for b in kb.backends()}
    rec = recs.get("cpu")
    if rec is None:
        return None, "kernelbay-cpu is not installed (pip install 'kernelbay[cpu]')"
    if rec.status != "available":
        return None, f"the cpu backend is {rec.status}: {(rec.reason or '').splitlines()[0]}"
    return kb.device("cpu"), ""


def launch_cost(quick: bool, dev) -> list[dict]:
    import kernelbay as kb
    import numpy as np

    k = _kernels.saxpy_kernel("cpu", dev)
    n = 256
    xs, ys = np.ones(n, np.float32), np.zeros(n, np.float32)
    x, y = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev)
    a = np.float32(0.5)
    args = (x, y, a, np.int32(n))
    launch = k.launch
    cfg = kb.LaunchConfig(grid=(1,), block=(256,))
    default = dev.default_stream
    # One row per call form the docs show (README: grid=(n,), block=(256,)), side by side.
    cases = {
        "kernelbay": lambda: launch(1, 256, args),
        "kernelbay-tuple": lambda: launch((1,), (256,), args),
        "kernelbay-keywords": lambda: launch(grid=(1,), block=(256,), args=args),
        "kernelbay-config": lambda: launch(config=cfg, args=args),
        "kernelbay-call": lambda: k((1,), (256,), args),
        "kernelbay-default-stream": lambda: launch((1,), (256,), args, stream=default),
        "numpy y += a*x (256 elements)": lambda: ys.__iadd__(a * xs),
    }
    native = _native_launcher(k, args)
    if native is not None:
        cases["native launcher, prepacked args"] = native
    s = interleaved_samples(
        cases,
        number=200 if quick else 5000,
        repeat=3 if quick else 40,
        warmup=1 if quick else 3,
        after_batch=dev.synchronize,
    )
    out = [record(LAUNCH, name, stats(v)) for name, v in s.items()]
    if native is None:
        out.append(
            skipped(
                LAUNCH,
                "native launcher, prepacked args",
                "the cpu backend's native launcher did not run as this benchmark expects (internals changed)",
            )
        )
    return out


def _native_launcher(k, args):
    """The compiled launcher called with the kernel's own, already filled ``void**`` and a
    prevalidated geometry: the floor under ``k.launch``. It reads the backend's internals
    (kernelbay_cpu.launcher), which may change: a child process tries the call first, so a
    changed native signature costs this peer, not the whole module."""
    import subprocess

    r = subprocess.run(
        [sys.executable, "-c", _NATIVE_PROBE], env=_kernels.child_env(), capture_output=True, timeout=300
    )
    if r.returncode != 0:
        return None
    from kernelbay_cpu import launcher as ln_mod

    k.launch(1, 256, args)  # fills the slots and builds the launcher
    h = k.handle
    fn, argv, geom = h.launcher.fn, h._argv, ln_mod.geometry(1, 256)
    return lambda: fn(argv, geom, 0)


_NATIVE_PROBE = """
import numpy as np, kernelbay as kb
from benchmarks import _kernels
from kernelbay_cpu import launcher as ln_mod
d = kb.device('cpu'); k = _kernels.saxpy_kernel('cpu', d)
x = kb.asarray(np.ones(256, np.float32), device=d); y = kb.asarray(np.zeros(256, np.float32), device=d)
k.launch(1, 256, (x, y, np.float32(2), np.int32(256)))
h = k.handle
assert h.launcher.fn(h._argv, ln_mod.geometry(1, 256), 0) == 0
assert float(y.numpy()[0]) == 4.0
"""


def saxpy(quick: bool, dev) -> list[dict]:
    import kernelbay as kb
    import numpy as np

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

    cases = {"kernelbay": kernelbay, "numpy y += a*x": numpy}
    nb = _numba_saxpy()
    if nb is not None:
        xv, yv = x.numpy(), y.numpy()
        nb(a, xv, yv)  # compile
        cases[NUMBA] = lambda: nb(a, xv, yv)
    s = interleaved_samples(cases, number=1, repeat=3 if quick else 25, warmup=1 if quick else 3)
    group = SAXPY_QUICK if quick else SAXPY
    gbs = 3 * n * 4 / 1e9  # bytes moved: read x, read y, write y
    out = []
    for name, v in s.items():
        st = {key: (val / 1000 if key != "n" else val) for key, val in stats(v).items()}
        out.append(record(group, name, st, unit="ms", note=f"{gbs / (st['median'] / 1000):.1f} GB/s effective"))
    if nb is None:
        out.append(skipped(group, NUMBA, "numba is not installed (pip install numba: a benchmark-only dependency)"))
    return out


def _numba_saxpy():
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(parallel=True, fastmath=False)
    def saxpy(a, x, y):
        for i in numba.prange(x.shape[0]):
            y[i] = a * x[i] + y[i]

    return saxpy


def block_kernels(quick: bool, dev) -> list[dict]:
    """Barrier cost, a grid-stride block reduction against numpy, and the numba simulator peers."""
    import kernelbay as kb
    import numpy as np

    out = []
    bars = kb.compile(kb.Source(_cpu_blocks.BARRIERS, lang="cuda", name="barriers"), dev)
    o = kb.zeros(256, "int32", device=dev)
    iters = 200 if quick else 2000
    # A one-block grid runs on the launching thread: its CPU time is the barrier's cost, without the
    # time the OS gives other processes meanwhile (this machine is shared).
    bars.launch(1, 256, (o, iters))
    samples = []
    for _ in range(3 if quick else 30):
        t0 = time.thread_time()
        bars.launch(1, 256, (o, iters))
        samples.append((time.thread_time() - t0) * 1e9 / (256 * iters))
    out.append(
        record(
            BARRIER,
            "kernelbay",
            stats(samples),
            unit="ns",
            note=f"CPU time of the launching thread, which runs the one block; {iters} barriers per launch",
        )
    )

    n = 1 << (16 if quick else 24)
    red = kb.compile(kb.Source(_cpu_blocks.BLOCK_REDUCE, lang="cuda", name="block_reduce"), dev)
    xs = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    x, part = kb.asarray(xs, device=dev), kb.zeros(264, device=dev)
    pv = part.numpy()

    def kernelbay() -> float:
        red.launch(264, 256, (x, part, n))
        return float(pv.sum())

    assert abs(kernelbay() - float(xs.sum(dtype=np.float64))) < 1e-2 * max(1.0, n**0.5)
    s = interleaved_samples(
        {"kernelbay": kernelbay, "numpy x.sum()": xs.sum}, number=1, repeat=3 if quick else 25, warmup=1 if quick else 3
    )
    group = GRID_SUM_QUICK if quick else GRID_SUM
    out += [record(group, name, _ms(stats(v)), unit="ms") for name, v in s.items()]
    return out + _vs_simulator(quick, dev)


def _vs_simulator(quick: bool, dev) -> list[dict]:
    import json
    import subprocess

    import kernelbay as kb
    import numpy as np

    groups = {k: SIM.format(v) for k, v in SIM_NAMES.items()}
    try:
        import numba  # noqa: F401
    except ImportError:
        why = "numba is not installed (pip install numba: a benchmark-only dependency)"
        return [skipped(g, "numba CUDA simulator", why) for g in groups.values()]
    sz = _cpu_blocks.SIM_SIZES
    r = subprocess.run(
        [sys.executable, "-c", _cpu_blocks.SIM_CHILD, json.dumps(sz), "2" if quick else "5"],
        env=_kernels.child_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if r.returncode != 0:
        tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-2:])
        return [skipped(g, "numba CUDA simulator", f"the simulator run failed: {tail}") for g in groups.values()]
    sim = json.loads(r.stdout.strip().splitlines()[-1])
    rng = np.random.default_rng(0)
    n, m, w = sz["block_reduce"], sz["matmul"], sz["warp_reduce"]
    x, o = kb.asarray(rng.standard_normal(n).astype(np.float32), device=dev), kb.zeros(n // 256, device=dev)
    a = kb.asarray(rng.standard_normal(m * m).astype(np.float32), device=dev)
    b = kb.asarray(rng.standard_normal(m * m).astype(np.float32), device=dev)
    c = kb.zeros(m * m, device=dev)
    xw, ow = kb.asarray(rng.standard_normal(w).astype(np.float32), device=dev), kb.zeros(w // 32, device=dev)
    k = {
        name: kb.compile(kb.Source(src, lang="cuda", name=name), dev)
        for name, src in (
            ("block_reduce", _cpu_blocks.BLOCK_REDUCE),
            ("matmul", _cpu_blocks.TILED_MATMUL),
            ("warp_reduce", _cpu_blocks.WARP_REDUCE),
        )
    }
    cases = {
        "block_reduce": lambda: k["block_reduce"].launch(n // 256, 256, (x, o, n)),
        "matmul": lambda: k["matmul"].launch((m // 16, m // 16), (16, 16), (a, b, c, m)),
        "warp_reduce": lambda: k["warp_reduce"].launch(w // 128, 128, (xw, ow, w)),
    }
    out = []
    s = interleaved_samples(cases, number=10, repeat=3 if quick else 20, warmup=1)
    for name, group in groups.items():
        out.append(record(group, "kernelbay", _ms(stats(s[name])), unit="ms"))
        if isinstance(sim[name], str):
            out.append(skipped(group, "numba CUDA simulator", f"the simulator cannot run it: {sim[name]}"))
        else:
            out.append(record(group, "numba CUDA simulator", _ms(stats([t * 1e6 for t in sim[name]])), unit="ms"))
    return out


def compile_hits(quick: bool, dev) -> list[dict]:
    import kernelbay as kb

    src = kb.Source(_kernels.SAXPY_CUDA, lang="cuda", name="saxpy")
    kb.compile(src, device=dev)
    s = interleaved_samples(
        {"kernelbay": lambda: kb.compile(src, device=dev)},
        number=100 if quick else 2000,
        repeat=3 if quick else 30,
        warmup=1,
    )
    out = [record(HIT, "kernelbay", stats(s["kernelbay"]))]

    tmp = tempfile.mkdtemp(prefix="kb-bench-cache-")
    try:
        env = _kernels.child_env(KERNELBAY_CACHE_DIR=tmp)
        hit = _child("import kernelbay as kb; from benchmarks._kernels import SAXPY_CUDA as S", "S")
        # A new source each run: a comment the compiler ignores changes the cache key.
        miss = _child(
            "import kernelbay as kb, uuid; from benchmarks._kernels import SAXPY_CUDA as S",
            "S + '// ' + uuid.uuid4().hex",
        )
        # The warm-up of "hit" is its first compile (a miss) and fills the disk cache.
        d = subprocess_samples({"kernelbay": (hit, env)}, repeat=2 if quick else 20, warmup=1)
        out.append(
            record(
                DISK,
                "kernelbay",
                _ms(stats(d["kernelbay"])),
                unit="ms",
                note="kb.compile in a new process; import and device pick not counted",
            )
        )
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
    return launch_cost(quick, dev) + saxpy(quick, dev) + block_kernels(quick, dev) + compile_hits(quick, dev)


def goals(records: list[dict]) -> list[dict]:
    out = []
    for form in (
        "kernelbay-tuple",
        "kernelbay-keywords",
        "kernelbay-config",
        "kernelbay-call",
        "kernelbay-default-stream",
    ):
        f = find(records, LAUNCH, form)
        if f and "median" in f:
            out.append(
                goal(f"cpu: launch host cost, {form.removeprefix('kernelbay-')} form ≤ 3 µs", f["median"], 3.0)
                | {"unit": "µs"}
            )
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
        nbr = find(records, group, NUMBA)
        if kbr and nbr and "median" in kbr and "median" in nbr:
            text = "cpu: saxpy 2^26 float32 ≥ 0.9× numba @njit(parallel=True) (numba time ÷ kernelbay time)"
            if group == SAXPY_QUICK:
                text += " [quick run: 2^16]"
            out.append(goal(text, nbr["median"] / kbr["median"], 0.9, higher_is_better=True) | {"unit": "×"})
    r = find(records, BARRIER, "kernelbay")
    if r and "median" in r:
        out.append(
            goal(
                "cpu: __syncthreads ≤ 2 ns per thread per barrier on the loop path (256-thread block)", r["median"], 2.0
            )
            | {"unit": "ns"}
        )
    for group in (GRID_SUM, GRID_SUM_QUICK):
        kbr, npr = find(records, group, "kernelbay"), find(records, group, "numpy x.sum()")
        if kbr and npr and "median" in kbr and "median" in npr:
            text = "cpu: grid-stride block reduction of 2^24 float32 ≥ 0.2× numpy x.sum() throughput"
            if group == GRID_SUM_QUICK:
                text += " [quick run: 2^16]"
            out.append(goal(text, npr["median"] / kbr["median"], 0.2, higher_is_better=True) | {"unit": "×"})
    for what in SIM_NAMES.values():
        kbr, simr = (
            find(records, SIM.format(what), "kernelbay"),
            find(records, SIM.format(what), "numba CUDA simulator"),
        )
        if kbr and simr and "median" in kbr and "median" in simr:
            out.append(
                goal(
                    f"cpu: {what} ≥ 100× faster than numba's CUDA simulator",
                    simr["median"] / kbr["median"],
                    100.0,
                    higher_is_better=True,
                )
                | {"unit": "×"}
            )
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
