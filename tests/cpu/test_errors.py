"""What the user sees when a kernel, an argument or a geometry is wrong."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest

SAXPY = r"""
__global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture
def saxpy(cpu):
    return kb.compile(kb.Source(SAXPY, lang="cuda", name="saxpy"), cpu)


@pytest.fixture
def xy(cpu):
    return kb.zeros(4, device=cpu), kb.zeros(4, device=cpu)


# --- arguments --------------------------------------------------------------------------


def test_wrong_argument_count_names_the_signature(saxpy, xy):
    with pytest.raises(kb.InvalidArgumentError, match=r"takes 4 arguments .*got 3"):
        saxpy.launch(1, 4, (*xy, np.float32(1)))


def test_numpy_scalar_of_wrong_size_names_position_and_size(saxpy, xy):
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 2 .*expects a 4-byte floating-point.*float64"):
        saxpy.launch(1, 4, (*xy, np.float64(1), np.int32(4)))
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 3 .*4-byte signed integer.*int64"):
        saxpy.launch(1, 4, (*xy, np.float32(1), np.int64(4)))


def test_numpy_scalar_of_wrong_kind_is_rejected(saxpy, xy):
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 2 .*int32"):
        saxpy.launch(1, 4, (*xy, np.int32(1), np.int32(4)))


def test_python_float_for_an_int_parameter_is_rejected(saxpy, xy):
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 3 .*4-byte signed integer"):
        saxpy.launch(1, 4, (*xy, 1.0, 4.0))


def test_python_int_out_of_range_is_rejected(saxpy, xy):
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 3 .*out of range"):
        saxpy.launch(1, 4, (*xy, 1.0, 2**40))


@pytest.mark.parametrize("value", [1 << 2000, 10**400, -(10**400)])
def test_int_beyond_any_float_for_a_float_parameter_is_out_of_range(saxpy, xy, value):
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 2 .*digits.*out of range .*3.40282e\+38"):
        saxpy.launch(1, 4, (*xy, value, 4))


@pytest.mark.parametrize("value", [np.array(2, np.float32), np.array(4, np.int32)], ids=["float32", "int32"])
def test_zero_d_arrays_are_refused_for_every_kind(saxpy, xy, value):
    args = (*xy, value, 4) if value.dtype.kind == "f" else (*xy, np.float32(2), value)
    with pytest.raises(kb.ArgumentTypeError, match=r"0-d array is not a scalar: pass arr\.item\(\).*arr\[\(\)\]"):
        saxpy.launch(1, 4, args)
    saxpy.launch(1, 4, (*xy, np.array(2, np.float32)[()], np.array(4, np.int32).item()))  # as the message says


def test_number_for_a_pointer_and_buffer_for_a_number(saxpy, xy):
    x, y = xy
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 0 .*pointer"):
        saxpy.launch(1, 4, (12345, y, 1.0, 4))
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 2 .*pointer parameter"):
        saxpy.launch(1, 4, (x, y, x, 4))
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 0"):
        saxpy.launch(1, 4, (np.zeros(4, np.float32), y, 1.0, 4))


def test_closed_argument(saxpy, xy):
    x, y = xy
    y.close()
    with pytest.raises(kb.UseAfterFreeError, match="argument 1"):
        saxpy.launch(1, 4, (x, y, 1.0, 4))


def test_errors_leave_the_kernel_usable(saxpy, cpu):
    x = kb.asarray(np.ones(4, np.float32), device=cpu)
    y = kb.zeros(4, device=cpu)
    with pytest.raises(kb.InvalidArgumentError):
        saxpy.launch(1, 4, (x, y, "2", 4))
    saxpy.launch(1, 4, (x, y, 2.0, 4))
    np.testing.assert_array_equal(y.numpy(), np.full(4, 2, np.float32))


# --- geometry ---------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [0, -1, (4, 0), (1, 1, -3)])
def test_bad_grid(saxpy, xy, grid):
    with pytest.raises(kb.InvalidArgumentError, match="grid"):
        saxpy.launch(grid, 4, (*xy, 1.0, 4))


@pytest.mark.parametrize("block", [0, (2, -1), 1025, (32, 32, 2), (1, 1, 65)])
def test_bad_block(saxpy, xy, block):
    with pytest.raises(kb.InvalidArgumentError, match="block"):
        saxpy.launch(1, block, (*xy, 1.0, 4))


