"""The cpu runners side by side with numpy, in one run: an elementwise kernel (gelu) on the loop
path, and a shared-memory tree reduction by barrier loop fission and by fibers (the same kernel
kept on fibers by a __syncwarp), against numpy's equivalent expressions. One thread and all
threads (``KERNELBAY_CPU_THREADS`` is read when a module loads: each setting runs in a child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ._timing import goal, record, stats

SUITE = "cpu"

GELU = "runners: gelu, float32 (launch + synchronize)"
TREE = "runners: shared-memory tree reduction to block partials, float32 (launch + synchronize)"

_CHILD = r"""
import json, sys, time
import numpy as np
import kernelbay as kb
n, reps = int(sys.argv[1]), int(sys.argv[2])
GELU = '''
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))); }
}
'''
TREE = '''
__global__ void k(const float* x, float* partial, int n) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    KEEP
    if (t == 0) partial[blockIdx.x] = s[0];
}
'''
dev = kb.device("cpu")
xs = np.random.default_rng(0).standard_normal(n).astype(np.float32)
x, y = kb.asarray(xs, device=dev), kb.asarray(np.zeros(n, np.float32), device=dev)
blocks = (n + 255) // 256
p = kb.asarray(np.zeros(blocks, np.float32), device=dev)
gelu = kb.compile(kb.Source(GELU, lang="cuda", name="k"), dev)
loops = kb.compile(kb.Source(TREE.replace("KEEP", ""), lang="cuda", name="k"), dev)
fibers = kb.compile(kb.Source(TREE.replace("KEEP", "__syncwarp();"), lang="cuda", name="k"), dev)
assert not loops.handle.fibers and fibers.handle.fibers
def run(k, a, b): k.launch(blocks, 256, (a, b, n)); dev.synchronize()
cases = {
    "gelu kernelbay": lambda: run(gelu, x, y),
    "gelu numpy": lambda: 0.5 * xs * (1 + np.tanh(np.float32(0.7978845608) * (xs + np.float32(0.044715) * xs * xs * xs))),
    "tree kernelbay, loop fission": lambda: run(loops, x, p),
    "tree kernelbay, fibers": lambda: run(fibers, x, p),
    "tree numpy": lambda: xs.sum(),
}
out = {c: [] for c in cases}
for name, f in cases.items():
    f()
for _ in range(reps):
    for name, f in cases.items():
        if name == "tree kernelbay, fibers" and len(out[name]) >= 3:
            continue
        t0 = time.perf_counter(); f(); out[name].append((time.perf_counter() - t0) * 1e6)
print(json.dumps({"threads": dev.properties["threads"], "samples": out}))
"""


def _child(n: int, reps: int, threads: str) -> dict:
    env = {**os.environ, "KERNELBAY_CPU_THREADS": threads}
    r = subprocess.run([sys.executable, "-c", _CHILD, str(n), str(reps)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(quick: bool) -> list[dict]:
    n, reps = (1 << 16, 3) if quick else (1 << 22, 9)
    recs: list[dict] = []
    for threads in ("1", "0"):
        got = _child(n, reps, threads)
        label = "1 thread" if threads == "1" else f"all threads ({got['threads']})"
        s = got["samples"]
        recs.append(record(GELU, f"kernelbay, {label}", stats(s["gelu kernelbay"]), size=n))
        recs.append(record(GELU, f"numpy, {label} run", stats(s["gelu numpy"]), size=n))
        recs.append(record(TREE, f"kernelbay loop fission, {label}", stats(s["tree kernelbay, loop fission"]), size=n))
        recs.append(record(TREE, f"kernelbay fibers, {label}", stats(s["tree kernelbay, fibers"]), size=n))
        recs.append(record(TREE, f"numpy x.sum(), {label} run", stats(s["tree numpy"]), size=n))
    return recs


def goals(records: list[dict]) -> list[dict]:
    med = {(r["group"], r["name"]): r["median"] for r in records if "median" in r}
    out = []
    for label in [n.split(", ", 1)[1] for g, n in med if g == GELU and n.startswith("kernelbay, ")]:
        kb_t, np_t = med.get((GELU, f"kernelbay, {label}")), med.get((GELU, f"numpy, {label} run"))
        if kb_t and np_t:
            out.append(goal(f"cpu: gelu ≥ 1.0× numpy, {label} (numpy ÷ kernelbay)", np_t / kb_t, 1.0, True))
        kb_t, np_t = med.get((TREE, f"kernelbay loop fission, {label}")), med.get((TREE, f"numpy x.sum(), {label} run"))
        if kb_t and np_t:
            out.append(
                goal(f"cpu: tree reduction ≥ 0.3× numpy sum, {label} (numpy ÷ kernelbay)", np_t / kb_t, 0.3, True)
            )
    return out


def main() -> None:
    recs = run("--quick" in sys.argv)
    for r in recs:
        print(f"{r['group'][:60]:60} {r['name']:42} {r['median']:11.1f} us (p10 {r['p10']:.1f}, p90 {r['p90']:.1f})")
    for g in goals(recs):
        print(g)


if __name__ == "__main__":
    main()
