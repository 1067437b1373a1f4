"""Triton kernels launched by kernelbay on a GPU, against torch (numpy where torch is absent).
Skips without a GPU or without Triton."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest

pytestmark = pytest.mark.kernelbay_device("cuda")
pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbay-cuda[triton]')")

from .triton_kernels import ADD_META, MATMUL_META, SOFTMAX_META, add, matmul, softmax  # noqa: E402


@pytest.fixture
def dev() -> kb.Device:
    return kb.device("cuda:0")


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def test_vector_add(dev) -> None:
    k = kb.compile(kb.Source(add, "triton", meta=ADD_META), dev)
    n = 100_003
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, y, out = kb.asarray(xs, device=dev), kb.asarray(ys, device=dev), kb.zeros(n, "float32", device=dev)
    grid = -(-n // 1024)
    for g in (grid, (grid,), (grid, 1, 1)):
        out2 = kb.zeros(n, "float32", device=dev)
        k.launch(g, args=(x, y, out2, n))
    k(grid, args=(x, y, out, n))
    dev.synchronize()
    np.testing.assert_array_equal(out.numpy(), xs + ys)
    np.testing.assert_array_equal(out2.numpy(), xs + ys)
    torch = _torch()
    if torch is not None:  # torch tensors as arguments, on a torch stream
        tx, ty = torch.from_numpy(xs).cuda(), torch.from_numpy(ys).cuda()
        tout = torch.empty_like(tx)
        k.launch((grid,), args=(tx, ty, tout, n), stream=torch.cuda.current_stream())
        torch.cuda.synchronize()
        torch.testing.assert_close(tout, tx + ty)


def test_block_is_fixed_and_arguments_are_checked(dev) -> None:
    k = kb.compile(kb.Source(add, "triton", meta=ADD_META), dev)
    x = kb.zeros(1024, "float32", device=dev)
    k.launch(1, 128, args=(x, x, x, 1024))  # the kernel's own block may be given
    with pytest.raises(kb.InvalidArgumentError, match="block is fixed"):
        k.launch(1, 256, args=(x, x, x, 1024))
    with pytest.raises(kb.ArgumentTypeError, match=r"argument 3 \(n\)"):
        k.launch(1, args=(x, x, x, 1.5))
    with pytest.raises(kb.InvalidArgumentError, match="takes 4 argument"):
        k.launch(1, args=(x, x, x))


def test_fused_softmax(dev) -> None:
    rows, cols = 123, 781
    xs = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    k = kb.compile(kb.Source(softmax, "triton", meta=SOFTMAX_META), dev)
    x, out = kb.asarray(xs, device=dev), kb.zeros((rows, cols), "float32", device=dev)
    k.launch((rows,), args=(out, x, cols, cols, cols))
    dev.synchronize()
    torch = _torch()
    if torch is not None:
        want = torch.softmax(torch.from_numpy(xs).cuda(), dim=1).cpu().numpy()
    else:
        e = np.exp(xs - xs.max(axis=1, keepdims=True))
        want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)


def test_matmul_with_tl_dot(dev) -> None:
    m, n, kk = 200, 136, 96
    rng = np.random.default_rng(2)
    a_h, b_h = rng.standard_normal((m, kk)).astype(np.float16), rng.standard_normal((kk, n)).astype(np.float16)
    k = kb.compile(kb.Source(matmul, "triton", meta=MATMUL_META), dev)
    a, b, c = kb.asarray(a_h, device=dev), kb.asarray(b_h, device=dev), kb.zeros((m, n), "float32", device=dev)
    k.launch((-(-m // 64), -(-n // 64)), args=(a, b, c, m, n, kk))
    dev.synchronize()
    torch = _torch()
    if torch is not None:
        want = (torch.from_numpy(a_h).cuda().float() @ torch.from_numpy(b_h).cuda().float()).cpu().numpy()
    else:
        want = a_h.astype(np.float32) @ b_h.astype(np.float32)
    np.testing.assert_allclose(c.numpy(), want, rtol=2e-2, atol=2e-2)
