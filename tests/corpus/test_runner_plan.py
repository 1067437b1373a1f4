"""The cpu runner each real kernel gets (tests/corpus/runner_plan.py, issue #25): the kernels
below run as loops over the block's threads, not as fibers, and every kernel left on fibers says
why. Read from the plan only: nothing is compiled."""

from __future__ import annotations

import pytest

from tests.corpus.runner_plan import all_rows

#: Kernels with barriers or warp operations that the loop path takes (each was on fibers once, or
#: is a shape the loop path must keep).
ON_LOOPS = {
    "cuda_samples/transpose:transposeCoalesced",
    "cuda_samples/simpleVote:VoteAnyKernel1",
    "llm_c/softmax_forward:softmax_forward_kernel4",
    "llm_c/layernorm_forward:layernorm_forward_kernel5",
    "dev_blog/finite-difference:derivative_y",
    # early returns (fission_exit.py): whole warps leave before cg::reduce or shuffles
    "llm_c/layernorm_forward:layernorm_forward_kernel3",
    "llm_c/layernorm_forward:layernorm_forward_kernel4",
    "llm_c/softmax_forward:softmax_forward_kernel7",
    "llm_c/softmax_forward:softmax_forward_online_kernel8",
    # a struct of plain data (SumMax) stored per thread
    "llm_c/softmax_forward:softmax_forward_online_kernel2",
    "cuda_samples/shfl_scan:uniform_add",
    # break and continue inside a region's own loops
    "learn_cuda/convolution:convolution_kernel_v3",
    # parameters the body assigns, a copy per thread (sgemm's `A += ...`); loops bounded by
    # template parameters and constant macros; `uint` locals
    "sgemm_cuda/3_smem:sgemm_shared_mem_block<32>",
    "cuda_samples/histogram64:mergeHistogram64Kernel",
    "cuda_samples/histogram256:mergeHistogram256Kernel",
    # preprocessor lines in the body: conditionals decided by the build's -D options, pragmas
    "cuda_samples/convolutionSeparable:convolutionRowsKernel",
    "cuda_samples/convolutionSeparable:convolutionColumnsKernel",
    "kernel_tuner/reduction:sum_floats[float,smem]",
    # local arrays of constant sizes, each thread's copy in a buffer of the block's
    "sgemm_cuda/4_1d_blocktiling:sgemm1DBlocktiling<64,64,8,8>",
    "sgemm_cuda/5_2d_blocktiling:sgemm2DBlocktiling<128,128,8,8,8>",
    "kernel_tuner/convolution:convolution_kernel",
    "kernel_tuner/convolution:convolution_kernel[tiled,ldg]",
    # CUDA vector types (uint4), uchar, `T     *p` declarations stored per thread
    "cuda_samples/scan:uniformUpdate",
    "cuda_samples/histogram64:histogram64Kernel",
    "cuda_samples/histogram256:histogram256Kernel",
    # uniform loops inside uniform loops and blocks; a local declared again in a sibling loop
    "cuda_samples/bitonicSort:bitonicSortShared",
    "cuda_samples/bitonicSort:bitonicSortShared1",
    "cuda_samples/bitonicSort:bitonicMergeShared",
    # a region's loops declaring a per-thread local's name again (renamed in their scope)
    "sgemm_cuda/6_vectorize:sgemmVectorize<128,128,8,8,8>",
    "dev_blog/finite-difference:derivative_y_lPencils",
    "dev_blog/finite-difference:derivative_z_lPencils",
    # a loop around barriers counting a local declared before it (the block's variable)
    "kernel_tuner/matmul:matmul_kernel",
    # a vote in an if's condition; `extern float __shared__` (the type first)
    "cuda_samples/simpleVote:VoteAnyKernel3",
    # SharedMemory<T>'s extern __shared__ in a member; `T *sdata` (T a template parameter) per thread
    "cuda_samples/reduction:reduce0<int>",
    "cuda_samples/reduction:reduce1<int>",
    "cuda_samples/reduction:reduce2<int>",
    # `T mySum` where the entry makes T an arithmetic type
    "cuda_samples/reduction:reduce3<int>",
    # warp operations inside `if (cta.thread_rank() < 32)` / `if (ti < 32)` (fission_if.py); a
    # loop bounded by a tile's size()
    "cuda_samples/reduction:reduce4<int,256>",
    "cuda_samples/reduction:reduce5<int,256>",
    "cuda_samples/reduction:reduce6<int,256,true>",
    "kernel_tuner/reduction:sum_floats[float4,shfl]",
    # shuffles of full masks inside `if (i < nrows)`, i a warp's row: each thread's test, whole
    # warps agreeing at run time
    "kernel_tuner/spmv:spmv_kernel",
    # a helper's call inside an expression (`v = warpReduceSum(v) / C;`) inlined; `x128* s_in`, a
    # pointer to a type a header names, stored per thread
    "llm_c/layernorm_forward:layernorm_forward_kernel6",
}


@pytest.fixture(scope="module")
def rows():
    return {r.id: r for r in all_rows()}


def test_each_kernel_has_one_row_and_a_runner(rows):
    from tests.corpus.all_cases import CASES

    assert {c.id for c in CASES} <= set(rows)
    assert {r.runner for r in rows.values()} <= {"run_blocks", "run_fibers", "run_threads", "refused"}


def test_kernels_on_fibers_say_why(rows):
    for r in rows.values():
        if r.runner == "run_fibers":
            assert r.giveup.strip(), r.id


@pytest.mark.parametrize("case_id", sorted(ON_LOOPS))
def test_these_kernels_run_as_loops(rows, case_id):
    r = rows[case_id]
    assert r.runner == "run_blocks" and "loop boundaries" in r.why, (r.runner, r.why)
