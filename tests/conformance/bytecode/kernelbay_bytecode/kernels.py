"""The suite's kernels for the bytecode backend: module level, so a spawned worker imports them."""

from __future__ import annotations


def saxpy(t, x, y, a, n):
    i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
    if i < n:
        y[i] = a * x[i] + y[i]


def saxpy_function(t, x, y, a, n):
    # saxpy again, a function of its own: the function-source check compiles it and nothing else does
    i = t.blockIdx.x * t.blockDim.x + t.threadIdx.x
    if i < n:
        y[i] = a * x[i] + y[i]
