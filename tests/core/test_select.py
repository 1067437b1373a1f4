import kernelbay as kb
import pytest
from kernelbay._plugins import runtime
from kernelbay._select import Term, parse

from .conftest import FakeBackend, UnavailableBackend


@pytest.mark.parametrize(
    "text,terms,excl",
    [
        ("cuda:1,cpu", [Term("cuda", 1), Term("cpu")], []),
        (" cuda , * ", [Term("cuda"), Term(None)], []),
        ("!tpu", [Term(None)], [Term("tpu", exclude=True)]),
        ("*,!cuda:1", [Term(None)], [Term("cuda", 1, True)]),
        ("", [Term(None)], []),
        (None, [Term(None)], []),
    ],
)
def test_grammar(text, terms, excl):
    sel = parse(text)
    assert list(sel.terms) == terms and list(sel.exclusions) == excl


@pytest.mark.parametrize("bad", ["cu da", "cuda:-1", "cuda:x", ":1", "cuda,,cpu", "!"])
def test_bad_terms_name_the_term(bad):
    with pytest.raises(kb.InvalidArgumentError, match="bad device selector term"):
        parse(bad)


def test_first_available_wins(add_backend):
    add_backend(FakeBackend("a", priority=10))
    add_backend(UnavailableBackend("b", priority=20))
    assert str(kb.device("b,a")) == "a:0"
    assert str(kb.device("a")) == "a:0"


def test_default_is_highest_priority_available(add_backend, monkeypatch):
    add_backend(FakeBackend("low", priority=10))
    add_backend(FakeBackend("high", priority=90))
    add_backend(UnavailableBackend("top", priority=99))
    assert str(kb.device()) == "high:0"
    monkeypatch.setenv("KERNELBAY_DEVICE", "!high")
    assert str(kb.device()) == "low:0"
    monkeypatch.setenv("KERNELBAY_DEVICE", "low")
    assert str(kb.device()) == "low:0"
    assert str(kb.device("high")) == "high:0"  # the argument overrides the variable


def test_device_index_and_exclusion_of_one_device(add_backend):
    add_backend(FakeBackend("g", ndev=3))
    assert kb.device("g:2").index == 2
    assert str(kb.device("g,!g:0")) == "g:1"
    with pytest.raises(kb.NoDeviceError, match=r"g has 3: g:0, g:1, g:2") as info:
        kb.device("g:5,g:7")
    assert "g:5" in str(info.value) and "g:7" in str(info.value)


def test_unavailable_reason_names_distribution_and_what_to_do(add_backend):
    add_backend(UnavailableBackend("gpu"))
    add_backend(FakeBackend("cpuish"))
    with pytest.raises(kb.BackendUnavailableError) as info:
        kb.device("gpu")
    msg = str(info.value)
    assert "kernelbay-gpu: no fake chip found" in msg
    assert "cpuish (kernelbay-cpuish): available: cpuish:0" in msg
    assert "KERNELBAY_DEVICE=cpuish:0" in msg


def test_not_installed_lists_what_is(add_backend):
    add_backend(FakeBackend("a"))
    with pytest.raises(
        kb.BackendNotInstalledError, match=r"'nosuch' is not installed \(installed: .*a.*pip install kernelbay-nosuch"
    ):
        kb.device("nosuch")


def test_allowlist_hides_an_installed_backend(add_backend, monkeypatch):
    add_backend(FakeBackend("a"))
    monkeypatch.setattr(runtime, "installed_names", lambda: ["a", "hidden"])
    with pytest.raises(kb.BackendNotInstalledError, match="'hidden' is installed but KERNELBAY_BACKENDS=''"):
        kb.device("hidden")


def test_nothing_installed():
    with pytest.raises(kb.NoDeviceError, match="no kernelbay backend is allowed|no kernelbay backend is installed"):
        kb.device()


def test_excluding_everything(add_backend):
    add_backend(FakeBackend("a"))
    with pytest.raises(kb.NoDeviceError, match="outside the exclusions"):
        kb.device("!a")


def test_a_reference_backend_is_never_chosen_unless_named(add_backend, monkeypatch):
    """priority <= 0 (the pyref example's): ``*`` and the default skip it; naming it works."""
    add_backend(FakeBackend("ref", priority=0))
    add_backend(UnavailableBackend("real", priority=100))
    with pytest.raises(kb.NoDeviceError) as info:
        kb.device()
    msg = str(info.value)
    assert "ref is a reference backend" in msg and "never chosen unless named" in msg
    assert "KERNELBAY_DEVICE=ref" in msg and "real (kernelbay-real): unavailable" in msg
    with pytest.raises(kb.NoDeviceError, match="ref is a reference backend"):
        kb.device("*,!real")
    assert str(kb.device("ref")) == "ref:0" and str(kb.device("real,ref")) == "ref:0"
    monkeypatch.setenv("KERNELBAY_DEVICE", "ref")
    assert str(kb.device()) == "ref:0"
    assert [str(d) for d in kb.devices()] == ["ref:0"]  # listed, just not chosen by default


def test_a_real_backend_beats_a_reference_one_of_any_priority(add_backend):
    add_backend(FakeBackend("ref", priority=-5))
    add_backend(FakeBackend("low", priority=1))
    assert str(kb.device()) == "low:0" and str(kb.device("*")) == "low:0"
