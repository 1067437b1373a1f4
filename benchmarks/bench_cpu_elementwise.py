"""Elementwise real kernels on the cpu backend against numpy's expression on the same arrays, at
2^20 and 2^24 float32 (2^16 and 2^18 with ``--quick``), one thread and all threads (each setting
in a child: ``KERNELBAY_CPU_THREADS`` is read when a module loads; numpy in the same child,
interleaved with kernelbay):

* gelu: llm.c's ``gelu_forward_kernel1`` (fp32 form: ``0.5 x (1 + tanhf(s (x + 0.044715 x^3)))``);
* residual add: llm.c's ``residual_forward_kernel1`` (fp32 form: ``out = a + b``);
* AdamW step: llm.c's ``adamw_kernel2``, verbatim from tests/corpus/llm_c/adamw.cu (the
  moments, bias correction and decoupled weight decay, in place), against the same update
  written with numpy's in-place operations;
* saxpy: ``y = a x + y``.

Each kernel is launched with 256 threads per block and synchronized; numpy computes into
preallocated outputs where it can (``out=``), as a numpy user who cares about speed writes it.

Each timed call comes right after an untimed call of the same case, so that both sides meet the
caches in the same state. Timed in turn (kernelbay, numpy, kernelbay, ...) without it, numpy's
residual add read and wrote arrays its gelu had just touched (``xs``, ``o``), while kernelbay's
found its arrays evicted, and paid the write-backs of numpy's gelu: on the 2-core box at 2^20, 1
thread, the same residual kernel measured 1310 us after numpy's gelu and 635 us after
kernelbay's, numpy's add 754-792 us either way (docs/performance-cpu-speed.md).

The two sides of a pair also swap places every other repetition. In a fixed order (kernelbay,
then numpy, after the previous pair) numpy's residual add always came right after kernelbay's and
kernelbay's after numpy's gelu; with the numpy side first instead, the same child measured
numpy's add 658-688 us against 579-599, kernelbay's 596-635 against 593-631 (2^20, 1 thread,
three runs each): the order alone moved the ratio from 0.92-0.99 to 1.07-1.14.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ._timing import goal, record, stats

SUITE = "cpu"

KERNELS = ("gelu", "residual", "adamw", "saxpy")
GROUP = "elementwise: {kernel}, 2^{log2} float32 (launch + synchronize)"
_LLMC = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "llm_c"

_CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import kernelbay as kb
n, reps, llmc = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
SRC = '''
#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)
__global__ void gelu_forward_kernel1(float* out, const float* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float xi = inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = 0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube)));
    }
}
__global__ void residual_forward_kernel1(float* out, const float* inp1, const float* inp2, int N) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) {
        out[idx] = inp1[idx] + inp2[idx];
    }
}
__global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''
dev = kb.device("cpu")
rng = np.random.default_rng(0)
f32 = np.float32
xs, bs = rng.standard_normal(n, dtype=f32), rng.standard_normal(n, dtype=f32)
x, b, out = kb.asarray(xs, device=dev), kb.asarray(bs, device=dev), kb.zeros(n, "float32", device=dev)
gelu = kb.compile(kb.Source(SRC, "cuda", name="gelu_forward_kernel1"), dev)
resid = kb.compile(kb.Source(SRC, "cuda", name="residual_forward_kernel1"), dev)
saxpy = kb.compile(kb.Source(SRC, "cuda", name="saxpy"), dev)
adamw = kb.compile(kb.Source((llmc / "adamw.cu").read_text(), "cuda", name="adamw_kernel2",
                             headers={"common.h": (llmc / "common.h").read_text()}), dev)
blocks = (n + 255) // 256
def run(k, args):
    k.launch(blocks, 256, args)
    dev.synchronize()
# AdamW state: parameters, gradients, moments (v >= 0)
ps, gs, ms = (rng.standard_normal(n, dtype=f32) for _ in range(3))
vs = np.abs(rng.standard_normal(n, dtype=f32))
p, g, m, v = (kb.asarray(a, device=dev) for a in (ps, gs, ms, vs))
lr, b1, b2, eps, wd, step = f32(1e-3), f32(0.9), f32(0.999), f32(1e-8), f32(0.01), 3
c1, c2 = f32(1 - 0.9**step), f32(1 - 0.999**step)
ys = np.zeros(n, f32); t1 = np.empty(n, f32); t2 = np.empty(n, f32); o = np.empty(n, f32)
s = f32(np.sqrt(2.0 / np.pi)); k3 = f32(0.044715); half = f32(0.5); a = f32(2.0)
def np_gelu():
    np.multiply(xs, xs, out=t1); np.multiply(t1, xs, out=t1); np.multiply(t1, k3, out=t1)
    np.add(t1, xs, out=t1); np.multiply(t1, s, out=t1); np.tanh(t1, out=t1); np.add(t1, 1, out=t1)
    np.multiply(t1, xs, out=t1); np.multiply(t1, half, out=o)
def np_adamw():
    np.multiply(ms, b1, out=ms); np.multiply(gs, 1 - b1, out=t1); np.add(ms, t1, out=ms)
    np.multiply(gs, gs, out=t1); np.multiply(t1, 1 - b2, out=t1); np.multiply(vs, b2, out=vs); np.add(vs, t1, out=vs)
    np.divide(vs, c2, out=t1); np.sqrt(t1, out=t1); np.add(t1, eps, out=t1)
    np.divide(ms, c1, out=t2); np.divide(t2, t1, out=t2)
    np.multiply(ps, wd, out=t1); np.add(t2, t1, out=t2); np.multiply(t2, lr, out=t2); np.subtract(ps, t2, out=ps)
def np_saxpy():
    np.multiply(xs, a, out=t1); np.add(ys, t1, out=ys)
cases = {
    "gelu kernelbay": lambda: run(gelu, (out, x, n)),
    "gelu numpy": np_gelu,
    "residual kernelbay": lambda: run(resid, (out, x, b, n)),
    "residual numpy": lambda: np.add(xs, bs, out=o),
    "adamw kernelbay": lambda: run(adamw, (p, g, m, v, n, lr, b1, b2, c1, c2, eps, wd)),
    "adamw numpy": np_adamw,
    "saxpy kernelbay": lambda: run(saxpy, (a, x, out, n)),
    "saxpy numpy": np_saxpy,
}
# the kernels compute what numpy does (checked once, before timing)
run(gelu, (out, x, n)); np_gelu()
np.testing.assert_allclose(out.numpy(), o, rtol=1e-5, atol=1e-6)
run(resid, (out, x, b, n)); np.testing.assert_array_equal(out.numpy(), xs + bs)
samples = {c: [] for c in cases}
for f in cases.values():
    f()
names = list(cases)  # pairs: kernelbay, numpy
for r in range(reps):
    # each pair in turn, the two sides swapped every other repetition: each side follows the same
    # neighbours as often (the case run before a pair changes the time of the one that follows it)
    for name in names if r % 2 == 0 else [names[i ^ 1] for i in range(len(names))]:
        f = cases[name]
        f()  # untimed: each case is timed right after itself, never after the other side's work
        t0 = time.perf_counter(); f(); samples[name].append((time.perf_counter() - t0) * 1e6)
print(json.dumps({"threads": dev.properties["threads"], "samples": samples}))
"""


