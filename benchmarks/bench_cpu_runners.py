"""The cpu runners side by side with numpy, in one run: an elementwise kernel (gelu) on the loop
path; block reductions of 2^22 floats to block partials -- a shared-memory tree, warp shuffles
(llm.c's blockReduce shape: a warp's shuffles, the warps' sums through shared memory, shuffles
again) and cooperative groups (``cg::reduce`` over ``tiled_partition<32>``) -- by barrier loop
fission, and each again on fibers (the same kernel kept there by a ``volatile`` local, which the
loop path never takes: what ran before warp operations split loops); and llm.c's layernorm
(``layernorm_forward_kernel5``, cooperative groups) and softmax (``softmax_forward_kernel2``,
shared-memory trees) forward kernels, and the kernels of a warp per row that return early
(``if (idx >= N) return;``: ``layernorm_forward_kernel3``, ``softmax_forward_online_kernel8``;
``layernorm_forward_kernel6``, whose ``warpReduceSum`` calls are inlined, one inside an expression)
or may (``softmax_forward_kernel7``, a row per block), verbatim from tests/corpus/llm_c, over
B*T = 4096 rows of C = 768, against numpy's expressions. One thread and all threads (``KERNELBAY_CPU_THREADS`` is
read when a module loads: each setting runs in a child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ._timing import goal, record, stats

SUITE = "cpu"

GELU = "runners: gelu, float32 (launch + synchronize)"
TREE = "runners: shared-memory tree reduction to block partials, float32 (launch + synchronize)"
SHFL = "runners: warp-shuffle reduction to block partials, float32 (launch + synchronize)"
CG = "runners: cooperative-groups reduction to block partials, float32 (launch + synchronize)"
LAYERNORM = "runners: llm.c layernorm_forward_kernel5, 4096 x 768 float32 (launch + synchronize)"
SOFTMAX = "runners: llm.c softmax_forward_kernel2, 4096 x 768 float32 (launch + synchronize)"
LAYERNORM3 = "runners: llm.c layernorm_forward_kernel3, 4096 x 768 float32 (launch + synchronize)"
SOFTMAX7 = "runners: llm.c softmax_forward_kernel7, 4096 x 768 float32 (launch + synchronize)"
ONLINE8 = "runners: llm.c softmax_forward_online_kernel8, 4096 x 768 float32 (launch + synchronize)"
LAYERNORM6 = "runners: llm.c layernorm_forward_kernel6, 4096 x 768 float32 (launch + synchronize)"
_REDUCTIONS = {"tree": TREE, "shfl": SHFL, "cg": CG}
#: key -> (group, the numpy expression's key)
_ROWS = {
    "layernorm": (LAYERNORM, "layernorm"),
    "softmax": (SOFTMAX, "softmax"),
    "layernorm3": (LAYERNORM3, "layernorm"),
    "softmax7": (SOFTMAX7, "softmax"),
    "online8": (ONLINE8, "softmax"),
    "layernorm6": (LAYERNORM6, "layernorm"),
}
_LLMC = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "llm_c"

_CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import kernelbay as kb
n, reps, rows, cols, llmc = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
GELU = '''
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))); }
}
'''
TREE = '''
__global__ void k(const float* x, float* partial, int n) {
    KEEP
    __shared__ float s[256];
    const int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
        if (t < w) s[t] += s[t + w];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}
'''
SHFL = '''
__global__ void k(const float* x, float* partial, int n) {
    KEEP
    __shared__ float warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32;
    float v = i < n ? x[i] : 0.0f;
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    float w = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
    for (int off = 16; off > 0; off /= 2) w += __shfl_xor_sync(0xffffffffu, w, off);
    if (threadIdx.x == 0) partial[blockIdx.x] = w;
}
'''
CG = '''
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* partial, int n) {
    KEEP
    __shared__ float warp_sums[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = cg::reduce(warp, i < n ? x[i] : 0.0f, cg::plus<float>());
    if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = v;
    block.sync();
    float w = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()] : 0.0f;
    w = cg::reduce(warp, w, cg::plus<float>());
    if (block.thread_rank() == 0) partial[blockIdx.x] = w;
}
'''
KEEP = "volatile int keep_fibers = 0; (void)keep_fibers;"
dev = kb.device("cpu")
rng = np.random.default_rng(0)
xs = rng.standard_normal(n).astype(np.float32)
x, y = kb.asarray(xs, device=dev), kb.asarray(np.zeros(n, np.float32), device=dev)
blocks = (n + 255) // 256
p = kb.asarray(np.zeros(blocks, np.float32), device=dev)
gelu = kb.compile(kb.Source(GELU, lang="cuda", name="k"), dev)
def run(k, grid, block, args, shared=0):
    k.launch(grid, block, args, shared_mem=shared)
    dev.synchronize()
cases = {
    "gelu kernelbay": lambda: run(gelu, blocks, 256, (x, y, n)),
    "gelu numpy": lambda: 0.5 * xs * (1 + np.tanh(np.float32(0.7978845608) * (xs + np.float32(0.044715) * xs * xs * xs))),
    "sum numpy": lambda: xs.sum(),
}
slow = set()
for name, text in (("tree", TREE), ("shfl", SHFL), ("cg", CG)):
    loops = kb.compile(kb.Source(text.replace("KEEP", ""), lang="cuda", name="k"), dev)
    fibers = kb.compile(kb.Source(text.replace("KEEP", KEEP), lang="cuda", name="k"), dev)
    assert not loops.handle.fibers and fibers.handle.fibers, name
    cases[name + " loops"] = lambda k=loops: run(k, blocks, 256, (x, p, n))
    cases[name + " fibers"] = lambda k=fibers: run(k, blocks, 256, (x, p, n))
    slow.add(name + " fibers")
# llm.c's kernels verbatim, with their own launch shapes (layernorm_forward.cu, softmax_forward.cu)
hdr = {"common.h": (llmc / "common.h").read_text()}
xr = rng.standard_normal((rows, cols)).astype(np.float32)
w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
dx, dw, db = (kb.asarray(a, device=dev) for a in (xr.ravel(), w, b))
out, mean, rstd = (kb.asarray(np.zeros(s, np.float32), device=dev) for s in (rows * cols, rows, rows))
for name, file, kernel, launch in (
    ("layernorm", "layernorm_forward.cu", "layernorm_forward_kernel5",
     lambda k: run(k, rows, 256, (out, mean, rstd, dx, dw, db, rows, cols))),
    ("softmax", "softmax_forward.cu", "softmax_forward_kernel2",
     lambda k: run(k, rows, 256, (out, dx, rows, cols), 256 * 4)),
    ("layernorm3", "layernorm_forward.cu", "layernorm_forward_kernel3",
     lambda k: run(k, (rows * 32 + 255) // 256, 256, (out, mean, rstd, dx, dw, db, rows, cols))),
    ("softmax7", "softmax_forward.cu", "softmax_forward_kernel7",
     lambda k: run(k, rows, 256, (out, dx, rows, cols), 2 * 256 // 32 * 4)),
    ("online8", "softmax_forward.cu", "softmax_forward_online_kernel8",
     lambda k: run(k, (rows * 32 + 255) // 256, 256, (out, dx, rows, cols))),
    ("layernorm6", "layernorm_forward.cu", "layernorm_forward_kernel6",
     lambda k: run(k, (rows + 3) // 4, (32, 4), (out, mean, rstd, dx, dw, db, rows, cols), (2 + 4) * cols * 4)),
):
    text = (llmc / file).read_text()
    at = text.index("{", text.index("void " + kernel + "(")) + 1
    loops = kb.compile(kb.Source(text, lang="cuda", name=kernel, headers=hdr), dev)
    fibers = kb.compile(kb.Source(text[:at] + KEEP + text[at:], lang="cuda", name=kernel, headers=hdr), dev)
    assert not loops.handle.fibers and fibers.handle.fibers, name
    cases[name + " loops"] = lambda k=loops, f=launch: f(k)
    cases[name + " fibers"] = lambda k=fibers, f=launch: f(k)
    slow.add(name + " fibers")
def np_layernorm():
    m = xr.mean(-1, keepdims=True)
    d = xr - m
    s = 1.0 / np.sqrt((d * d).mean(-1, keepdims=True) + np.float32(1e-5))
    return d * s * w + b
def np_softmax():
    e = np.exp(xr - xr.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
cases["layernorm numpy"] = np_layernorm
cases["softmax numpy"] = np_softmax

out_s = {c: [] for c in cases}
for name, f in cases.items():
    f()
for _ in range(reps):
    for name, f in cases.items():
        if name in slow and len(out_s[name]) >= 3:
            continue
        t0 = time.perf_counter(); f(); out_s[name].append((time.perf_counter() - t0) * 1e6)
print(json.dumps({"threads": dev.properties["threads"], "samples": out_s}))
"""


