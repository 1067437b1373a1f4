"""Barrier loop fission of kernels whose dynamic shared memory comes from a helper class:
cuda-samples' reduction kernels (``T *sdata = SharedMemory<T>();``, whose member holds
``extern __shared__ int __smem[];``), the corpus file unchanged, run on the loop path and, kept
on fibers by a ``volatile`` local (which the loop path never takes), on the fiber runner, with
the same bits (float sums: the order of the additions shows)."""

from __future__ import annotations

import pathlib

import kernelbay as kb
import numpy as np
import pytest
from kernelbay_cpu import analysis

REDUCTION = (pathlib.Path(__file__).parents[1] / "corpus" / "cuda_samples" / "reduction_kernel.cu").read_text()
KEEP_FIBERS = "volatile int keep_fibers = 0; (void)keep_fibers;"


def _on_fibers(text: str, kernel: str) -> str:
    at = text.index("{", text.index(f"__global__ void {kernel}(")) + 1
    return text[:at] + " " + KEEP_FIBERS + text[at:]


def _launch(cpu, text: str, name: str, block: int, blocks: int):
    n = block * blocks
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    y = kb.asarray(np.full(blocks, -7, np.float32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name=name), cpu)
    k.launch(blocks, block, (kb.asarray(x, device=cpu), y, np.uint32(n)), shared_mem=block * 4)
    return k, y.numpy(), x


@pytest.mark.parametrize("kernel", ["reduce0", "reduce1", "reduce2"])
@pytest.mark.parametrize("block", [256, 64], ids=str)
def test_shared_memory_helper_runs_as_loops(cpu, kernel, block):
    name = f"{kernel}<float>"
    plan = analysis.plan_cuda(kb.Source(REDUCTION, lang="cuda", name=name), [name])
    assert plan.runners == {name: "run_blocks"}, plan.why
    loops, y, x = _launch(cpu, REDUCTION, name, block, 5)
    fibers, y2, _ = _launch(cpu, _on_fibers(REDUCTION, kernel), name, block, 5)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_allclose(y, x.reshape(5, block).sum(axis=1), rtol=1e-4, atol=1e-4)


def test_a_barrier_in_a_class_still_keeps_fibers():
    text = """
struct Sync {
    __device__ void wait() { __syncthreads(); }
};
__global__ void k(float* y) {
    extern __shared__ float s[];
    s[threadIdx.x] = threadIdx.x;
    Sync().wait();
    __syncthreads();
    y[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
"""
    plan = analysis.plan_cuda(kb.Source(text, lang="cuda", name="k"), ["k"])
    assert plan.runners == {"k": "run_fibers"}, plan.why


def test_a_kernel_without_a_barrier_of_its_own_keeps_fibers_with_the_helper():
    # (no barrier to split at: the class's dynamic shared memory is served on fibers, as before)
    text = """
template <class T> struct SharedMemory {
    __device__ inline operator T *() {
        extern __shared__ int __smem[];
        return (T *)__smem;
    }
};
__global__ void k(float* y) {
    float* s = SharedMemory<float>();
    s[threadIdx.x] = threadIdx.x;
    y[threadIdx.x] = s[threadIdx.x];
}
"""
    plan = analysis.plan_cuda(kb.Source(text, lang="cuda", name="k"), ["k"])
    assert plan.runners == {"k": "run_fibers"}, plan.why
