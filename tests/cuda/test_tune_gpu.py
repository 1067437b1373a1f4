"""kb.tune on a GPU: Triton configs compiled in the tuner's pool (the cuda backend implements
``kernelbay_compile_to_cache`` for Triton), then checked and timed. Skips without a GPU or Triton."""

from __future__ import annotations

import kernelbay as kb
import pytest
from kernelbay import cache

pytestmark = pytest.mark.kernelbay_device("cuda")
pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbay-cuda[triton]')")

from . import tune_triton_kernels as T  # noqa: E402

SPACE = {"BLOCK": [256, 1024, 4096], "WARPS": [4, 8]}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "cache"))  # the workers inherit it


def test_triton_configs_compile_in_the_pool_into_the_disk_cache() -> None:
    from kernelbay.tune import phases

    dev = kb.device("cuda:0")
    configs = [{"BLOCK": b, "WARPS": w} for b in SPACE["BLOCK"] for w in SPACE["WARPS"]]
    sources = [T.source(c) for c in configs]
    records: dict[int, dict] = {}
    phases.compile_all(sources, list(range(len(sources))), [dev], records, None, False)
    assert records == {}
    hits: list[bool] = []
    cache.observer = lambda key, hit: hits.append(hit)
    try:
        for s in sources:
            kb.compile(s, dev)
    finally:
        cache.observer = None
    assert hits and all(hits), f"the pool left {hits.count(False)} of {len(hits)} Triton compiles to this process"


def test_a_triton_sweep_checks_times_and_picks_a_correct_config() -> None:
    res = kb.tune(T.source, SPACE, T.launch, args=T.host_args(), check=T.reference, devices="cuda:0", progress=False)
    statuses = {r["status"] for _, r in res.records}
    assert statuses == {"ok"}, res.records
    assert res.config in [dict(c) for c, _ in res.records]
    assert res.kernel is not None