def _child(n: int, reps: int, rows: int, threads: str) -> dict:
    env = {**os.environ, "KERNELBAY_CPU_THREADS": threads}
    argv = [sys.executable, "-c", _CHILD, str(n), str(reps), str(rows), "768", str(_LLMC)]
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(quick: bool) -> list[dict]:
    n, reps, rows = (1 << 16, 3, 64) if quick else (1 << 22, 9, 4096)
    recs: list[dict] = []
    for threads in ("1", "0"):
        got = _child(n, reps, rows, threads)
        label = "1 thread" if threads == "1" else f"all threads ({got['threads']})"
        s = got["samples"]
        recs.append(record(GELU, f"kernelbay, {label}", stats(s["gelu kernelbay"]), size=n))
        recs.append(record(GELU, f"numpy, {label} run", stats(s["gelu numpy"]), size=n))
        for key, group in _REDUCTIONS.items():
            recs.append(record(group, f"kernelbay loop fission, {label}", stats(s[f"{key} loops"]), size=n))
            recs.append(record(group, f"kernelbay fibers, {label}", stats(s[f"{key} fibers"]), size=n))
            recs.append(record(group, f"numpy x.sum(), {label} run", stats(s["sum numpy"]), size=n))
        for key, (group, ref) in _ROWS.items():
            recs.append(record(group, f"kernelbay loop fission, {label}", stats(s[f"{key} loops"]), size=rows))
            recs.append(record(group, f"kernelbay fibers, {label}", stats(s[f"{key} fibers"]), size=rows))
            recs.append(record(group, f"numpy, {label} run", stats(s[f"{ref} numpy"]), size=rows))
    return recs


