"""The tuner (``kb.tune``) against the same sweep written by hand, side by side in one run.

cpu suite (``python -m benchmarks.run cpu --only tune``, or ``python -m benchmarks.bench_tune``):

* A 16-variant sweep (4 with ``--quick``) (a row-sum kernel, ``BLOCK`` x ``UNROLL``) on the cpu backend, from a cold
  compile cache each time: the tuner (parallel compile, check, interleaved timing in a worker)
  against the serial loop a user writes (compile, check, time each config in turn, the same
  repeats), in the order serial, tuner, tuner, serial (medians). Goal: tuner <= 0.6x the
  serial wall time.
* The tuner's warm re-run (its results file): goal <= 0.05x the cold run.
* The tuner's overhead per timed config, kernel time excluded: a worker timing 16 configs of a
  near-empty kernel, 10 repeats each, against the device-side times it reports. Goal <= 1 ms.

GPU (``python -m benchmarks.bench_tune --cuda``, no network, no ray): a 64-config NVRTC sweep.
Compile: the tuner's parallel pool against serial ``kb.compile`` in one process, each on a fresh
cache (goal >= 6x on a 16-core host); choice: the tuner's winner against an exhaustive serial
timing of every config with CUDA events (the same config, or one within the measured spread).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

from ._timing import find, goal, record, skipped, stats

SUITE = "cpu"

ROWS, COLS = 2048, 512
SPACE = {"BLOCK": [16, 32, 64, 128], "UNROLL": [1, 2, 4, 8]}
GPU_SPACE = {"BLOCK": [32, 64, 128, 256, 512, 1024, 96, 192], "UNROLL": [1, 2, 3, 4, 5, 6, 7, 8]}
REPEATS, WARMUP = 10, 2

ROWSUM = r"""
extern "C" __global__ void rowsum(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0.0f;
    int c = 0;
    for (; c + UNROLL <= cols; c += UNROLL)
        for (int u = 0; u < UNROLL; ++u) acc[u] += x[r * cols + c + u];
    float s = 0.0f;
    for (int u = 0; u < UNROLL; ++u) s += acc[u];
    for (; c < cols; ++c) s += x[r * cols + c];
    y[r] = s;
}
"""

# A register-tiled SGEMM (2D block tiling): the kind of kernel sweeps tune, and whose NVRTC
# compile (unrolled tiles) costs far more than the row sum's.
SGEMM = r"""
extern "C" __global__ void sgemm(int M, int N, int K, const float* A, const float* B, float* C) {
    __shared__ float As[BM * BK];
    __shared__ float Bs[BK * BN];
    const int threads = (BM * BN) / (TM * TN);
    const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    C += blockIdx.y * BM * N + blockIdx.x * BN;
    float acc[TM * TN] = {0.0f};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += threads) As[i] = A[(i / BK) * K + i % BK];
        for (int i = threadIdx.x; i < BK * BN; i += threads) Bs[i] = B[(i / BN) * N + i % BN];
        __syncthreads();
        A += BK;
        B += BK * N;
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int m = 0; m < TM; ++m) ra[m] = As[(tr * TM + m) * BK + k];
#pragma unroll
            for (int n = 0; n < TN; ++n) rb[n] = Bs[k * BN + tc * TN + n];
#pragma unroll
            for (int m = 0; m < TM; ++m)
#pragma unroll
                for (int n = 0; n < TN; ++n) acc[m * TN + n] += ra[m] * rb[n];
        }
        __syncthreads();
    }
    for (int m = 0; m < TM; ++m)
        for (int n = 0; n < TN; ++n) C[(tr * TM + m) * N + tc * TN + n] = acc[m * TN + n];
}
"""
SGEMM_SPACE = {"BM": [64, 128], "BN": [64, 128], "BK": [8, 16, 24, 32], "TM": [4, 8], "TN": [4, 8]}


def source() -> Any:
    import kernelbay as kb

    return kb.Source(ROWSUM, lang="cuda", name="rowsum")


def launch(kernel: Any, config: dict[str, Any], args: list[Any]) -> None:
    rows = args[0].shape[0]
    block = config["BLOCK"]
    kernel.launch(grid=-(-rows // block), block=block, args=[*args, np.int32(rows), np.int32(args[0].shape[1])])


def host_args(rows: int = ROWS, cols: int = COLS) -> list[Any]:
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    return [x, np.zeros(rows, np.float32)]


def reference(x: Any, y: Any) -> list[Any]:
    return [None, x.sum(axis=1, dtype=np.float64).astype(np.float32)]


def _temp_dir(prefix: str) -> str:
    """A new directory, removed when this process ends (each cold cache of a cpu sweep holds
    ~0.3 GB of compiled configs: a suite run left 1.1 GB of them in /tmp each time)."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d


