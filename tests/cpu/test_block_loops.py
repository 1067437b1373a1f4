"""Loops of kernels run by fibers yield every few iterations (kernelbay_cpu._loops): the loops
keep their meaning, diagnostics keep their lines, and a thread may wait for another thread of its
block without a barrier, as CUDA allows since Volta's independent thread scheduling."""

from __future__ import annotations

import os
import sys

import kernelbay as kb
import numpy as np
import pytest
from kernelbay.csource import strip_comments_and_strings
from kernelbay_cpu import _loops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.kernels.warp_mask_cases import HANDSHAKE  # noqa: E402


def _launch(cpu, src: str, n: int = 64, block: int = 64) -> np.ndarray:
    k = kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)
    y = kb.zeros(n, "int32", device=cpu)
    k.launch(1, block, (y,))
    return y.numpy()


def test_a_thread_waiting_for_another_without_a_barrier_sees_its_store(cpu):
    # Run one after another, the first of the two would spin its million tries alone.
    assert _launch(cpu, HANDSHAKE)[:2].tolist() == [1, 1]


LOOP_FORMS = r"""
__device__ int twice(int v) {
    int r = 0;
    for (int k = 0; k < 2; k++) r += v;
    return r;
}
__global__ void k(int* out) {
    __shared__ int s[64];
    int t = threadIdx.x, acc = 0, i = 0;
    for (int j = 0; j < 40; j++) {            // continue and break in a for
        if (j % 3 == 0) continue;
        if (j > 30 + t % 5) break;
        acc += j;
    }
    while (i < 20) { if (i++ == 4) continue; acc += 1; }   // continue in a while
    do { acc += 2; } while (acc % 7 != 0);     // do-while
    if (t & 1) for (int j = 0; j < 3; j++) acc += 100; else acc -= 1;  // the else stays the if's
    for (int v : {1, 2, 3}) acc += v;          // range-based: left alone
    for (;;) { if (++i > 25) break; }
    acc += twice(i);
    s[t] = acc;
    __syncthreads();
    out[t] = s[63 - t];
}
"""


def _loop_forms_reference(t: int) -> int:
    acc, i = 0, 0
    for j in range(40):
        if j % 3 == 0:
            continue
        if j > 30 + t % 5:
            break
        acc += j
    while i < 20:
        i += 1
        if i - 1 == 4:
            continue
        acc += 1
    acc += 2
    while acc % 7 != 0:
        acc += 2
    acc = acc + 300 if t & 1 else acc - 1
    acc += 6
    while True:
        i += 1
        if i > 25:
            break
    return acc + 2 * i


def test_loops_keep_their_meaning(cpu):
    want = [_loop_forms_reference(63 - t) for t in range(64)]
    assert _launch(cpu, LOOP_FORMS).tolist() == want


def test_diagnostics_keep_the_users_lines(cpu):
    src = "__global__ void k(int* out) {\n    __syncthreads();\n    for (int i = 0; i < 4; i++)\n        out[i] = i;\n    undeclared_name = 1;\n}\n"
    with pytest.raises(kb.CompileError) as info:
        kb.compile(kb.Source(src, lang="cuda", name="k"), cpu)
    assert info.value.lines == {5}


def _ticked(src: str) -> str:
    return _loops.add_loop_yields(src, strip_comments_and_strings(src))


def test_loops_where_threads_meet_are_left_alone():
    src = "for (int t = 0; t < n; ++t) { s[i] = t; __syncthreads(); for (int k = 0; k < 16; ++k) a += s[k]; }"
    assert _ticked(src) == src
    plain = "for (int k = 0; k < 16; ++k) a += s[k];"
    assert "kb_tk_.tick()" in _ticked(plain)
    assert _ticked(plain).count("\n") == plain.count("\n")


MANY_ACCUMULATORS = r"""
__global__ void k(const double* x, double* out, int n) {
    __shared__ double s[64];
    double a[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = threadIdx.x; i < n; i += blockDim.x)  // yields: each thread's a[] must survive it
        for (int j = 0; j < 10; ++j) a[j] += x[i] * (j + 1);
    double acc = 0;
    for (int j = 0; j < 10; ++j) acc += a[j] * (j + 1);
    s[threadIdx.x] = acc;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
"""


def test_values_a_loop_keeps_in_registers_survive_its_yields(cpu):
    n = 64 * 100
    xs = np.random.default_rng(3).standard_normal(n)
    k = kb.compile(kb.Source(MANY_ACCUMULATORS, lang="cuda", name="k"), cpu)
    out = kb.zeros(64, "float64", device=cpu)
    k.launch(1, 64, (kb.asarray(xs, device=cpu), out, n))
    per_thread = xs.reshape(-1, 64).sum(axis=0)
    want = per_thread * sum((j + 1) ** 2 for j in range(10))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