def _child(n: int, reps: int, threads: str) -> dict:
    env = {**os.environ, "KERNELBAY_CPU_THREADS": threads}
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(n), str(reps), str(_LLMC)], env=env, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(quick: bool) -> list[dict]:
    # Medians of 25 at 2^20 (a few ms a case: 9 left them at the mercy of one busy moment on a
    # shared machine, 0.3x-7x between runs), of 5 at 2^24 (0.1-0.3 s a case).
    sizes, reps = ((16, 18), 3) if quick else ((20, 24), 25)
    recs: list[dict] = []
    for log2 in sizes:
        for threads in ("1", "0"):
            got = _child(1 << log2, reps if log2 < 24 else 5, threads)
            label = "1 thread" if threads == "1" else f"all threads ({got['threads']})"
            s = got["samples"]
            for k in KERNELS:
                group = GROUP.format(kernel=k, log2=log2)
                recs.append(record(group, f"kernelbay, {label}", stats(s[f"{k} kernelbay"]), size=1 << log2))
                recs.append(record(group, f"numpy, {label} run", stats(s[f"{k} numpy"]), size=1 << log2))
    return recs


def goals(records: list[dict]) -> list[dict]:
    med = {(r["group"], r["name"]): r["median"] for r in records if "median" in r}
    out = []
    for group, name in sorted(med):
        if not name.startswith("kernelbay, "):
            continue
        label = name.split(", ", 1)[1]
        np_t = med.get((group, f"numpy, {label} run"))
        if np_t:
            what = group.split(": ", 1)[1].split(" (")[0]
            out.append(
                goal(f"cpu: {what} ≥ 1.0× numpy, {label} (numpy ÷ kernelbay)", np_t / med[(group, name)], 1.0, True)
            )
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    recs = run(quick)
    for r in recs:
        print(f"{r['group']:60} {r['name']:28} {r['median']:10.1f} µs")
    for g in goals(recs):
        print(f"{'met ' if g['met'] else 'MISS'} {g['goal']}: {g['value']:.2f}")


if __name__ == "__main__":
    main()