def _fresh_cache() -> str:
    d = _temp_dir("kb-bench-tune-")
    os.environ["KERNELBAY_CACHE_DIR"] = d
    return d


def serial_sweep(space: dict[str, list[int]], device: str) -> tuple[dict[str, Any], dict[str, float]]:
    """The sweep by hand: compile, check, time each config in turn, in this process, with the L2
    flushed before each timed launch as the tuner does (a kernel timed with its data in L2 and
    one timed without rank differently)."""
    import kernelbay as kb
    from kernelbay.tune.space import Space, apply

    dev = kb.device(device)
    x, y = host_args()
    want = reference(x, y)[1]
    stream = kb.Stream.default(dev)
    l2 = int(dev.properties.get("l2_cache_bytes", 0) or 0)
    scratch = kb.empty(2 * l2, "uint8", dev) if l2 else None
    medians = {}
    for c in Space(space).configs():
        k = kb.compile(apply(source(), c), dev)
        ax, ay = kb.asarray(x, device=dev), kb.asarray(y, device=dev)
        launch(k, c, [ax, ay])
        stream.synchronize()
        if not np.allclose(ay.numpy(), want, rtol=1e-4, atol=1e-3):
            continue
        for _ in range(WARMUP):
            launch(k, c, [ax, ay])
        samples = []
        for _ in range(REPEATS):
            if scratch is not None:
                scratch._binding.memset(scratch, 0, scratch.nbytes, None)  # as the tuner flushes
            e0 = stream.record()
            launch(k, c, [ax, ay])
            e1 = stream.record()
            e1.synchronize()
            samples.append(e1.elapsed(e0) / 1e3)
        medians[json.dumps(c, sort_keys=True)] = statistics.median(samples)
    best = min(medians, key=lambda c: medians[c])
    return json.loads(best), medians


def tuned_sweep(space: dict[str, list[int]], device: str, **kw: Any) -> Any:
    import kernelbay as kb

    return kb.tune(
        source(),
        space,
        launch,
        args=host_args(),
        check=reference,
        rtol=1e-4,
        atol=1e-3,
        devices=device,
        repeats=REPEATS,
        warmup=WARMUP,
        progress=False,
        **kw,
    )


def overhead_per_config(device: str, n: int = 16) -> list[float]:
    """The tuner's time per timed config beyond the kernel's (device-timed) own, in seconds,
    one figure per round (the round's wall time less the device times it reported, over its
    configs): 16 configs of a 1-row problem, 10 interleaved repeats each."""
    from kernelbay.tune.runner import WorkerHandle
    from kernelbay.tune.space import Space, apply
    from kernelbay.tune.worker import Job

    configs = Space({"BLOCK": [1, 2, 4, 8], "UNROLL": [1, 2, 4, 8]}).configs()[:n]
    job = Job(
        sources={i: apply(source(), c) for i, c in enumerate(configs)},
        configs=dict(enumerate(configs)),
        launch=launch,
        args=host_args(1, 1),
        check=False,
        default=0,
        rtol=0,
        atol=0,
        flush_l2=False,
    )
    h = WorkerHandle(device, job)
    h.start()
    try:
        order = list(range(len(configs)))
        h.time_round(order, WARMUP, 60)  # compiles and warms: not what is measured
        per_round = []
        for r in range(REPEATS):
            t0 = time.perf_counter()
            got, faults = h.time_round(order[r:] + order[:r], 0, 60)
            wall = time.perf_counter() - t0
            if faults:
                raise RuntimeError(f"the overhead run's kernels failed: {faults}")
            per_round.append((wall - sum(got.values()) / 1e9) / len(order))
    finally:
        h.stop()
    return per_round


