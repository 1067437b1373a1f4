"""Every call form of a launch takes the native fast path and launches what it says; values out
of range are refused on the fast path too. Real GPU only; skips without one."""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest

pytestmark = pytest.mark.kernelbay_device("cuda")

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    int i = (blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x * blockDim.y + threadIdx.y * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
N = 256


class _Foreign:
    """A stream of another library: only the __cuda_stream__ protocol."""

    def __init__(self, s) -> None:
        self.s = s

    def __cuda_stream__(self):
        return (0, self.s.handle)


def _forms(k, x, y, stream, core_stream=None):
    a = (x, y, np.float32(1), np.int32(N))
    cfg = kb.LaunchConfig(grid=(1,), block=(N,))
    return {
        "ints": lambda: k.launch(1, N, a),
        "tuples": lambda: k.launch((1,), (N,), a),
        "3-tuples": lambda: k.launch((1, 1, 1), (N, 1, 1), a),
        "2-d": lambda: k.launch((2, 1), (N // 4, 2), a),
        "config": lambda: k.launch(config=cfg, args=a),
        "keywords": lambda: k.launch(grid=(1,), block=(N,), args=a),
        "call": lambda: k((1,), (N,), a),
        "handle-stream": lambda: k.launch((1,), (N,), a, stream=stream),  # dev.stream().handle
        "foreign-stream": lambda: k.launch((1,), (N,), a, stream=_Foreign(stream)),
        "core-stream": lambda: k.launch((1,), (N,), a, stream=core_stream),  # dev.stream(): portable
    }


FORMS = [
    "ints",
    "tuples",
    "3-tuples",
    "2-d",
    "config",
    "keywords",
    "call",
    "handle-stream",
    "foreign-stream",
    "core-stream",
]


@pytest.fixture(params=["native", "python"])
def launcher(request, monkeypatch) -> str:
    """Each form with the native helpers, and with them off (the Python fallback)."""
    from kernelbay_cuda import native

    if request.param == "native":
        if native.module() is None:
            pytest.skip(f"the native helpers are unavailable here: {native.status()}")
    else:
        native.module()
        monkeypatch.setattr(native, "_state", [None, "turned off by the test"])
    return request.param


@pytest.mark.parametrize("form", FORMS)
def test_every_call_form(form, launcher) -> None:
    from kernelbay_cuda import native

    dev = kb.device("cuda:0")
    tag = f"-DFORM_{form.replace('-', '_')}_{launcher}"
    k = kb.compile(kb.Source(SAXPY, "cuda", name="saxpy", options=(tag,)), dev)
    x, y = kb.asarray(np.ones(N, np.float32), device=dev), kb.zeros(N, "float32", device=dev)
    core = dev.stream()
    s = core.handle  # the backend's stream handle, which kb.Stream holds
    launch = _forms(k, x, y, s, core)[form]
    for _ in range(3):
        launch()
    s.synchronize()
    dev.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 3.0, np.float32))
    if launcher == "native":
        assert type(k.handle.entry) is native.module().FastLaunch  # every form in C


def test_torch_stream_on_the_fast_path() -> None:
    torch = pytest.importorskip("torch")
    dev = kb.device("cuda:0")
    k = kb.compile(kb.Source(SAXPY, "cuda", name="saxpy", options=("-DFORM_torch",)), dev)
    x, y = kb.asarray(np.ones(N, np.float32), device=dev), kb.zeros(N, "float32", device=dev)
    ts = torch.cuda.Stream()
    for _ in range(2):
        k.launch((1,), (N,), (x, y, np.float32(1), np.int32(N)), stream=ts)
    ts.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.full(N, 2.0, np.float32))


@pytest.mark.parametrize("bad", [3_000_000_000, -(2**31) - 1, "np.uint32"])
def test_out_of_range_int_is_refused_on_the_fast_path(bad) -> None:
    dev = kb.device("cuda:0")
    src = 'extern "C" __global__ void setn(int* p, int n) { p[0] = n; }'
    k = kb.compile(kb.Source(src, "cuda", name="setn"), dev)
    p = kb.zeros(1, "int32", device=dev)
    bad = np.uint32(4_000_000_000) if bad == "np.uint32" else bad
    good = np.uint32(5) if isinstance(bad, np.generic) else 5
    for grid in (1, (1,)):
        k.launch(grid, 1, (p, good))
        k.launch(grid, 1, (p, good))  # the fast path exists for these types
        with pytest.raises(kb.InvalidArgumentError, match="out of range"):
            k.launch(grid, 1, (p, bad))
    dev.synchronize()
    assert p.numpy()[0] == 5