def test_grid_over_limit(saxpy, xy):
    with pytest.raises(kb.InvalidArgumentError, match="limit"):
        saxpy.launch((1, 70000), 1, (*xy, 1.0, 4))


def test_dynamic_shared_memory_over_the_limit_is_refused(cpu, saxpy, xy):
    limit = cpu.properties["max_shared_memory_per_block"]
    saxpy.launch(1, 4, (*xy, 1.0, 4), shared_mem=limit)  # a kernel may ignore what it gets
    with pytest.raises(kb.InvalidArgumentError, match=f"dynamic shared memory.*0 to {limit}"):
        saxpy.launch(1, 4, (*xy, 1.0, 4), shared_mem=limit + 1)


# --- compile errors ---------------------------------------------------------------------

BROKEN = """__global__ void broken(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // a comment line
    if (i < n) y[i] = undeclared_name;
}
"""


def test_compile_error_has_log_and_numbered_lines(cpu, fresh_cache):
    with pytest.raises(kb.CompileError) as info:
        kb.compile(kb.Source(BROKEN, lang="cuda", name="broken"), cpu)
    err = info.value
    assert "undeclared_name" in err.log
    assert err.lines == {4}
    text = str(err)
    assert "line 4 of kernel.cu" in text
    assert ">4 |     if (i < n) y[i] = undeclared_name;" in text


def test_unknown_kernel_name(cpu, fresh_cache):
    with pytest.raises(kb.CompileError, match="could not call saxpyy"):
        kb.compile(kb.Source(SAXPY, lang="cuda", name="saxpyy"), cpu)


def test_ambiguous_unnamed_source(cpu):
    two = SAXPY + "\n__global__ void other(int* p) {}\n"
    with pytest.raises(kb.InvalidArgumentError, match="saxpy, other"):
        kb.compile(kb.Source(two, lang="cuda"), cpu)


UNSUPPORTED = {
    "this_grid": "#include <cooperative_groups.h>\n"
    "__global__ void k(int* y) { cooperative_groups::this_grid().sync(); y[0] = 1; }",
    "asm": '\n__global__ void k(int* y) { int v; asm("mov.u32 %0, 1;" : "=r"(v)); y[0] = v; }',
    "textures": "\n\n__global__ void k(cudaTextureObject_t t, float* y) { y[0] = tex1D<float>(t, 0.5f); }",
    "<<<": "\n__global__ void c(int* y) {}\n__global__ void k(int* y) { c<<<1, 1>>>(y); }",
}


@pytest.mark.parametrize("feature", sorted(UNSUPPORTED))
def test_unsupported_feature_fails_at_compile_time(cpu, feature):
    src = UNSUPPORTED[feature]
    line = src.count("\n", 0, src.index("__global__ void k")) + 1
    with pytest.raises(
        kb.CompileError, match=f"cannot run this kernel: it uses .*{feature}.* at kernel.cu:{line}"
    ) as info:
        kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)
    assert info.value.lines == {line}


def test_features_in_comments_and_strings_are_ignored(cpu):
    src = r"""
    // no __syncthreads() needed: each thread writes its own element
    /* __shared__ memory would not help
       here */
    __global__ void k(int* y) {
        const char* s = "__shfl_down_sync warpSize";
        y[threadIdx.x] = s[0] == '_' ? 7 : 0;
    }
    """
    k = kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)
    y = kb.zeros(3, "int32", device=cpu)
    k.launch(1, 3, (y,))
    assert y.numpy().tolist() == [7, 7, 7]


def test_cxx_sources_are_not_scanned(cpu):
    # A c++ kernel is CPU code: names CUDA reserves mean nothing there.
    src = "void k(int* y) { int warpSize = 3; y[kb::blockIdx().x] = warpSize; }"
    k = kb.compile(kb.Source(src, lang="c++", name="k"), cpu)
    y = kb.zeros(2, "int32", device=cpu)
    k.launch(2, 1, (y,))
    assert y.numpy().tolist() == [3, 3]


def test_cxx_source_needs_a_name(cpu):
    with pytest.raises(kb.InvalidArgumentError, match="name="):
        kb.compile(kb.Source("void k(int* y) {}", lang="c++"), cpu)