def _side_in_child(side: str, space: dict[str, list[int]], cache: str) -> tuple[float, Any]:
    """One side of the cold comparison, run and timed in a fresh Python process."""
    import subprocess

    from ._kernels import child_env

    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_tune", "--side", side, "--space", json.dumps(space)],
        env=child_env(KERNELBAY_CACHE_DIR=cache),
        capture_output=True,
        text=True,
        check=True,
    )
    secs, best = out.stdout.strip().splitlines()[-1].split(" ", 1)
    return float(secs), json.loads(best)


def _side(side: str, space: dict[str, list[int]]) -> None:
    t0 = time.perf_counter()
    best = serial_sweep(space, "cpu")[0] if side == "serial" else tuned_sweep(space, "cpu").config
    print(f"{time.perf_counter() - t0} {json.dumps(best)}")


COLD, WARM, OVER = "cpu sweep, cold cache", "cpu sweep, warm re-run", "tuner overhead per timed config"


def run(quick: bool) -> list[dict]:
    import kernelbay as kb

    try:
        kb.device("cpu")
    except kb.KernelbayError as exc:
        return [skipped(g, "kb.tune", f"the cpu backend is not available: {exc}") for g in (COLD, WARM, OVER)]
    space = {"BLOCK": [32, 128], "UNROLL": [1, 4]} if quick else SPACE
    n = len(space["BLOCK"]) * len(space["UNROLL"])
    old = os.environ.get("KERNELBAY_CACHE_DIR")
    try:
        # A B B A: the serial loop and the tuner alternate, each from a cold cache, so that load
        # from other work on a shared machine does not fall on one side only.
        # Each side in a fresh process (a process keeps what it compiled: a second serial loop
        # in one process would compile nothing), from a cold cache of its own.
        serials, colds = [], []
        for side in ("serial", "tune", "tune", "serial")[: 2 if quick else 4]:
            d = _fresh_cache()
            secs, best = _side_in_child(side, space, d)
            if side == "serial":
                serials.append(secs)
                best_serial = best
            else:
                colds.append(secs)
                tuned_cache, best_tuned = d, best
        os.environ["KERNELBAY_CACHE_DIR"] = tuned_cache  # the warm re-run: the last tuner run's cache
        t0 = time.perf_counter()
        again = tuned_sweep(space, "cpu")
        warm = time.perf_counter() - t0
        if again.timed:
            raise RuntimeError("the warm re-run timed configs again")
        over = overhead_per_config("cpu", 4 if quick else 16)
    finally:
        if old is None:
            os.environ.pop("KERNELBAY_CACHE_DIR", None)
        else:
            os.environ["KERNELBAY_CACHE_DIR"] = old
    return [
        record(COLD, "serial loop", stats(serials), unit="s", configs=n, best=best_serial),
        record(COLD, "kb.tune", stats(colds), unit="s", configs=n, best=best_tuned),
        record(WARM, "kb.tune", stats([warm]), unit="s", configs=n, cold=statistics.median(colds)),
        record(OVER, "kb.tune", stats([x * 1e3 for x in over]), unit="ms"),
    ]


def goals(records: list[dict]) -> list[dict]:
    out = []
    serial, cold = find(records, COLD, "serial loop"), find(records, COLD, "kb.tune")
    warm, over = find(records, WARM, "kb.tune"), find(records, OVER, "kb.tune")
    if serial and cold and "median" in serial and "median" in cold:
        out.append(goal("cpu sweep: kb.tune / serial loop, wall time", cold["median"] / serial["median"], 0.6))
    if cold and warm and "median" in cold and "median" in warm:
        out.append(goal("warm re-run / cold run", warm["median"] / cold["median"], 0.05))
    if over and "median" in over:
        out.append(goal("tuner overhead per timed config (ms)", over["median"], 1.0))
    return out


