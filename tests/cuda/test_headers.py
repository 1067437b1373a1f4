"""Headers under NVRTC: the includes real CUDA kernels carry compile (kernelbay's shims in
kernelbay_cuda/include, the toolkit's and CCCL's headers), host-only ones are harmless, the rest
are refused naming the include and its line, and a shim's content is part of the cache key.
Compile only: no GPU needed."""

from __future__ import annotations

import shutil

import kernelbay as kb
import pytest
from kernelbay.errors import CompileError
from kernelbay_cuda import nvrtc

KERNEL = 'extern "C" __global__ void k(float* y) {{ {body} }}\n'

# (header, a device use of it): kernelbay's shims, which need nothing else installed.
SHIMMED = [
    ("assert.h", "assert(y != nullptr);"),
    ("cassert", "assert(y[0] >= 0.0f);"),
    ("float.h", "y[0] = FLT_MAX + FLT_EPSILON + (float)DBL_MANT_DIG;"),
    ("cfloat", "y[0] = FLT_MIN;"),
    ("limits.h", "y[0] = (float)INT_MAX + CHAR_BIT;"),
    ("climits", "y[0] = (float)UINT_MAX;"),
    ("stdint.h", "int64_t a = INT64_MAX; uint8_t b = 3; y[0] = (float)(a + b);"),
    ("cstdint", "std::uint32_t a = UINT32_MAX; y[0] = (float)a;"),
    ("math.h", "y[0] = (float)M_PI + sqrtf(y[1]) + (isinf(y[2]) ? 0.0f : INFINITY);"),
    ("cmath", "y[0] = std::sqrt(y[1]) + std::fabs(y[2]) + (std::isnan(y[3]) ? 1.0f : 0.0f);"),
    ("stdio.h", 'printf("%f\\n", y[0]);'),
    ("cstdio", 'printf("%d\\n", (int)threadIdx.x);'),
    ("stdlib.h", "float* p = (float*)malloc(4); free(p); y[0] = EXIT_SUCCESS;"),
    ("cstring", "memset(y, 0, 4);"),
    ("algorithm", "y[0] = std::max(y[1], std::min(y[2], y[3]));"),
    ("iostream", "y[0] = 1.0f;"),
    ("vector", "y[0] = 1.0f;"),
    ("cuda.h", "y[0] = 1.0f;"),
    ("cublas_v2.h", "y[0] = 1.0f;"),
    ("time.h", "y[0] = (float)clock64();"),
    ("ctime", "y[0] = (float)clock();"),
    ("unistd.h", "y[0] = 1.0f;"),
    ("sys/time.h", "y[0] = 1.0f;"),
]

# Headers found in the CUDA toolkit's or CCCL's folders (or built on them).
TOOLKIT = [
    ("type_traits", "y[0] = std::is_same<float, decltype(y[0] + 1.0f)>::value ? 1.0f : 0.0f;"),
    ("limits", "y[0] = std::numeric_limits<float>::max();"),
    ("cuda/std/cstdint", "cuda::std::int32_t a = 1; y[0] = (float)a;"),
    ("cuda/std/limits", "y[0] = cuda::std::numeric_limits<float>::lowest();"),
    ("cuda/std/type_traits", "y[0] = cuda::std::is_integral<int>::value;"),
    ("cuda_fp16.h", "y[0] = __half2float(__float2half(y[1]));"),
    ("cuda_bf16.h", "y[0] = __bfloat162float(__float2bfloat16(y[1]));"),
    ("cuda_fp8.h", "__nv_fp8_e4m3 a(y[1]); y[0] = (float)a;"),
    (
        "cooperative_groups.h",
        "namespace cg = cooperative_groups; cg::thread_block b = cg::this_thread_block(); b.sync();",
    ),
    (
        "cooperative_groups/reduce.h",
        "namespace cg = cooperative_groups; auto w = cg::tiled_partition<32>(cg::this_thread_block());"
        " y[0] = cg::reduce(w, y[threadIdx.x], cg::plus<float>());",
    ),
    (
        "cooperative_groups/scan.h",
        "namespace cg = cooperative_groups; auto w = cg::tiled_partition<32>(cg::this_thread_block());"
        " y[threadIdx.x] = cg::inclusive_scan(w, y[threadIdx.x]);",
    ),
    (
        "cooperative_groups/memcpy_async.h",
        "namespace cg = cooperative_groups; __shared__ float s[64]; auto b = cg::this_thread_block();"
        " cg::memcpy_async(b, s, y, sizeof(s)); cg::wait(b); y[0] = s[1];",
    ),
    (
        "mma.h",
        "using namespace nvcuda; wmma::fragment<wmma::accumulator, 16, 16, 16, float> c; wmma::fill_fragment(c, 0.0f);",
    ),
    ("cuda_runtime.h", "y[0] = 1.0f;"),
    (
        "cub/block/block_reduce.cuh",
        "typedef cub::BlockReduce<float, 128> R; __shared__ typename R::TempStorage t;"
        " y[0] = R(t).Sum(y[threadIdx.x]);",
    ),
    (
        "cuda/barrier",
        "__shared__ cuda::barrier<cuda::thread_scope_block> bar; __shared__ float s[64];"
        " if (threadIdx.x == 0) init(&bar, blockDim.x); __syncthreads();"
        " cuda::memcpy_async(s, y, sizeof(s), bar); bar.arrive_and_wait(); y[0] = s[1];",
    ),
]


