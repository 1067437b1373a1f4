"""kernelbay.csource reads kernels and their parameters from C/CUDA text as written in the wild."""

from __future__ import annotations

import kernelbay as kb
import pytest
from kernelbay.csource import (
    default_kernel,
    find_functions,
    find_kernels,
    pointer_access,
    strip_comments_and_strings,
)


def kernel(text: str):
    (k,) = find_kernels(text)
    return k


@pytest.mark.parametrize(
    "text",
    [
        'extern "C" __global__ void __launch_bounds__(256) k(float* x) { x[0] = 1; }',
        "__global__ void __launch_bounds__(256, 2) k(float* x) { x[0] = 1; }",
        "__global__ __launch_bounds__(128) void k(float* x) { x[0] = 1; }",
        "static __global__ void k(float* x) { x[0] = 1; }",
        "__global__ static void k(float* x) { x[0] = 1; }",
        "__global__ void\nk(\n  float* __restrict__ x)\n{\n  x[0] = 1;\n}\n",
        "__global__ void [[maybe_unused]] k(float* x) { }",
        "__global__ void k(float* x) noexcept { }",
        "#include <cuda_fp16.h>\n#define N 4\n__global__ void k(float* x) { }",
    ],
)
def test_kernel_declarations_of_every_shape(text: str) -> None:
    k = kernel(text)
    assert (k.name, k.qualname, k.kernel, k.declaration) == ("k", "k", True, False)
    assert text[k.body[0]] == "{" and text[k.body[1]] == "}" and text.rstrip().endswith("}")
    assert text[k.parens[0]] == "(" and text[k.parens[1]] == ")"
    assert [p.access for p in k.params] == ["rw"]


def test_extern_c_static_and_templates_are_told_apart() -> None:
    text = """
    extern "C" __global__ void __launch_bounds__(256) a(float* x) {}
    extern "C" {
    __global__ void b(float* x) {}
    }
    extern "C++" __global__ void c(float* x) {}
    template <typename T, int N> __global__ void d(T* x) { x[N] = 0; }
    template <typename T>
    __global__ void
    e(const T* x, T* y) {}
    template <> __global__ void e<float>(const float* x, float* y) {}
    """
    ks = find_kernels(text)
    got = [(k.name, k.extern_c, k.template) for k in ks]
    assert got == [
        ("a", True, False),
        ("b", True, False),
        ("c", False, False),
        ("d", False, True),
        ("e", False, True),
        ("e", False, True),
    ]
    assert text[ks[0].start :].startswith('extern "C"') and text[ks[3].start :].startswith("template <")
    assert [p.access for p in ks[4].params] == ["r", "rw"]


def test_comments_strings_and_directives_are_not_kernels() -> None:
    text = r"""
    // __global__ void commented(float* x) {}
    /* __global__ void block_commented(float* x) {
    } */
    const char* s = "__global__ void quoted(float* x) {}";
    const char c = '{';
    #define MAKE(name) __global__ void name(float* x) { }
    __global__ void real(const char* s) { printf("}{ __global__ void no() {}"); }
    """
    ks = find_kernels(text)
    assert [k.name for k in ks] == ["real"]
    assert text[ks[0].body[1] :].startswith("}\n")


def test_declarations_are_not_definitions() -> None:
    text = "__global__ void k(float*);\n__global__ void k(float* x) { x[0] = 0; }\n__global__ void j(int) = delete;"
    ks = find_kernels(text)
    assert [(k.name, k.declaration, k.body is None) for k in ks] == [
        ("k", True, True),
        ("k", False, False),
        ("j", True, True),
    ]
    assert pointer_access(text, "k") == ("rw",)
    assert default_kernel(text.split("\n")[0]) == "k"


def test_namespaces_qualify_names() -> None:
    text = """
    namespace blas {
    namespace detail { __device__ float two() { return 2; } }
    __global__ void scale(float* x) { x[0] *= detail::two(); }
    }
    namespace a::b { __global__ void deep(const int* x, int* y) {} }
    namespace { __global__ void hidden(float* x) {} }
    __global__ void blas::later(float* x) {}
    """
    assert [k.qualname for k in find_kernels(text)] == ["blas::scale", "a::b::deep", "hidden", "blas::later"]
    assert pointer_access(text, "deep") == pointer_access(text, "a::b::deep") == ("r", "rw")
    assert pointer_access(text, "b::deep") == ("r", "rw")
    assert pointer_access(text, "c::deep") is None
    assert default_kernel("namespace ns { __global__ void k(float* x) {} }") == "ns::k"