def _compile_speedup(dev: Any, jobs: int, sources: list[Any]) -> dict[str, Any]:
    """Serial ``kb.compile`` in this process against precompile's pool, each from a fresh cache."""
    import kernelbay as kb
    from kernelbay import _precompile

    _fresh_cache()
    t0 = time.perf_counter()
    kernels = [kb.compile(src, dev) for src in sources]
    serial = time.perf_counter() - t0
    for k in kernels:  # out of this process's kernel cache: the pool must compile them again
        k.close()
    _fresh_cache()
    t0 = time.perf_counter()
    outcomes = _precompile.run_pool(_precompile.compile_source, [(x, str(dev)) for x in sources], jobs, "", False)
    parallel = time.perf_counter() - t0
    failed = [o[1] for o in outcomes if o[0] == "failed"]
    compiled = sum(o[0] == "compiled" for o in outcomes)  # not a memory or disk hit
    return {
        "configs": len(sources),
        "jobs": jobs,
        "failed_compiles": len(failed),
        "first_failure": failed[0][:500] if failed else "",
        "serial_compile_s": serial,
        "parallel_compile_s": parallel,
        "compile_speedup": serial / parallel,
        "parallel_compiled": compiled,
        "goal_met": bool(serial / parallel >= 6 and not failed and compiled == len(sources)),
    }


def _gpu_compile_sgemm(dev: Any, jobs: int) -> dict[str, Any]:
    """(a2) Compile only: 64 SGEMM tilings, serial vs the pool."""
    import kernelbay as kb
    from kernelbay.tune.space import Space

    sources = [
        kb.Source(SGEMM, "cuda", name="sgemm", options=tuple(f"-D{k}={v}" for k, v in c.items()))
        for c in Space(SGEMM_SPACE).configs()
    ]
    return _compile_speedup(dev, jobs, sources)


def _gpu_sweep(dev: Any, jobs: int) -> dict[str, Any]:
    """(a) The 64-config NVRTC sweep: compile serial vs kb.tune's pool, and kb.tune's choice
    against an exhaustive serial timing."""
    from kernelbay.tune.space import Space, apply

    configs = Space(GPU_SPACE).configs()
    out = _compile_speedup(dev, jobs, [apply(source(), c) for c in configs])
    best_serial, medians = serial_sweep(GPU_SPACE, str(dev))
    t0 = time.perf_counter()
    res = tuned_sweep(GPU_SPACE, str(dev), jobs=jobs, force=True)
    tune_wall = time.perf_counter() - t0
    rec = {json.dumps(c, sort_keys=True): r for c, r in res.records}
    win = rec[json.dumps(res.config, sort_keys=True)]
    s_best = medians[json.dumps(best_serial, sort_keys=True)]
    s_win = medians.get(json.dumps(res.config, sort_keys=True), float("inf"))
    same = res.config == best_serial or s_win - s_best <= win["spread"] + 1e-12
    return {
        **out,
        "kb_tune_wall_s": tune_wall,
        "kb_tune_config": res.config,
        "kb_tune_median_us": win["median"] * 1e6,
        "kb_tune_spread_us": win["spread"] * 1e6,
        "serial_best_config": best_serial,
        "serial_best_us": s_best * 1e6,
        "serial_time_of_kb_tune_choice_us": s_win * 1e6,
        "choice_matches": bool(same),
        "goal_met": bool(out["goal_met"] and same),
    }