def _compile(header: str, body: str, **kw):
    src = f"#include <{header}>\n" + KERNEL.format(body=body)
    return nvrtc.compile_image(kb.Source(src, "cuda", name="k", **kw), (9, 0))


@pytest.mark.parametrize(("header", "body"), SHIMMED, ids=[h for h, _ in SHIMMED])
def test_shimmed_headers_compile(cache_dir, header, body) -> None:
    img = _compile(header, body)
    assert img.data[:4] == b"\x7fELF" and img.lowered == {"k": "k"}


@pytest.mark.parametrize(("header", "body"), SHIMMED, ids=[h for h, _ in SHIMMED])
def test_shimmed_headers_need_no_cuda_headers(cache_dir, monkeypatch, header, body) -> None:
    monkeypatch.setattr(nvrtc, "toolkit_include", lambda: ())
    assert _compile(header, body).data[:4] == b"\x7fELF"


# Our shims beside CCCL's own: both orders, one translation unit (CCCL defines int64_t globally under NVRTC).
MIXED = [
    ("cstdint", "cuda/std/cstdint"),
    ("cuda/std/cstdint", "stdint.h"),
    ("climits", "cuda/std/climits"),
    ("cfloat", "cuda/std/cfloat"),
    ("cuda/std/cmath", "cmath"),
    ("cmath", "cuda_fp16.h"),
    ("type_traits", "cuda/std/type_traits"),
]


@pytest.mark.parametrize("pair", MIXED, ids=["+".join(p) for p in MIXED])
def test_shims_and_cccl_in_one_kernel(cache_dir, pair) -> None:
    if not nvrtc.toolkit_include():
        pytest.skip("no CUDA headers found")
    ints = any("stdint" in h for h in pair)
    body = "int64_t a = INT64_MAX; y[0] = (float)a;" if ints else "y[0] = 1.0f;"
    src = "".join(f"#include <{h}>\n" for h in pair) + KERNEL.format(body=body)
    assert nvrtc.compile_image(kb.Source(src, "cuda", name="k"), (9, 0)).data[:4] == b"\x7fELF"


@pytest.mark.parametrize(("header", "body"), TOOLKIT, ids=[h for h, _ in TOOLKIT])
def test_toolkit_headers_compile(cache_dir, header, body) -> None:
    if not nvrtc.toolkit_include():
        pytest.skip("no CUDA headers found (nvidia-cuda-runtime/nvidia-cuda-cccl wheels, CUDA_PATH, /usr/local/cuda)")
    img = _compile(header, body)
    assert img.data[:4] == b"\x7fELF"


def test_device_assert_reaches_the_ptx_and_ndebug_removes_it(cache_dir) -> None:
    body = "assert(y[0] > 0.0f);"
    with_assert = _compile("cassert", body, options=("--gpu-architecture=compute_90",))
    assert b"__assertfail" in with_assert.data
    without = _compile("cassert", body, options=("--gpu-architecture=compute_90", "-DNDEBUG"))
    assert b"__assertfail" not in without.data


def test_missing_header_is_named_with_its_line(cache_dir) -> None:
    src = "// a kernel\n#include <not_a_real_header.h>\n" + KERNEL.format(body="")
    with pytest.raises(CompileError, match=r"#include <not_a_real_header\.h> \(kernel\.cu line 2\)"):
        nvrtc.compile_image(kb.Source(src, "cuda", name="k"), (9, 0))


def test_cub_umbrella_header_is_refused_with_the_reason(cache_dir) -> None:
    if not nvrtc.toolkit_include():
        pytest.skip("no CUDA headers found")
    with pytest.raises(CompileError, match=r"cub/cub\.cuh> brings CUB's device-wide algorithms"):
        _compile("cub/cub.cuh", "")


def test_cache_key_follows_shim_content(cache_dir, tmp_path, monkeypatch) -> None:
    shims = tmp_path / "shims"
    shutil.copytree(nvrtc.shim_include(), shims)
    monkeypatch.setattr(nvrtc, "shim_include", lambda: str(shims))
    body = "y[0] = FLT_EPSILON;"
    assert not _compile("cfloat", body).from_cache
    assert _compile("cfloat", body).from_cache == "disk"
    # float.h is reached through cfloat: a change two levels down still compiles anew
    (shims / "float.h").write_text((shims / "float.h").read_text() + "\n#define KB_EDITED 1\n")
    assert not _compile("cfloat", body).from_cache


@pytest.mark.parametrize("name", ["__shfl_down", "__shfl", "__ballot", "__any"])
def test_a_warp_function_without_sync_is_named_with_what_to_use(cache_dir, name) -> None:
    args = {"__shfl_down": "y[0], 1", "__shfl": "y[0], 0", "__ballot": "y[0] > 0", "__any": "y[0] > 0"}[name]
    src = KERNEL.format(body=f"y[0] = {name}({args});")
    with pytest.raises(
        CompileError, match=rf"{name}\(\) \(kernel\.cu line 1\) is a warp function without _sync.*use {name}_sync\(mask"
    ):
        nvrtc.compile_image(kb.Source(src, "cuda", name="k"), (9, 0))