def goals(records: list[dict]) -> list[dict]:
    med = {(r["group"], r["name"]): r["median"] for r in records if "median" in r}
    out = []
    for label in [n.split(", ", 1)[1] for g, n in med if g == GELU and n.startswith("kernelbay, ")]:
        kb_t, np_t = med.get((GELU, f"kernelbay, {label}")), med.get((GELU, f"numpy, {label} run"))
        if kb_t and np_t:
            out.append(goal(f"cpu: gelu ≥ 1.0× numpy, {label} (numpy ÷ kernelbay)", np_t / kb_t, 1.0, True))
        for key, group in _REDUCTIONS.items():
            kb_t = med.get((group, f"kernelbay loop fission, {label}"))
            np_t = med.get((group, f"numpy x.sum(), {label} run"))
            if kb_t and np_t:
                what = {"tree": "tree", "shfl": "warp-shuffle", "cg": "cooperative-groups"}[key]
                out.append(
                    goal(f"cpu: {what} reduction ≥ 0.3× numpy sum, {label} (numpy ÷ kernelbay)", np_t / kb_t, 0.3, True)
                )
        for group, _ in _ROWS.values():
            kb_t = med.get((group, f"kernelbay loop fission, {label}"))
            np_t = med.get((group, f"numpy, {label} run"))
            if kb_t and np_t:
                what = group.split("llm.c ", 1)[1].split(",", 1)[0]
                out.append(goal(f"cpu: llm.c {what} ≥ 0.5× numpy, {label} (numpy ÷ kernelbay)", np_t / kb_t, 0.5, True))
    return out


def main() -> None:
    recs = run("--quick" in sys.argv)
    for r in recs:
        print(f"{r['group'][:60]:60} {r['name']:42} {r['median']:11.1f} us (p10 {r['p10']:.1f}, p90 {r['p90']:.1f})")
    for g in goals(recs):
        print(g)


if __name__ == "__main__":
    main()
