"""Barrier loop fission of kernels whose dynamic shared memory comes from a helper class:
cuda-samples' reduction kernels (``T *sdata = SharedMemory<T>();``, whose member holds
``extern __shared__ int __smem[];``), the corpus file unchanged, run on the loop path and, kept
on fibers by a ``volatile`` local (which the loop path never takes), on the fiber runner, with
the same bits (float sums: the order of the additions shows). reduce3's ``T mySum`` is stored
per thread because its entry makes T an arithmetic type."""

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
    n = block * blocks * (2 if name.startswith("reduce3") else 1)  # reduce3: two elements a thread
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)
    y = kb.asarray(np.full(blocks, -7, np.float32), device=cpu)
    k = kb.compile(kb.Source(text, lang="cuda", name=name), cpu)
    k.launch(blocks, block, (kb.asarray(x, device=cpu), y, np.uint32(n)), shared_mem=block * 4)
    return k, y.numpy(), x


@pytest.mark.parametrize("kernel", ["reduce0", "reduce1", "reduce2", "reduce3"])
@pytest.mark.parametrize("block", [256, 64], ids=str)
def test_shared_memory_helper_runs_as_loops(cpu, kernel, block):
    name = f"{kernel}<float>"
    plan = analysis.plan_cuda(kb.Source(REDUCTION, lang="cuda", name=name), [name])
    assert plan.runners == {name: "run_blocks"}, plan.why
    loops, y, x = _launch(cpu, REDUCTION, name, block, 5)
    fibers, y2, _ = _launch(cpu, _on_fibers(REDUCTION, kernel), name, block, 5)
    assert not loops.handle.fibers and fibers.handle.fibers
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_allclose(y, x.reshape(5, -1).sum(axis=1), rtol=1e-4, atol=1e-4)


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


def test_type_parameters_made_arithmetic_by_the_entry():
    head = "template <class T, unsigned int blockSize, typename U = int>"
    assert analysis.arithmetic_types(head, "k<float,256,unsigned int>") == {"T", "U"}
    assert analysis.arithmetic_types(head, "k<Pair, 256, double>") == {"U"}
    assert analysis.arithmetic_types(head, "k<std::pair<int, int>, 256>") == set()


PAIR = """
struct Pair { float a, b; __device__ Pair(float x) : a(x), b(x) {} };
template <class T> __global__ void k(float* y) {
    __shared__ float s[64];
    T v = T(y[threadIdx.x]);
    s[threadIdx.x] = v.a;
    __syncthreads();
    y[threadIdx.x] = s[(threadIdx.x + 1) % 64] + v.b;
}
"""


def test_a_local_of_a_class_type_argument_keeps_fibers():
    # (no default constructor: a per-thread array of Pair would not compile)
    plan = analysis.plan_cuda(kb.Source(PAIR, lang="cuda", name="k<Pair>"), ["k<Pair>"])
    assert plan.runners == {"k<Pair>": "run_fibers"}, plan.why
