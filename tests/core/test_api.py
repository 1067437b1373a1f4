import kernelbay as kb
import numpy as np
import pytest
from kernelbay.errors import numbered_source
from kernelbay.types import dim3


def test_arrays_round_trip_and_properties(fake):
    host = np.arange(12, dtype=np.float64).reshape(3, 4)
    a = kb.asarray(host, device="fake")
    assert (a.shape, a.dtype, a.nbytes, a.size, a.ndim, len(a)) == ((3, 4), np.float64, 96, 12, 2, 3)
    np.testing.assert_array_equal(a.numpy(), host)
    np.testing.assert_array_equal(np.asarray(a), host)
    assert kb.asarray(a) is a
    b = kb.asarray(a, dtype="float32")
    assert b.dtype == np.float32 and b is not a
    np.testing.assert_array_equal(b.numpy(), host.astype(np.float32))


def test_asarray_takes_lists_and_non_contiguous(fake):
    np.testing.assert_array_equal(kb.asarray([1, 2, 3], device="fake").numpy(), [1, 2, 3])
    strided = np.arange(20, dtype=np.int32)[::3]
    np.testing.assert_array_equal(kb.asarray(strided, device="fake").numpy(), strided)


def test_copy_into_non_contiguous_numpy(fake):
    a = kb.asarray(np.arange(5, dtype=np.int64), device="fake")
    out = np.zeros(10, np.int64)
    kb.copy(out[::2], a)
    np.testing.assert_array_equal(out, [0, 0, 1, 0, 2, 0, 3, 0, 4, 0])


def test_copy_errors_say_what_differs(fake):
    a = kb.empty((2, 3), "float32", device="fake")
    with pytest.raises(
        kb.InvalidArgumentError, match=r"destination has 24 bytes \(shape \(2, 3\).*source has 28 bytes"
    ):
        kb.copy(a, np.zeros(7, np.float32))
    with pytest.raises(kb.InvalidArgumentError, match="destination is float32, source is int32"):
        kb.copy(a, np.zeros(6, np.int32))
    with pytest.raises(kb.ArgumentTypeError, match="at least one kernelbay"):
        kb.copy(np.zeros(1), np.zeros(1))
    with pytest.raises(kb.ArgumentTypeError, match="not list"):
        kb.copy(a, [1, 2])
    with pytest.raises(kb.InvalidArgumentError, match="read-only"):
        ro = np.zeros(6, np.float32)
        ro.flags.writeable = False
        kb.copy(ro, a)


def test_use_after_free_and_collection_frees(fake):
    a = kb.zeros(4, "int32", device="fake")
    a.close()
    with pytest.raises(kb.UseAfterFreeError, match="used after close"):
        a.numpy()
    before = fake.freed
    kb.empty(10, device="fake")  # dropped at once
    assert fake.freed == before + 1


def test_shape_validation(fake):
    with pytest.raises(kb.InvalidArgumentError, match="negative"):
        kb.empty((2, -1), device="fake")
    with pytest.raises(kb.ArgumentTypeError):
        kb.empty(None, device="fake")
    with pytest.raises(kb.InvalidArgumentError):
        kb.buffer(-1, device="fake")
    assert kb.buffer(0, device="fake").nbytes == 0


def test_compile_picks_first_accepted_language(add_backend):
    from .conftest import FakeBackend

    add_backend(FakeBackend("multi", languages=("python", "other")))
    srcs = [
        kb.Source("int main(){}", lang="c++"),
        kb.Source(lambda: "other", lang="other"),
        kb.Source(lambda: "py", lang="python"),
    ]
    k = kb.compile(srcs, device="multi")
    assert k.source.lang == "other" and k.launch(1) == "other"
    with pytest.raises(kb.InvalidArgumentError, match=r"accepts the languages python, other; .* in: c\+\+, cuda"):
        kb.compile([kb.Source("x", lang="cuda"), kb.Source("y", lang="c++")], device="multi")
    with pytest.raises(kb.ArgumentTypeError):
        kb.compile(["not a source"], device="multi")


def test_compile_error_carries_log_and_numbered_lines(fake):
    with pytest.raises(kb.CompileError) as info:
        kb.compile(kb.Source("bad", lang="python"), device="fake")
    assert info.value.log == "error: bad" and ">1 | bad" in str(info.value)


def test_numbered_source_marks_lines():
    text = "\n".join(f"line{i}" for i in range(1, 11))
    out = numbered_source(text, {5}, context=1)
    assert out.splitlines() == ["  4 | line4", "> 5 | line5", "  6 | line6"]


