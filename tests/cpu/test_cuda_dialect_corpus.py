"""CUDA dialect points the broadened kernel corpus (tests/corpus, issue #24) found on the cpu
backend, each in the idiom of the public file that showed it: the runtime's types without an
include (an error-checking helper beside the kernels, as in NVIDIA's blog samples), tile
shuffles of 16-byte values (cuda-samples' shfl_integral_image), and several __constant__
variables in one declaration (the blog's finite-difference stencil weights)."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest

RUNTIME_TYPES = r"""
#include <stdio.h>
inline cudaError_t checkCuda(cudaError_t result) {
    if (result != cudaSuccess) fprintf(stderr, "CUDA Runtime Error: %s\n", cudaGetErrorString(result));
    return result;
}
__global__ void k(int* d, cudaMemcpyKind kind) { d[threadIdx.x] = threadIdx.x + (int)kind; }
"""


def test_runtime_types_need_no_include(cpu):
    """nvcc includes cuda_runtime.h in every .cu file: cudaError_t and kin compile without it."""
    d = kb.asarray(np.zeros(32, np.int32), device=cpu)
    kb.compile(kb.Source(RUNTIME_TYPES, lang="cuda", name="k"), cpu).launch(1, 32, (d, np.int32(1)))
    np.testing.assert_array_equal(d.numpy(), np.arange(32) + 1)


TILE_SHFL = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
struct Three { float a, b, c; };
__global__ void k(const uint4* in, uint4* xor_out, uint4* up_out, Three* three) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    uint4 v = in[i];
    xor_out[i] = tile.shfl_xor(v, 1);
    up_out[i] = tile.shfl_up(v, 2);
    Three t = {v.x * 1.0f, v.y * 2.0f, v.z * 3.0f};
    three[i] = tile.shfl_down(t, 3);
}
"""


def test_tile_shuffles_move_values_over_8_bytes(cpu):
    n = 64
    x = np.random.default_rng(0).integers(0, 1 << 20, size=(n, 4), dtype=np.uint32)
    xo = kb.asarray(np.zeros_like(x), device=cpu)
    up = kb.asarray(np.zeros_like(x), device=cpu)
    three = kb.asarray(np.zeros((n, 3), np.float32), device=cpu)
    k = kb.compile(kb.Source(TILE_SHFL, lang="cuda", name="k"), cpu)
    k.launch(2, 32, (kb.asarray(x, device=cpu), xo, up, three))
    lane = np.arange(n) % 32
    np.testing.assert_array_equal(xo.numpy(), x[np.arange(n) ^ 1])
    src = np.where(lane >= 2, np.arange(n) - 2, np.arange(n))  # shfl_up keeps the value below delta
    np.testing.assert_array_equal(up.numpy(), x[src])
    src = np.where(lane + 3 < 32, np.arange(n) + 3, np.arange(n))
    want = x[src][:, :3].astype(np.float32) * np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(three.numpy(), want)


def test_raw_shuffle_of_16_bytes_still_refused(cpu):
    """__shfl_xor_sync takes scalars of up to 8 bytes under nvcc too: only tiles split larger values."""
    src = "__global__ void k(uint4* p) { p[threadIdx.x] = __shfl_xor_sync(0xffffffffu, p[threadIdx.x], 1); }"
    with pytest.raises(kb.CompileError, match="at most 8 bytes"):
        kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)


MULTI_CONSTANT = r"""
__constant__ float c_ax, c_bx, c_cx, c_dx;
__constant__ int c_n[2], c_m = 3;
__global__ void k(float* out, int* ints) {
    out[0] = c_ax; out[1] = c_bx; out[2] = c_cx; out[3] = c_dx;
    ints[0] = c_n[0]; ints[1] = c_n[1]; ints[2] = c_m;
}
"""


