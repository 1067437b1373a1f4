"""Python-function sources (Pallas) get a content digest that other processes reproduce."""

from __future__ import annotations

import subprocess
import sys

import kernelbay as kb
import numpy as np

SCALE = 3


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * SCALE + _offset()


def _offset():
    return 1


def _closure(n):
    def k(x_ref, o_ref):
        o_ref[...] = x_ref[...] + n

    return k


CODE = (
    "import kernelbay as kb; from tests.tune import test_digest as t; "
    "print(kb.Source(t._kernel, 'pallas', meta={'block': (8, 128)}).digest())"
)


def test_a_function_digest_is_the_same_in_another_process():
    here = kb.Source(_kernel, "pallas", meta={"block": (8, 128)}).digest()
    there = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout.strip()
    assert here == there


def test_the_digest_follows_the_code_closure_and_meta():
    d = lambda fn, **meta: kb.Source(fn, "pallas", meta=meta).digest()
    assert d(_closure(1)) == d(_closure(1))
    assert d(_closure(1)) != d(_closure(2))
    assert d(_kernel, block=(8, 128)) != d(_kernel, block=(16, 128))


def test_a_function_binding_an_array_is_keyed_by_identity():
    arr = np.zeros(4)

    def k(x_ref, o_ref):
        o_ref[...] = x_ref[...] + arr

    def k2(x_ref, o_ref):
        o_ref[...] = x_ref[...] + arr

    # same code, but the array cannot be hashed as content: two functions, two keys
    assert kb.Source(k, "pallas").digest() != kb.Source(k2, "pallas").digest()
