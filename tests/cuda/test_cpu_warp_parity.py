"""Warp-mask semantics and barrier-free progress (tests/kernels/warp_mask_cases.py) on a GPU give
what the cpu backend gives, and what the CUDA guide says. Skips without a GPU; fails instead
under --kernelbay-require=cuda."""

from __future__ import annotations

import os
import sys

import kernelbay as kb
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.kernels.warp_mask_cases import CASES  # noqa: E402

pytestmark = pytest.mark.kernelbay_device("cuda")


def _run(dev: kb.Device, src: str, block: int) -> list[int]:
    k = kb.compile(kb.Source(src, lang="cuda", name="k"), dev)
    y = kb.asarray(np.zeros(block, np.uint32), device=dev)
    k.launch(1, block, (y,))
    dev.synchronize()
    return y.numpy().tolist()


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_and_cpu_agree_on_warp_masks(case) -> None:
    src, block, want = CASES[case]
    assert _run(kb.device("cuda:0"), src, block) == want
    assert _run(kb.device("cpu"), src, block) == want
