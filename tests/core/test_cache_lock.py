"""The compile lock is per key: compiles of other keys never wait, even in the same subdirectory."""

from __future__ import annotations

import threading

from kernelbay.cache import DiskCache


def _keys_sharing_a_subdirectory() -> tuple[str, str]:
    a = "ab" + "0" * 62
    b = "ab" + "1" * 62
    return a, b


def _lock_in_thread(c: DiskCache, key: str) -> tuple[threading.Thread, threading.Event]:
    got = threading.Event()

    def take() -> None:
        with c.lock(key):
            got.set()

    t = threading.Thread(target=take, daemon=True)
    t.start()
    return t, got


def test_a_held_key_does_not_block_another_key_in_its_subdirectory(tmp_path):
    c = DiskCache(str(tmp_path / "c"))
    k1, k2 = _keys_sharing_a_subdirectory()
    with c.lock(k1):
        t, got = _lock_in_thread(c, k2)
        assert got.wait(600), "a compile of another key waited on this key's lock"
        t.join(600)


def test_a_held_key_blocks_the_same_key_until_released(tmp_path):
    c = DiskCache(str(tmp_path / "c"))
    k1, _ = _keys_sharing_a_subdirectory()
    with c.lock(k1):
        t, got = _lock_in_thread(c, k1)
        assert not got.wait(0.3), "two holders of one key's lock at once"
    assert got.wait(600), "the waiter never got the lock after its release"
    t.join(600)


def test_lock_files_are_per_key_and_cleared(tmp_path):
    c = DiskCache(str(tmp_path / "c"))
    k1, k2 = _keys_sharing_a_subdirectory()
    for k in (k1, k2):
        with c.lock(k):
            pass
    names = sorted(p.name for p in (tmp_path / "c" / "ab").iterdir())
    assert names == [k1 + ".lock", k2 + ".lock"]
    c.clear()
    assert list((tmp_path / "c" / "ab").iterdir()) == []
