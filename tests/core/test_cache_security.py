"""The disk cache trusts nothing it did not make (issue #17): ownership and mode checked at
every use, links never followed, directories the user named never chmod-ed."""

import os
import shutil
import stat

import kernelbay.cache as kcache
import pytest
from kernelbay import _privatedir
from kernelbay.cache import DiskCache, make_key
from kernelbay.errors import CacheError

ROOT = hasattr(os, "getuid") and os.getuid() == 0
OTHER_UID = 4242


def key(src="int x;"):
    return make_key(backend="cpu", compiler="g++", compiler_version="12", arch="x86", source=src)


def mode(p):
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_created_directories_are_private_from_the_start_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        c = DiskCache(str(tmp_path / "new"))
        c.put(key(), b"x")
    finally:
        os.umask(old)
    assert mode(tmp_path / "new") == 0o700
    assert mode(tmp_path / "new" / key()[:2]) == 0o700
    assert mode(c.path_for(key())) == 0o600


def test_a_directory_the_user_named_is_never_chmoded(tmp_path):
    shared = tmp_path / "project"
    shared.mkdir()
    os.chmod(shared, 0o750)  # group may read: allowed, and left as it is
    c = DiskCache(str(shared))
    c.put(key(), b"x")
    assert c.get(key()).payload == b"x"
    assert mode(shared) == 0o750


@pytest.mark.parametrize("bits", [0o777, 0o1777, 0o770, 0o702])
def test_a_directory_others_can_write_is_refused_and_left_alone(tmp_path, bits):
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, bits)
    with pytest.raises(CacheError, match=r"writable by .*chmod go-w"):
        DiskCache(str(d)).put(key(), b"x")
    with pytest.raises(CacheError, match="writable by"):
        DiskCache(str(d)).get(key())
    assert mode(d) == bits
    assert os.listdir(d) == []


def _vanish_and_recreate(d, as_uid):
    shutil.rmtree(d)
    os.mkdir(d, 0o755)
    if as_uid is not None:
        os.chown(d, as_uid, -1)


@pytest.mark.parametrize(
    "who", ["simulated", pytest.param("real", marks=pytest.mark.skipif(not ROOT, reason="needs root to chown"))]
)
def test_a_directory_recreated_by_another_user_is_seen_at_the_next_use(tmp_path, monkeypatch, who):
    d = tmp_path / "c"
    c = DiskCache(str(d))
    c.put(key(), b"mine")
    assert c.get(key()).payload == b"mine"
    if who == "real":
        _vanish_and_recreate(d, OTHER_UID)
        os.chmod(d, 0o700)
    else:
        _vanish_and_recreate(d, None)
        os.chmod(d, 0o700)
        monkeypatch.setattr(_privatedir, "_uid", lambda: os.getuid() + 1)
    with pytest.raises(CacheError, match="belongs to uid"):
        c.get(key())
    with pytest.raises(CacheError, match="belongs to uid"):
        c.put(key(), b"x")


@pytest.mark.skipif(not ROOT, reason="needs root to act as a second user")
def test_a_second_user_planting_a_valid_entry_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(tmp_path / "c"))
    c = kcache.default_cache()
    path = c.put(key(), b"mine")
    blob = open(path, "rb").read()
    # the directory vanishes; a second user re-creates it (0700, theirs) with a byte-identical,
    # checksum-valid entry for the same key
    shutil.rmtree(tmp_path / "c")
    os.makedirs(os.path.dirname(path), 0o700)
    open(path, "wb").write(blob)
    for p in (tmp_path / "c", os.path.dirname(path), path):
        os.chown(p, OTHER_UID, OTHER_UID)
    with pytest.raises(CacheError, match=f"belongs to uid {OTHER_UID}"):
        c.get(key())
    assert kcache.lookup(key()) == (None, None)  # callers compile instead, never load it