def test_launch_and_config(fake):
    k = kb.compile(kb.Source(lambda a, b: a + b, lang="python", name="add"), device="fake")
    assert k.launch(1, args=(2, 3)) == 5
    assert k(1, None, (1, 1)) == 2
    cfg = kb.LaunchConfig(grid=4, block=(8, 2))
    assert (cfg.grid, cfg.block) == ((4, 1, 1), (8, 2, 1))
    assert k.launch(config=cfg, args=(1, 2)) == 3
    with pytest.raises(kb.InvalidArgumentError, match="needs grid"):
        k.launch(args=(1, 2))
    with pytest.raises(kb.InvalidArgumentError):
        kb.LaunchConfig(grid=1, shared_mem=-1)


@pytest.mark.parametrize(
    "value,want",
    [(5, (5, 1, 1)), ((2, 3), (2, 3, 1)), ([4], (4, 1, 1)), ((1, 2, 3), (1, 2, 3)), (np.int64(7), (7, 1, 1))],
)
def test_dim3(value, want):
    assert dim3(value) == want


@pytest.mark.parametrize("bad", [0, -1, (1, 0), (1, 2, 3, 4), (), "x", 1.5j])
def test_dim3_rejects(bad):
    with pytest.raises(kb.InvalidArgumentError):
        dim3(bad, "block")


def test_source_from_file(tmp_path):
    p = tmp_path / "k.cu"
    p.write_text("__global__ void k() {}")
    s = kb.Source.from_file(p, name="k")
    assert (s.lang, s.name, s.text) == ("cuda", "k", "__global__ void k() {}")
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF")
    assert kb.Source.from_file(tmp_path / "k.cubin").code == b"\x7fELF"
    with pytest.raises(kb.InvalidArgumentError, match="suffix"):
        kb.Source.from_file(tmp_path / "k.txt")
    with pytest.raises(kb.InvalidArgumentError, match="cannot read"):
        kb.Source.from_file(tmp_path / "missing.cu")


def test_source_digest_covers_what_defines_the_output():
    base = kb.Source("x", lang="cuda", name="k")
    variants = [
        kb.Source("y", lang="cuda", name="k"),
        kb.Source("x", lang="cuda", name="j"),
        kb.Source("x", lang="cuda", name="k", options=("-DN=1",)),
        kb.Source("x", lang="cuda", name="k", headers={"h.cuh": "int a;"}),
        kb.Source("x", lang="cuda", name="k", name_expressions=("k<float>",)),
    ]
    assert len({base.digest(), *[v.digest() for v in variants]}) == 6
    assert kb.Source("x", lang="CUDA", name="k").digest() == base.digest()
    with pytest.raises(kb.ArgumentTypeError):
        kb.Source(42, lang="cuda")


def test_errors_subclass_the_builtins():
    assert issubclass(kb.InvalidArgumentError, ValueError)
    assert issubclass(kb.ArgumentTypeError, TypeError)
    assert issubclass(kb.OutOfMemoryError, MemoryError)
    assert issubclass(kb.NoDeviceError, LookupError)
    assert issubclass(kb.UnsupportedError, NotImplementedError)


def test_asarray_of_a_foreign_array_nobody_adopts(fake):
    class DeviceOnly:
        def __dlpack__(self, **kw):
            raise BufferError("lives on a device numpy cannot read")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(kb.ArgumentTypeError, match="no available kernelbay backend adopts it.*kernelbay-cuda"):
        kb.asarray(DeviceOnly(), device="fake")

    class HostDLPack:  # a host array exposing only DLPack is read through it
        def __init__(self):
            self.a = np.arange(3, dtype=np.int16)

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    np.testing.assert_array_equal(kb.asarray(HostDLPack(), device="fake").numpy(), [0, 1, 2])


def test_fast_constructors_set_every_field(fake):
    # kb.buffer and kb.empty build their objects without __init__: every attrs field must be set,
    # and equal to what the constructor would have made.
    import attrs
    from kernelbay.types import Array, Buffer

    b = kb.buffer(16, "fake")
    a = kb.empty((2, 3), "int16", kb.device("fake"))
    for obj, cls in ((b, Buffer), (a, Array)):
        assert type(obj) is cls
        made = cls(*(getattr(obj, f.name) for f in attrs.fields(cls)))
        for f in attrs.fields(cls):
            assert getattr(obj, f.name) is getattr(made, f.name), f.name
        made.handle = None  # do not free the memory twice
    assert (a.shape, a.dtype, a.nbytes) == ((2, 3), np.dtype("int16"), 12)
    b.close()
    a.close()