@pytest.mark.parametrize(
    "decl, access",
    [
        ("const float* x", "r"),
        ("float const* x", "r"),
        ("const float* const x", "r"),
        ("const float * __restrict__ x", "r"),
        ("const float* __restrict__ const x", "r"),
        ("float* const x", "rw"),  # the pointer is const, the data writable
        ("float* __restrict__ x", "rw"),
        ("float*x", "rw"),
        ("const float** x", "rw"),  # an array of writable pointers
        ("float* const* x", "r"),  # an array of pointers nobody may change
        ("const float x[]", "r"),
        ("float x[]", "rw"),
        ("float x[4][4]", "rw"),
        ("const float* x[4]", "rw"),
        ("float* const x[]", "r"),
        ("const float (*rows)[4]", "r"),
        ("const float& x", "r"),
        ("float& x", "rw"),
        ("float&& x", "rw"),
        ("const Vec<float*>& v", "r"),
        ("const T* x", "r"),
        ("T* x", "rw"),
        ("const float*", "r"),  # unnamed
        ("float*", "rw"),
        ("float* p = nullptr", "rw"),
        ("const std::size_t* n", "r"),
        ("volatile int* flag", "rw"),
        ("float", None),
        ("const int n", None),
        ("unsigned long long n", None),
        ("__grid_constant__ const Params p", None),
        ("Pair<int, float*> p", None),
        ("std::array<const float*, 4> ptrs", None),
        ("void (*fn)(const float*)", None),
        ("float (*op)(float, float)", None),
        ("int n = 2 * 3", None),
        ("bool flag = (1 > 2)", None),
        ("__align__(16) float4 v", None),
    ],
)
def test_parameter_access(decl: str, access: str | None) -> None:
    text = f"__global__ void k(int before, {decl}, int after) {{ }}"
    assert pointer_access(text, "k") == (None, access, None)
    (p,) = kernel(text).params[1:2]
    assert p.pointer == (access is not None)


def test_parameter_lists() -> None:
    assert pointer_access("void f(void) {}", "f") == ()
    assert pointer_access("void f() {}", "f") == ()
    text = "__global__ void k(Pair<int, float> p, Map<Key, Pair<int, float*>> m, const float* x, int n = f(1, 2)) {}"
    (k,) = find_kernels(text)
    assert [p.text for p in k.params] == [
        "Pair<int, float> p",
        "Map<Key, Pair<int, float*>> m",
        "const float* x",
        "int n = f(1, 2)",
    ]
    assert [p.access for p in k.params] == [None, None, "r", None]


def test_pointer_access_finds_plain_functions_not_calls() -> None:
    text = """
    // a comment with k(int* p) {
    void k(const float* a, float* b) { b[0] = a[0]; }
    void caller(float* b) {
        k(b, b);
        if (k(nullptr, nullptr)) { }
        return k(b, b);
    }
    struct S { void k(int* p) {} };
    """
    assert pointer_access(text, "k") == ("r", "rw")
    [f] = [f for f in find_functions(text, "k") if f.body is not None]
    assert not f.kernel and not f.template and text[f.start :].startswith("void k(")
    assert pointer_access(text, "missing") is None


def test_overloads_have_no_single_answer() -> None:
    text = "__global__ void k(float* x) {}\n__global__ void k(const double* x, int n) {}\n"
    assert len(find_kernels(text)) == 2
    assert pointer_access(text, "k") is None
    with pytest.raises(kb.InvalidArgumentError, match="k is overloaded"):
        default_kernel(text)


def test_template_names_are_looked_up_without_their_arguments() -> None:
    text = "template <typename T> __global__ void axpy(T a, const T* x, T* y) {}"
    assert pointer_access(text, "axpy<float>") == (None, "r", "rw")
    with pytest.raises(kb.InvalidArgumentError, match=r"axpy is a template; pass Source\(\.\.\., name='axpy<float>'\)"):
        default_kernel(text)


def test_default_kernel() -> None:
    assert default_kernel('extern "C" __global__ void __launch_bounds__(256) k(float* x) {}') == "k"
    # a commented-out kernel does not make the choice ambiguous
    assert default_kernel("// __global__ void old(float* x) {}\n__global__ void k(float* x) {}") == "k"
    with pytest.raises(kb.InvalidArgumentError, match="defines a, b; pass Source"):
        default_kernel("__global__ void a(float* x) {}\n__global__ void b(float* x) {}")
    with pytest.raises(kb.InvalidArgumentError, match="no __global__ function"):
        default_kernel("__device__ float f(float x) { return x; }")


def test_a_body_that_never_closes_is_not_delimited() -> None:
    (k,) = find_kernels("__global__ void k(float* x) { x[0] = 1;")
    assert k.body is None and not k.declaration


def test_stripping_keeps_offsets() -> None:
    text = 'a /* b\nc */ "d\\"e" \'f\' // g\nh'
    out = strip_comments_and_strings(text)
    assert len(out) == len(text) and out.count("\n") == 2
    assert out.split() == ["a", '"', '"', "'", "'", "h"]
