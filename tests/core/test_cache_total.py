"""The cache's running total: a store does not scan the directory, eviction still keeps the limit."""

from __future__ import annotations

import os
import time

import pytest
from kernelbay import _cachespace
from kernelbay.cache import DiskCache


def _key(i: int) -> str:
    return f"{i:064x}"


@pytest.fixture
def scans(monkeypatch):
    count = [0]
    real = DiskCache._walk

    def walk(self, root):
        count[0] += 1
        return real(self, root)

    monkeypatch.setattr(DiskCache, "_walk", walk)
    return count


def test_stores_do_not_scan_once_the_total_is_known(tmp_path, scans) -> None:
    c = DiskCache(str(tmp_path / "c"), max_bytes=1 << 30)
    for i in range(20):
        c.put(_key(i), b"x" * 100)
    assert scans[0] == 1  # the first store found no total and scanned; the others added to it
    total, _ = (tmp_path / "c" / ".size").read_text().split()
    assert int(total) == sum(size for _, size, _ in c.entries())


def test_the_limit_is_kept_from_the_running_total(tmp_path) -> None:
    c = DiskCache(str(tmp_path / "c"), max_bytes=2000)
    for i in range(40):
        c.put(_key(i), b"y" * 200)
        time.sleep(0.002)  # distinct use times for the LRU order
    kept = c.entries()
    assert 0 < sum(size for _, size, _ in kept) <= 2000
    assert os.path.exists(c.path_for(_key(39)))  # the newest survives
    assert not os.path.exists(c.path_for(_key(0)))  # the oldest went


def test_an_old_total_is_recomputed(tmp_path, scans, monkeypatch) -> None:
    c = DiskCache(str(tmp_path / "c"), max_bytes=1 << 30)
    c.put(_key(1), b"z")
    c.put(_key(2), b"z")
    assert scans[0] == 1
    monkeypatch.setattr(_cachespace, "RESCAN_SECONDS", 0.0)
    c.put(_key(3), b"z")
    assert scans[0] == 2


def test_clear_resets_the_total(tmp_path) -> None:
    c = DiskCache(str(tmp_path / "c"))
    c.put(_key(1), b"z")
    assert (tmp_path / "c" / ".size").exists()
    c.clear()
    assert not (tmp_path / "c" / ".size").exists()


def test_info_says_whether_usable(tmp_path) -> None:
    ok = DiskCache(str(tmp_path / "mine")).info()
    assert ok["usable"] and ok["problem"] is None and ok["owner_ok"] is None  # not created yet
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    bad = DiskCache(str(shared)).info()
    assert bad["usable"] is False and "writable by group and others" in bad["problem"]
    assert bad["owner_ok"] is False and bad["writable"] is True


def test_a_store_right_after_the_scan_does_not_scan_again(tmp_path, scans, monkeypatch) -> None:
    # The scan time is written rounded to the millisecond: read back it can lie up to half a
    # millisecond in the future of the next store (seen on a fast machine as a second scan).
    c = DiskCache(str(tmp_path / "c"), max_bytes=1 << 30)
    c.put(_key(1), b"z")
    assert scans[0] == 1
    total, scanned = (tmp_path / "c" / ".size").read_text().split()
    (tmp_path / "c" / ".size").write_text(f"{total} {float(scanned) + 0.0005:.3f}\n")
    monkeypatch.setattr(time, "time", lambda: float(scanned))
    c.put(_key(2), b"z")
    assert scans[0] == 1
