import multiprocessing
import os
import stat

import kernelbay as kb
import pytest
from kernelbay.cache import DiskCache, make_key
from kernelbay.errors import CacheError


def key(src="int x;", **kw):
    args = dict(
        backend="cpu", compiler="g++", compiler_version="12", arch="x86", options=("-O3",), source=src, entries=("k",)
    )
    args.update(kw)
    return make_key(**args)


def test_round_trip_and_private_directory(tmp_path):
    c = DiskCache(str(tmp_path / "c"))
    assert c.get(key()) is None
    path = c.put(key(), b"\x7fELF payload", {"names": {"k": "_Z1kv"}})
    e = c.get(key())
    assert e.payload == b"\x7fELF payload" and e.meta == {"names": {"k": "_Z1kv"}} and e.path == path
    assert stat.S_IMODE(os.stat(tmp_path / "c").st_mode) == 0o700


def test_key_changes_with_every_input():
    base = key()
    others = [
        key(src="int y;"),
        key(backend="cuda"),
        key(compiler="clang++"),
        key(compiler_version="13"),
        key(arch="sm_90"),
        key(options=("-O2",)),
        key(entries=("j",)),
        key(extra={"x": "1"}),
    ]
    assert len({base, *others}) == len(others) + 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_entries_are_discarded_not_loaded(tmp_path, damage):
    c = DiskCache(str(tmp_path))
    path = c.put(key(), b"A" * 1000, {})
    data = open(path, "rb").read()
    bad = {
        "truncate": data[:-10],
        "flip": data[:500] + bytes([data[500] ^ 1]) + data[501:],
        "garbage": b"junk" * 50,
        "empty": b"",
    }[damage]
    open(path, "wb").write(bad)
    assert c.get(key()) is None
    assert not os.path.exists(path)
    c.put(key(), b"B", {})
    assert c.get(key()).payload == b"B"


def test_entry_under_another_key_is_refused(tmp_path):
    c = DiskCache(str(tmp_path))
    p = c.put(key("a"), b"A", {})
    q = c.path_for(key("b"))
    os.makedirs(os.path.dirname(q), exist_ok=True)
    os.replace(p, q)
    assert c.get(key("b")) is None


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to hand the directory to another uid")
def test_directory_of_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    os.chown(d, 4242, -1)
    with pytest.raises(CacheError, match="belongs to uid 4242"):
        DiskCache(str(d)).get(key())


def test_path_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(CacheError, match="not a directory|cannot create"):
        DiskCache(str(f)).put(key(), b"x")


def test_lru_eviction_keeps_the_limit(tmp_path):
    c = DiskCache(str(tmp_path), max_bytes=1 << 20)
    keys = [key(str(i)) for i in range(5)]
    for i, k in enumerate(keys):
        c.put(k, bytes(900), {})
        os.utime(c.path_for(k), (1000 + i, 1000 + i))
    c.max_bytes = 3200  # room for three entries
    c.get(keys[0])  # touched: now the most recent
    c.put(key("new"), bytes(900), {})
    assert c.info()["bytes"] <= 3200 and c.info()["entries"] == 3
    assert c.get(keys[0]) is not None and c.get(key("new")) is not None
    assert c.get(keys[1]) is None


def _writer(args):
    d, i = args
    c = DiskCache(d)
    payload = bytes([i % 256]) * 200_000
    for _ in range(20):
        c.put(key("same"), payload, {"writer": i})
        e = c.get(key("same"))
        assert e is not None and len(set(e.payload)) == 1 and e.meta["writer"] % 256 == e.payload[0]
    return True


def test_many_processes_writing_one_key(tmp_path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        assert all(pool.map(_writer, [(str(tmp_path), i) for i in range(8)]))
    assert DiskCache(str(tmp_path)).get(key("same")) is not None
    assert not [n for n in os.listdir(tmp_path / key("same")[:2]) if n.startswith(".tmp-")]


def test_env_overrides_and_clear(tmp_path, monkeypatch):
    from kernelbay.cache import cache_dir, default_cache

    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "env"))
    assert cache_dir() == str(tmp_path / "env")
    c = default_cache()
    c.put(key(), b"x")
    assert c.info()["entries"] == 1 and c.clear() == 1 and c.info()["entries"] == 0
    monkeypatch.setenv("KERNELBAY_CACHE_MAX_BYTES", "lots")
    with pytest.raises(kb.SettingError, match="KERNELBAY_CACHE_MAX_BYTES=.lots. is not a size"):
        default_cache()
    assert isinstance(CacheError("x"), kb.KernelbayError)


def test_lookup_and_store_work_around_an_unusable_cache(tmp_path, monkeypatch):
    from kernelbay.cache import lookup, store

    key = make_key(backend="t", compiler="c", compiler_version="1", arch="a", source="s")
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(blocked))
    cache, hit = lookup(key)
    assert hit is None  # no exception: callers rebuild instead
    store(cache, key, b"payload")  # and storing is skipped, not raised
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "ok"))
    cache, hit = lookup(key)
    assert cache is not None and hit is None
    store(cache, key, b"payload", {"m": 1})
    assert lookup(key)[1].payload == b"payload"
