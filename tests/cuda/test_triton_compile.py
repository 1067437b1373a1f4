"""Triton kernels compiled to cubins without a GPU (an explicit target), and their launch
settings and argument checks. Skips where Triton is not installed."""

from __future__ import annotations

import sys

import kernelbay as kb
import numpy as np
import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbay-cuda[triton]')")

from kernelbay_cuda import packing, triton_kernels

from .triton_kernels import ADD_META, MATMUL_META, SOFTMAX_META, add, matmul, softmax

DEV = kb.Device("cuda", 0, "fake")


def test_vector_add_compiles_to_a_cubin_with_launch_settings(cache_dir) -> None:
    image, name, launch = triton_kernels.compile_triton(kb.Source(add, "triton", meta=ADD_META), (9, 0))
    assert image.kind == "cubin" and image.data[:4] == b"\x7fELF" and name == "add"
    params = image.params[name]
    assert [t for *_, t in params][:4] == ["pointer", "pointer", "pointer", "int"]
    assert launch["block"] == 128 and launch["arg_names"] == ["x_ptr", "y_ptr", "out_ptr", "n"]
    assert launch["hidden"] == len(params) - 4 and all(t == "pointer" for *_, t in params[4:])
    again, _, launch2 = triton_kernels.compile_triton(kb.Source(add, "triton", meta=ADD_META), (9, 0))
    assert again.from_cache == "disk" and again.data == image.data and launch2 == launch


def test_softmax_and_matmul_compile(cache_dir) -> None:
    _, _, launch = triton_kernels.compile_triton(kb.Source(softmax, "triton", meta=SOFTMAX_META), (9, 0))
    assert launch["block"] == 256
    image, name, launch = triton_kernels.compile_triton(kb.Source(matmul, "triton", meta=MATMUL_META), (8, 0))
    assert launch["shared"] > 0 and image.params[name][3][2] == "int"


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        ({"constexprs": {"BLOCK": 1024}}, "needs meta=.*signature"),
        ({**ADD_META, "signature": {"x_ptr": "*fp32"}}, "neither a type .* nor a value"),
        ({**ADD_META, "signature": {**ADD_META["signature"], "bogus": "i32"}}, "has no argument"),
        ({**ADD_META, "signature": ["*fp32", "*fp32"]}, "lists 2 types for 4"),
        ({**ADD_META, "signature": {**ADD_META["signature"], "n": "nvTmaDesc"}}, "cannot pass"),
    ],
)
def test_bad_meta_is_named(cache_dir, meta, match) -> None:
    with pytest.raises(kb.InvalidArgumentError, match=match):
        triton_kernels.compile_triton(kb.Source(add, "triton", meta=meta), (9, 0))


def test_triton_compile_error_is_a_compile_error(cache_dir) -> None:
    meta = {**ADD_META, "constexprs": {"BLOCK": 1000}}  # tl.arange needs a power of two
    with pytest.raises(kb.CompileError, match="add"):
        triton_kernels.compile_triton(kb.Source(add, "triton", meta=meta), (9, 0))


def test_without_triton_the_error_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)
    with pytest.raises(kb.BackendUnavailableError, match=r"kernelbay-cuda\[triton\]"):
        triton_kernels.compile_triton(kb.Source(add, "triton", meta=ADD_META), (9, 0))


def test_source_digest_follows_the_function_source_and_meta() -> None:
    a = kb.Source(add, "triton", meta=ADD_META)
    assert a.digest() == kb.Source(add, "triton", meta=dict(ADD_META)).digest()
    assert a.digest() != kb.Source(add, "triton", meta={**ADD_META, "constexprs": {"BLOCK": 512}}).digest()
    assert a.digest() != kb.Source(softmax, "triton", meta=ADD_META).digest()


def test_arguments_not_matching_the_specialisation_name_the_argument(cache_dir) -> None:
    image, name, launch = triton_kernels.compile_triton(kb.Source(add, "triton", meta=ADD_META), (9, 0))
    visible = packing.layout(image.params[name])[: len(image.params[name]) - launch["hidden"]]
    names = launch["arg_names"]

    class _NoFree:
        def free(self, device, handle) -> None:
            pass

    x = kb.Array(DEV, 16, 0x1000, _NoFree(), (4,), np.dtype("float32"))
    packing.make_packer(name, visible, (x, x, x, 5), DEV, names)
    with pytest.raises(kb.ArgumentTypeError, match=r"argument 3 \(n\) of kernel 'add'"):
        packing.make_packer(name, visible, (x, x, x, 5.0), DEV, names)
    with pytest.raises(kb.ArgumentTypeError, match=r"argument 1 \(y_ptr\)"):
        packing.make_packer(name, visible, (x, 7.5, x, 5), DEV, names)
    with pytest.raises(kb.InvalidArgumentError, match=r"argument 3 \(n\).*out of range"):
        packing.make_packer(name, visible, (x, x, x, 2**31), DEV, names)