def test_every_variable_of_one_constant_declaration_is_a_module_global(cpu):
    k = kb.compile(kb.Source(MULTI_CONSTANT, lang="cuda", name="k"), cpu)
    for i, name in enumerate(("c_ax", "c_bx", "c_cx", "c_dx")):
        k.set_global(name, np.float32(i + 0.5))
    k.set_global("c_n", np.array([7, 8], np.int32))
    out = kb.asarray(np.zeros(4, np.float32), device=cpu)
    ints = kb.asarray(np.zeros(3, np.int32), device=cpu)
    k.launch(1, 1, (out, ints))
    np.testing.assert_array_equal(out.numpy(), [0.5, 1.5, 2.5, 3.5])
    np.testing.assert_array_equal(ints.numpy(), [7, 8, 3])


SHARED_AFTER_TYPE = r"""
__global__ void k(const float* in, float* out) {
    extern float __shared__ smem[];
    extern unsigned int __shared__ counts[];
    smem[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = smem[blockDim.x - 1 - threadIdx.x] + (counts == (unsigned int*)smem ? 1.0f : 0.0f);
}
"""


def test_extern_shared_after_the_type_is_dynamic_shared_memory(cpu):
    """`extern float __shared__ smem[];` (cuda-samples' threadFenceReduction) is the launch's
    dynamic shared memory, as `extern __shared__ float smem[];` is; every such array starts there."""
    x = np.arange(64, dtype=np.float32)
    out = kb.asarray(np.zeros(64, np.float32), device=cpu)
    k = kb.compile(kb.Source(SHARED_AFTER_TYPE, lang="cuda", name="k"), cpu)
    k.launch(1, 64, (kb.asarray(x, device=cpu), out), shared_mem=64 * 4)
    np.testing.assert_array_equal(out.numpy(), x[::-1] + 1)


@pytest.mark.parametrize("name", ["__shfl_down", "__shfl_xor", "__ballot", "__all"])
def test_a_warp_function_without_sync_is_refused_by_name_and_line(cpu, name) -> None:
    """Pre-CUDA 9 warp functions (removed for sm_70+) are named with their line and what to use,
    not a raw g++ 'not declared'; a source that maps them onto _sync with a macro compiles."""
    args = {"__shfl_down": "v, 1", "__shfl_xor": "v, 1", "__ballot": "v > 0", "__all": "v > 0"}[name]
    src = f'extern "C" __global__ void k(float* y) {{\n    float v = y[threadIdx.x];\n    y[threadIdx.x] = {name}({args});\n}}\n'
    with pytest.raises(
        kb.CompileError,
        match=rf"{name}\(\), the warp function without _sync that CUDA 9 removed \(use {name}_sync\) at kernel\.cu:3",
    ):
        kb.compile(kb.Source(src, "cuda"), cpu)
    mapped = f"#define {name}(...) {name}_sync(0xffffffffu, __VA_ARGS__)\n" + src
    kb.compile(kb.Source(mapped, "cuda"), cpu)


@pytest.mark.parametrize("name", ["N", "T", "K", "I", "A", "F", "Op", "BLOCK"])
def test_a_one_letter_define_never_breaks_the_prelude(cpu, name) -> None:
    """``-DN=2`` (or T, K, ...) as tuning sweeps and nvcc users pass them: kernelbay's own headers
    name no template parameter or local that such a macro would replace."""
    src = (
        'extern "C" __global__ void k(float* y) {\n'
        "    __shared__ float s[32];\n"
        "    s[threadIdx.x] = y[threadIdx.x];\n"
        "    __syncthreads();\n"
        "    float v = s[threadIdx.x];\n"
        "    v += __shfl_xor_sync(0xffffffffu, v, 1);\n"
        f"    y[threadIdx.x] = v * (float){name};\n"
        "}\n"
    )
    k = kb.compile(kb.Source(src, "cuda", options=(f"-D{name}=2",)), cpu)
    x = np.arange(32, dtype=np.float32)
    y = kb.asarray(x, device=cpu)
    k.launch(1, 32, (y,))
    cpu.synchronize()
    np.testing.assert_array_equal(y.numpy(), (x + x.reshape(-1, 2)[:, ::-1].ravel()) * 2)
