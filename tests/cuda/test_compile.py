"""NVRTC compilation and the compile cache: no GPU needed (runs in CI)."""

from __future__ import annotations

import kernelbay as kb
import pytest
from kernelbay_cuda import images, nvrtc

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

AXPY = r"""
#include "scale.cuh"
template <typename T>
__global__ void axpy(const T* x, T* y, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = SCALE * a * x[i] + y[i];
}
"""


def test_cubin_for_a_known_arch(cache_dir) -> None:
    img = nvrtc.compile_image(kb.Source(SAXPY, "cuda", name="saxpy"), (9, 0))
    assert img.kind == "cubin" and img.arch == "sm_90"
    assert img.data[:4] == b"\x7fELF"
    assert img.lowered == {"saxpy": "saxpy"}
    assert img.params["saxpy"] == [(8, 8, "u64"), (8, 8, "u64"), (4, 4, "f32"), (4, 4, "u32")]
    assert not img.from_cache


def test_ptx_for_an_arch_newer_than_nvrtc(cache_dir) -> None:
    img = nvrtc.compile_image(kb.Source(SAXPY, "cuda", name="saxpy"), (99, 0))
    newest = max(nvrtc.supported_archs())
    assert img.kind == "ptx" and img.arch == f"compute_{newest}"
    assert b".entry saxpy" in img.data and img.data.endswith(b"\0")


def test_disk_cache_hit_keeps_lowered_names(cache_dir) -> None:
    src = kb.Source(
        AXPY,
        "cuda",
        name="axpy<float>",
        name_expressions=("axpy<double>",),
        headers={"scale.cuh": "#define SCALE 1"},
        options=("--std=c++17",),
    )
    first = nvrtc.compile_image(src, (8, 0))
    again = nvrtc.compile_image(src, (8, 0))
    assert again.from_cache == "disk" and again.data == first.data
    assert again.lowered["axpy<float>"] == "_Z4axpyIfEvPKT_PS0_S0_i"
    assert again.lowered["axpy<double>"].startswith("_Z4axpyIdEv")
    assert again.params[again.lowered["axpy<double>"]][2] == (8, 8, "f64")
    assert any(cache_dir.rglob("*.kbc"))


def test_cache_key_changes_with_options_and_arch(cache_dir) -> None:
    a = nvrtc.compile_image(
        kb.Source(AXPY, "cuda", name="axpy<float>", headers={"scale.cuh": "#define SCALE 1"}), (8, 0)
    )
    b = nvrtc.compile_image(
        kb.Source(AXPY, "cuda", name="axpy<float>", headers={"scale.cuh": "#define SCALE 1"}, options=("-DUNUSED=1",)),
        (8, 0),
    )
    c = nvrtc.compile_image(
        kb.Source(AXPY, "cuda", name="axpy<float>", headers={"scale.cuh": "#define SCALE 1"}), (9, 0)
    )
    assert not b.from_cache and not c.from_cache
    assert a.arch == "sm_80" and c.arch == "sm_90"


def test_define_option_reaches_the_compiler(cache_dir) -> None:
    src = 'extern "C" __global__ void k(int* o) { o[0] = VALUE; }'
    with pytest.raises(kb.CompileError):
        nvrtc.compile_image(kb.Source(src, "cuda", name="k"), (9, 0))
    img = nvrtc.compile_image(kb.Source(src, "cuda", name="k", options=("-DVALUE=7",)), (9, 0))
    assert img.kind == "cubin"


def test_compile_error_has_log_and_numbered_lines(cache_dir) -> None:
    bad = 'extern "C" __global__ void broken(float* y, int n) {\n  int i = 0\n  y[i] = undeclared_name;\n}\n'
    with pytest.raises(kb.CompileError) as info:
        nvrtc.compile_image(kb.Source(bad, "cuda", name="broken"), (9, 0))
    err = info.value
    assert "undeclared_name" in err.log
    assert err.lines and max(err.lines) <= 4
    assert ">" in str(err) and "| " in str(err)


def test_entry_found_without_a_name(cache_dir) -> None:
    entry, exprs = nvrtc.entry_names(kb.Source(SAXPY, "cuda"))
    assert entry == "saxpy" and exprs == ["saxpy"]
    two = SAXPY + '\nextern "C" __global__ void other(int* p) {}\n'
    with pytest.raises(kb.InvalidArgumentError, match="saxpy, other"):
        nvrtc.entry_names(kb.Source(two, "cuda"))


def test_ptx_param_parsing_handles_structs() -> None:
    ptx = """
.visible .entry f(
    .param .u64 .ptr .global .align 1 f_param_0,
    .param .align 8 .b8 f_param_1[24],
    .param .f64 f_param_2,
    .param .u16 f_param_3
)
{ ret; }
"""
    # a pointer's ".align 1" is its pointee's: the parameter itself is 8-aligned
    assert images.parse_ptx_params(ptx) == {"f": [(8, 8, "u64"), (24, 8, "b8"), (8, 8, "f64"), (2, 2, "u16")]}


def test_toolkit_headers_are_on_nvrtc_search_path() -> None:
    """cooperative_groups.h (and CUDA 13's CCCL under include/cccl) resolve without -I."""
    if not nvrtc.toolkit_include():
        pytest.skip("no CUDA headers found here (no toolkit, no nvidia-cuda-runtime wheel)")
    src = kb.Source(
        "#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n"
        "namespace cg = cooperative_groups;\n"
        'extern "C" __global__ void k(int* x) {\n'
        "  auto t = cg::tiled_partition<32>(cg::this_thread_block());\n"
        "  x[0] = cg::reduce(t, 1, cg::plus<int>());\n}\n",
        "cuda",
        name="k",
    )
    img = nvrtc.compile_image(src, (8, 0), use_cache=False)
    assert img.kind == "cubin" and len(img.data) > 0