def test_a_directory_replaced_by_a_link_is_refused(tmp_path):
    d = tmp_path / "c"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    c = DiskCache(str(d))
    c.put(key(), b"mine")
    shutil.rmtree(d)
    os.symlink(elsewhere, d)
    with pytest.raises(CacheError, match="symbolic link"):
        c.put(key(), b"x")
    assert os.listdir(elsewhere) == []


def test_symlinked_subdirectory_is_never_written_through_and_clear_removes_only_the_link(tmp_path):
    d = tmp_path / "c"
    target = tmp_path / "victim"
    target.mkdir()
    (target / "precious.kbc").write_bytes(b"keep me")
    c = DiskCache(str(d))
    c.put(key("other"), b"x")
    sub = d / key()[:2]
    if sub.exists():
        shutil.rmtree(sub)
    os.symlink(target, sub)
    with pytest.raises(CacheError, match="symbolic link"):
        c.put(key(), b"payload")
    assert sorted(os.listdir(target)) == ["precious.kbc"]
    with pytest.raises(CacheError, match="symbolic link"):
        c.get(key())
    c.clear()
    assert not os.path.lexists(sub)
    assert (target / "precious.kbc").read_bytes() == b"keep me"


def test_symlinked_entry_is_not_followed_and_is_removed(tmp_path):
    c = DiskCache(str(tmp_path / "c"))
    real = c.put(key("a"), b"A")
    q = c.path_for(key("b"))
    os.makedirs(os.path.dirname(q), exist_ok=True)
    os.symlink(real, q)
    assert c.get(key("b")) is None
    assert not os.path.lexists(q) and os.path.exists(real)


def test_clear_reports_what_it_could_not_delete(tmp_path, monkeypatch):
    c = DiskCache(str(tmp_path / "c"))
    c.put(key("a"), b"A")
    c.put(key("b"), b"B")
    real_unlink = os.unlink

    def refuse(path, *, dir_fd=None):
        if str(path).endswith(".kbc"):
            raise PermissionError(13, "Permission denied")
        return real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(kcache.os, "unlink", refuse)
    with pytest.raises(CacheError, match=r"could not clear .* 2 item\(s\) remain.*Permission denied"):
        c.clear()


def test_cli_cache_clear_fails_visibly(tmp_path, monkeypatch, capsys):
    from kernelbay import cli

    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    monkeypatch.setenv("KERNELBAY_CACHE_DIR", str(d))
    assert cli.main(["cache", "clear"]) != 0
    assert "writable by" in capsys.readouterr().err


def test_cache_max_bytes_accepts_units_and_names_the_variable(monkeypatch):
    from kernelbay.errors import SettingError

    for raw, want in [("1GB", 10**9), ("512MiB", 512 << 20), ("1.5GiB", 3 << 29), ("4096", 4096)]:
        monkeypatch.setenv("KERNELBAY_CACHE_MAX_BYTES", raw)
        assert DiskCache("/nonexistent-kb").max_bytes == want
    for raw in ["lots", "-1", "1 PB", "9" * 5000]:
        monkeypatch.setenv("KERNELBAY_CACHE_MAX_BYTES", raw)
        with pytest.raises(SettingError, match="KERNELBAY_CACHE_MAX_BYTES=.* e.g. 1GiB"):
            DiskCache("/nonexistent-kb")


def _compile_lock_worker(args):
    d, i = args
    import time

    c = DiskCache(d)
    k = key("locked")
    made = 0
    if c.get(k) is None:
        with kcache.locked(c, k):
            if kcache.recheck(c, k) is None:
                time.sleep(0.3)  # a slow compile: the others must wait, not compile too
                c.put(k, b"built", {"by": i})
                made = 1
    return made


def test_compile_lock_lets_one_of_many_processes_build(tmp_path):
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(8) as pool:
        made = pool.map(_compile_lock_worker, [(str(tmp_path / "c"), i) for i in range(8)])
    assert sum(made) == 1