def _gpu_triton(dev: Any) -> dict[str, Any]:
    """(b) Triton's tutorial matmul configs: kb.tune against triton.autotune."""
    import kernelbay as kb

    from . import tune_triton as T

    _fresh_cache()
    # Each side compiles cold: Triton's own cache (which triton.autotune reads) starts empty too.
    os.environ["TRITON_CACHE_DIR"] = _temp_dir("kb-bench-triton-")
    space = {"CFG": list(range(len(T.CONFIGS)))}
    t0 = time.perf_counter()
    res = kb.tune(
        T.source,
        space,
        T.launch,
        args=T.host_args(),
        check=T.reference,
        rtol=2e-2,
        atol=2e-1,
        devices=str(dev),
        repeats=REPEATS,
        warmup=WARMUP,
        progress=False,
        force=True,
    )
    kb_wall = time.perf_counter() - t0
    statuses = {json.dumps(T.CONFIGS[c["CFG"]]): r["status"] for c, r in res.records}
    out: dict[str, Any] = {
        "configs": len(T.CONFIGS),
        "kb_tune_wall_s": kb_wall,
        "kb_tune_config": T.CONFIGS[res.config["CFG"]],
        "kb_tune_median_us": next(r["median"] for c, r in res.records if c == res.config) * 1e6,
        "kb_tune_statuses": statuses,
    }
    try:
        os.environ["TRITON_CACHE_DIR"] = _temp_dir("kb-bench-triton-")
        win, wall = T.triton_autotune(REPEATS)
        out.update(triton_autotune_config=win, triton_autotune_wall_s=wall)
        out["same_winner"] = win == out["kb_tune_config"]
    except Exception as exc:  # torch missing, or Triton's autotune API changed: kb.tune's side stands
        out["triton_autotune_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return out


def _gpu_overhead(dev: Any) -> dict[str, Any]:
    """(c) The tuner's overhead per timed config on the GPU, the kernel's own time excluded."""
    _fresh_cache()
    per_round = overhead_per_config(str(dev))
    ms = statistics.median(per_round) * 1e3
    return {"rounds": len(per_round), "overhead_ms": ms, "goal_met": ms <= 1.0}


def gpu(jobs: int, out: str | None) -> int:
    """The GPU suite on the first cuda device, each part on its own (one that fails is reported
    and the next runs); prints a table, writes JSON to ``out`` after every part (a run cut short
    keeps what finished); exit 1 if a part failed or a goal was missed."""
    import kernelbay as kb

    report: dict[str, Any] = {"parts": {}}

    def save() -> None:
        if out:
            with open(out, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1, default=repr)

    try:
        dev = kb.device("cuda")
        report["device"] = f"{dev} {dev.name}"
    except Exception as exc:
        report["error"] = f"no cuda device: {type(exc).__name__}: {exc}"
        save()
        print(report["error"])
        return 1
    save()
    parts = [
        ("a: 64-config NVRTC sweep", lambda: _gpu_sweep(dev, jobs)),
        ("a2: 64 SGEMM tilings, compile only", lambda: _gpu_compile_sgemm(dev, jobs)),
        ("b: Triton matmul, kb.tune vs triton.autotune", lambda: _gpu_triton(dev)),
        ("c: tuner overhead per timed config", lambda: _gpu_overhead(dev)),
    ]
    ok = True
    for name, fn in parts:
        t0 = time.perf_counter()
        try:
            got = fn()
        except Exception as exc:
            import traceback

            got = {"error": f"{type(exc).__name__}: {exc}"[:2000], "traceback": traceback.format_exc()[-4000:]}
        got["part_wall_s"] = time.perf_counter() - t0
        ok = ok and "error" not in got and got.get("goal_met", True) is not False
        report["parts"][name] = got
        save()
        print(f"== {name} ({got['part_wall_s']:.1f} s)")
        for k, v in got.items():
            if k != "traceback":
                print(f"   {k:36} {v:.4g}" if isinstance(v, float) else f"   {k:36} {v}")
    print(f"device: {report['device']}; JSON: {out or '(no --out)'}")
    return 0 if ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuda", action="store_true", help="the 64-config NVRTC sweep on a GPU")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", help="write the results as JSON to this path")
    p.add_argument("--quick", action="store_true", help="cpu: a 4-variant sweep, one run a side")
    p.add_argument("--side", choices=("serial", "tune"), help=argparse.SUPPRESS)  # one side, in a child
    p.add_argument("--space", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.side:
        _side(a.side, json.loads(a.space))
        return 0
    if a.cuda:
        return gpu(a.jobs, a.out)
    recs = run(a.quick)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"records": recs, "goals": goals(recs)}, f, indent=1, default=repr)
    for r in recs:
        print(f"{r['group']:40} {r['name']:12} {r.get('median', float('nan')):.4g} {r['unit']} {r.get('skipped', '')}")
    for g in goals(recs):
        print(f"{'met ' if g['met'] else 'MISS'} {g['goal']}: {g['value']:.3g} (limit {g['limit']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
