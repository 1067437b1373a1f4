"""kb.tune on the tpu backend (interpret mode on the CPU here): a Pallas kernel's block shapes
are a space like any other, checked against a reference and timed in a worker process."""

from __future__ import annotations

import kernelbay as kb
import pytest

from tests.tpu import tune_pallas_kernels as P


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "cache"))  # the workers inherit it


def test_pallas_block_shapes_are_tuned_checked_and_the_winner_launches(dev) -> None:
    space = {"BM": [64, 128], "BN": [128, 256]}
    res = kb.tune(
        P.source,
        space,
        P.launch,
        args=P.host_args(),
        check=P.reference,
        rtol=1e-4,
        atol=1e-3,
        repeats=2,
        devices=dev,
        progress=False,
    )
    assert {r["status"] for _, r in res.records} == {"ok"}, res.records
    assert len(res.records) == 4 and res.config in [c for c, _ in res.records]
    x, y, _ = P.host_args()
    ax, ay, az = (kb.asarray(a, device=dev) for a in P.host_args())
    res.launch([ax, ay, az])
    import numpy as np

    np.testing.assert_allclose(az.numpy(), x @ y, rtol=1e-4, atol=1e-3)
