"""The soak run behind docs/reliability.md (not collected by pytest; run it by hand).

    python tests/integration/soak.py --compiles 200 --thread-seconds 120 > soak.json
    python tests/integration/soak.py --parts compiles-unclosed --compiles 10000 --jobs 2 > soak.json
    python tests/integration/soak.py --backend cuda --parts compiles --compiles 10000 > soak-cuda.json

Each part runs in a fresh private cache directory and prints one JSON object (the compiles parts
also print a progress line to stderr every 5%). alloc, threads and cold run on the cpu backend;
the compiles parts on ``--backend``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def _modules_mapped() -> int:
    with open("/proc/self/maps") as f:
        return len(
            {
                line.split()[-2] if line.rstrip().endswith("(deleted)") else line.split()[-1]
                for line in f
                if "kernelbay-cpu-" in line
            }
        )


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def alloc_free(cycles: int) -> dict:
    import kernelbay as kb
    import numpy as np

    dev = kb.device("cpu")
    for _ in range(1000):  # warm the pool
        kb.empty(1024, np.float32, dev).close()
    rss0, t0 = _rss_kib(), time.perf_counter()
    for i in range(cycles):
        a = kb.empty(256 + (i % 7) * 128, np.float32, dev)
        a.close()
    dt = time.perf_counter() - t0
    stats = dev.memory_stats()
    return {
        "cycles": cycles,
        "seconds": round(dt, 2),
        "us_per_cycle": round(dt / cycles * 1e6, 2),
        "rss_kib_before": rss0,
        "rss_kib_after": _rss_kib(),
        "active_bytes_after": stats.active,
    }


# The cheapest distinct source each backend compiles: plain c++ on cpu (no CUDA prelude, no
# block-loop rewriting, no OpenMP, no -march=native: 0.28 s a compile here against 0.6 s; only
# loading and releasing are measured), a one-line kernel on cuda.
_CXX_OPTIONS = ("-O0", "-fno-openmp", "-mno-native")


def _source(backend: str, tag: str, i: int):
    import kernelbay as kb

    name = f"soak{tag}_{i}"
    if backend == "cpu":
        return kb.Source(f"void {name}(int* x) {{ x[0] = {i}; }}\n", "c++", name=name, options=_CXX_OPTIONS)
    return kb.Source(f'extern "C" __global__ void {name}(int* x) {{ x[0] = {i}; }}', "cuda", name=name)


def _compile_ahead(job: tuple[str, str, int]) -> int:
    """In a helper process: compile one source into the shared disk cache (then release it)."""
    import kernelbay as kb

    backend, tag, i = job
    kb.compile(_source(backend, tag, i), backend).close()
    return i


def _counting(backend: str) -> list[int]:
    """Count the compiler runs of this process (the rest are disk-cache hits)."""
    made: list[int] = []
    if backend == "cpu":
        from kernelbay_cpu import build as mod

        name = "run_compiler"
    else:
        from kernelbay_cuda import nvrtc as mod

        name = "_nvrtc"
    real = getattr(mod, name)

    def counting(*a, **k):
        made.append(1)
        return real(*a, **k)

    setattr(mod, name, counting)
    return made


def _loaded(backend: str) -> dict:
    """What the backend holds: modules in its in-process cache, and loaded modules."""
    if backend == "cpu":
        from kernelbay_cpu import compiler

        return {"module_cache": len(compiler._modules), "modules_mapped": _modules_mapped()}
    from kernelbay_cuda import compiler

    return {**compiler.module_stats(), "gpu_free_mib": compiler.gpu_free_bytes(0) >> 20}


def compiles(n: int, close: bool, limit: int, max_modules: int, backend: str = "cpu", jobs: int = 0) -> dict:
    """Compile ``n`` distinct kernels in this process, launch each once, and ``close()`` each
    (or not: then the backend's bounded in-process cache is what keeps memory flat).

    With ``jobs`` > 0, helper processes compile the next sources into the shared disk cache
    ahead of this one (as ``kernelbay precompile`` does): a backend compiles one source at a
    time in a process, so this is how several compilers run at once. This process then loads
    each from the disk cache (or compiles it itself where it got there first).
    """
    import concurrent.futures as cf

    import kernelbay as kb
    import numpy as np
    from kernelbay.cache import default_cache

    if backend == "cpu":
        from kernelbay_cpu import compiler

        compiler._modules.bound = max_modules
    else:
        from kernelbay_cuda import compiler

        compiler.set_max_kernels(max_modules)
    tag = f"{'c' if close else 'u'}{os.getpid()}"
    dev = kb.device(backend)
    x = kb.zeros(1, np.int32, dev)
    made = _counting(backend)
    pool = cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) if jobs else None
    ahead: dict[int, cf.Future] = {}
    window = 4 * jobs
    rss0, maps0, loaded0 = _rss_kib(), _maps(), _loaded(backend)
    t0 = time.perf_counter()
    wrong = 0
    samples = []
    every = max(1, n // 20)
    for i in range(n):
        if pool is not None:
            for j in range(i, min(n, i + window)):
                if j not in ahead:
                    ahead[j] = pool.submit(_compile_ahead, (backend, tag, j))
            ahead.pop(i).result()
        k = kb.compile(_source(backend, tag, i), dev)
        k.launch(1, 1, (x,))
        wrong += int(x.numpy()[0]) != i
        if close:
            k.close()
        del k
        if (i + 1) % every == 0 or i + 1 == n:
            s = {
                "compiled": i + 1,
                "s": round(time.perf_counter() - t0, 1),
                "rss_kib": _rss_kib(),
                "maps": _maps(),
                **_loaded(backend),
            }
            samples.append(s)
            print(json.dumps(s), file=sys.stderr, flush=True)  # progress, should the run be cut short
    dt = time.perf_counter() - t0
    if pool is not None:
        pool.shutdown()
    info = default_cache().info()
    return {
        "backend": backend,
        "kernels": n,
        "close": close,
        "jobs": jobs,
        "compiled_here": len(made),
        "seconds": round(dt, 1),
        "s_per_kernel": round(dt / n, 4),
        "wrong": wrong,
        "rss_kib_before": rss0,
        "maps_before": maps0,
        "loaded_before": loaded0,
        "samples": samples,
        "cache_entries": info["entries"],
        "cache_bytes": info["bytes"],
        "cache_limit": limit,
        "module_cache_bound": max_modules,
    }


def threads(nthreads: int, seconds: float) -> dict:
    import kernelbay as kb
    import numpy as np

    dev = kb.device("cpu")
    srcs = [
        kb.Source(
            f"__global__ void t{j}(float* y, float a, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x;"
            f" if (i < n) y[i] = a * y[i] + {j}.0f; }}",
            "cuda",
        )
        for j in range(4)
    ]
    for s in srcs:
        kb.compile(s, dev)
    counts = [0] * nthreads
    wrong = [0] * nthreads
    errors: list[str] = []
    stop = time.monotonic() + seconds

    def work(t: int) -> None:
        rng = np.random.default_rng(t)
        try:
            while time.monotonic() < stop:
                j = int(rng.integers(4))
                n = int(rng.integers(1, 5000))
                host = rng.standard_normal(n).astype(np.float32)
                y = kb.asarray(host, device=dev)
                kb.compile(srcs[j], dev).launch(-(-n // 128), 128, (y, np.float32(2), np.int32(n)))
                if not np.allclose(y.numpy(), 2 * host + j, rtol=1e-6, atol=1e-6):
                    wrong[t] += 1
                y.close()
                counts[t] += 1
        except Exception as exc:  # reported, not hidden
            errors.append(repr(exc))

    rss0 = _rss_kib()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    for t in ts:
        t.start()
    mid = None
    for t in ts:
        t.join(seconds / 2 if mid is None else None)
        if mid is None:
            mid = _rss_kib()
    for t in ts:
        t.join()
    return {
        "threads": nthreads,
        "seconds": seconds,
        "iterations": sum(counts),
        "wrong": sum(wrong),
        "errors": errors[:5],
        "rss_kib_start": rss0,
        "rss_kib_mid": mid,
        "rss_kib_end": _rss_kib(),
    }


def _cold(d: str) -> tuple[int, float]:
    os.environ["KERNELBAY_CACHE_DIR"] = d
    import kernelbay as kb
    from kernelbay_cpu import build

    made = []
    real = build.run_compiler

    def counting(*a, **k):
        made.append(1)
        return real(*a, **k)

    build.run_compiler = counting
    t0 = time.perf_counter()
    kb.compile(kb.Source("__global__ void cold(int* x) { x[0] = 7; }", "cuda"), "cpu")
    return len(made), time.perf_counter() - t0


def cold_processes(n: int) -> dict:
    d = tempfile.mkdtemp(prefix="kb-soak-cold-")
    with multiprocessing.get_context("spawn").Pool(n) as pool:
        pool.map(abs, range(n))  # interpreters started before the clock
        t0 = time.perf_counter()
        got = pool.map(_cold, [d] * n)
    return {
        "processes": n,
        "compiles": sum(c for c, _ in got),
        "wall_s": round(time.perf_counter() - t0, 2),
        "slowest_s": round(max(s for _, s in got), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=100_000)
    ap.add_argument("--compiles", type=int, default=200, help="distinct kernels per compiles part (the issue: 10000)")
    ap.add_argument("--thread-seconds", type=float, default=120)
    ap.add_argument("--cache-limit", type=int, default=2_000_000)
    ap.add_argument("--max-modules", type=int, default=256, help="the module cache bound for the unclosed run")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu", help="for the compiles parts")
    ap.add_argument("--jobs", type=int, default=0, help="helper processes compiling ahead into the disk cache")
    ap.add_argument(
        "--parts",
        default="alloc,compiles,threads,cold",
        help="alloc, compiles (= compiles-closed,compiles-unclosed), threads, cold",
    )
    args = ap.parse_args()
    os.environ["KERNELBAY_CACHE_DIR"] = tempfile.mkdtemp(prefix="kb-soak-")
    os.environ["KERNELBAY_CACHE_MAX_BYTES"] = str(args.cache_limit)
    parts = args.parts.replace("compiles,", "compiles-closed,compiles-unclosed,").split(",")
    if parts[-1] == "compiles":
        parts[-1:] = ["compiles-closed", "compiles-unclosed"]
    out: dict = {"cpus": os.cpu_count()}
    if "alloc" in parts:
        out["alloc_free"] = alloc_free(args.cycles)
    if "compiles-closed" in parts:
        out["compiles_closed"] = compiles(args.compiles, True, args.cache_limit, 256, args.backend, args.jobs)
    if "compiles-unclosed" in parts:
        out["compiles_unclosed"] = compiles(
            args.compiles, False, args.cache_limit, args.max_modules, args.backend, args.jobs
        )
    if "threads" in parts:
        out["threads"] = threads(8, args.thread_seconds)
    if "cold" in parts:
        out["cold_processes"] = cold_processes(8)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
