import sys

import kernelbay as kb
import numpy as np
import pluggy
import pytest
from kernelbay._plugins import Backend, runtime

from .conftest import FakeBackend


def _binding(name):
    return runtime.load(name)


def test_hot_path_calls_the_backend_function_directly(fake):
    b = _binding("fake")
    assert b.launch.__func__ is FakeBackend.kernelbay_launch
    assert b.allocate.__func__ is FakeBackend.kernelbay_allocate
    assert not b.wrapped


class Tracer:
    def __init__(self):
        self.seen = []

    @kb.hookimpl(wrapper=True)
    def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
        self.seen.append((kernel.name, grid))
        return (yield)


def test_wrapper_runs_while_registered_and_not_after(fake):
    k = kb.compile(kb.Source(lambda v: v * 2, lang="python", name="double"), device="fake")
    tracer = Tracer()
    kb.register(tracer)
    try:
        assert k.launch(4, args=(21,)) == 42
        assert tracer.seen == [("double", 4)]
        assert _binding("fake").wrapped
    finally:
        kb.unregister(tracer)
    assert k.launch(1, args=(1,)) == 2
    assert tracer.seen == [("double", 4)]
    assert _binding("fake").launch.__func__ is FakeBackend.kernelbay_launch


def test_wrapper_registered_before_backend_loads(add_backend):
    tracer = Tracer()
    kb.register(tracer)
    add_backend(FakeBackend("late"))
    k = kb.compile(kb.Source(lambda: 7, lang="python", name="seven"), device="late")
    assert k.launch(1) == 7
    assert tracer.seen == [("seven", 1)]


def test_backends_only_see_their_own_calls(add_backend):
    a, b = add_backend(FakeBackend("a")), add_backend(FakeBackend("b"))
    ka = kb.compile(kb.Source(lambda: "a", lang="python", name="k"), device="a")
    kb_ = kb.compile(kb.Source(lambda: "b", lang="python", name="k"), device="b")
    assert (ka.launch(1), kb_.launch(1)) == ("a", "b")
    assert a.calls == ["launch"] and b.calls == ["launch"]


def test_misspelt_hook_marks_backend_broken_and_others_work(add_backend):
    class Misspelt(FakeBackend):
        @kb.hookimpl
        def kernelbay_lauch(self):  # typo
            pass

    add_backend(Misspelt("typo"))
    add_backend(FakeBackend("good"))
    with pytest.raises(kb.BackendBrokenError, match="kernelbay_lauch") as info:
        kb.device("typo")
    assert isinstance(info.value.__cause__, pluggy.PluginValidationError)
    assert str(kb.device()) == "good:0"
    rec = {r.name: r for r in kb.backends()}
    assert rec["typo"].status == "broken" and rec["good"].status == "available"


def test_wrong_signature_is_broken(add_backend):
    class WrongArgs(FakeBackend):
        @kb.hookimpl
        def kernelbay_allocate(self, device, nbytes, alignment):
            return bytearray(nbytes)

    add_backend(WrongArgs("wrong"))
    with pytest.raises(kb.BackendBrokenError, match="do not match kernelbay's hookspecs"):
        kb.device("wrong")
    assert not runtime.pm.get_plugins() or all("wrong" not in str(n) for n, _ in runtime.pm.list_name_plugin())


def test_api_version_mismatch_is_broken(add_backend):
    class Future(FakeBackend):
        @kb.hookimpl
        def kernelbay_backend(self):
            return kb.BackendSpec("future", 1, ("python",), kb.API_VERSION + 1)

    add_backend(Future("future"))
    with pytest.raises(kb.BackendBrokenError, match=f"built for kernelbay API version {kb.API_VERSION + 1}"):
        kb.device("future")


def test_api_version_advice_names_the_package_to_upgrade(add_backend):
    """Built for a newer contract: upgrade the core; for an older one: upgrade the backend."""

    def at(version: int) -> type:
        class Versioned(FakeBackend):
            @kb.hookimpl
            def kernelbay_backend(self):
                return kb.BackendSpec(self.name, 1, ("python",), version)

        return Versioned

    add_backend(at(kb.API_VERSION + 1)("newer"))
    add_backend(at(kb.API_VERSION - 1)("older"))
    with pytest.raises(
        kb.BackendBrokenError, match=r"upgrade kernelbay \(the core\) to a release that provides API version"
    ):
        kb.device("newer")
    with pytest.raises(
        kb.BackendBrokenError, match=rf"upgrade \S+.* to a release built for API version {kb.API_VERSION}"
    ) as info:
        kb.device("older")
    first = str(info.value).splitlines()[0]
    assert "upgrade kernelbay-older" in first and "(the core)" not in first


def test_a_hook_the_core_lacks_advises_upgrading_the_core(add_backend):
    class FromTheFuture(FakeBackend):
        @kb.hookimpl
        def kernelbay_hook_of_a_later_release(self, device):
            pass

    add_backend(FromTheFuture("later"))
    with pytest.raises(
        kb.BackendBrokenError, match=r"kernelbay_hook_of_a_later_release.*upgrade kernelbay \(the core\)"
    ):
        kb.device("later")


def test_whole_reason_reaches_the_selection_error(monkeypatch):
    """A plugin's SyntaxError: its last line ("SyntaxError: expected ':'") is in the reason and
    in the error of a selection that finds no device."""

    def load():
        exec(compile("def kernelbay_backend()\n    pass\n", "plugin.py", "exec"), {})

    runtime._extra["typo"] = Backend("typo", "kernelbay-typo", "1.0", "kernelbay_typo.plugin", load=load)
    rec = {r.name: r for r in kb.backends()}["typo"]
    assert rec.status == "broken" and "SyntaxError: expected ':'" in (rec.reason or "")
    with pytest.raises(kb.BackendError) as info:
        kb.device()
    assert "SyntaxError: expected ':'" in str(info.value), str(info.value)


def test_missing_required_hook_is_broken(add_backend):
    class NoLaunch:
        @kb.hookimpl
        def kernelbay_backend(self):
            return kb.BackendSpec("nolaunch", 1, ("python",), kb.API_VERSION)

    add_backend(NoLaunch(), "nolaunch")
    with pytest.raises(kb.BackendBrokenError, match="lacks the required hooks.*kernelbay_launch"):
        kb.device("nolaunch")


def test_probe_crash_is_broken_with_cause(add_backend):
    class Crashing(FakeBackend):
        @kb.hookimpl
        def kernelbay_devices(self):
            raise RuntimeError("driver exploded")

    add_backend(Crashing("crash"))
    add_backend(FakeBackend("ok"))
    with pytest.raises(kb.BackendBrokenError, match="driver exploded") as info:
        kb.device("crash")
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(kb.device("crash,ok")) == "ok:0"


def test_import_failure_is_broken_with_cause(monkeypatch):
    def load():
        import kernelbay_no_such_module  # noqa: F401

    runtime._extra["ghost"] = Backend("ghost", "kernelbay-ghost", "1.0", "kernelbay_no_such_module", load=load)
    with pytest.raises(kb.BackendBrokenError, match="importing kernelbay_no_such_module failed") as info:
        kb.device("ghost")
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert {r.name: r.status for r in kb.backends()} == {"ghost": "broken"}


def test_listing_loads_nothing(add_backend):
    loaded = []
    runtime._extra["lazy"] = Backend("lazy", None, None, "x", load=lambda: loaded.append(1) or FakeBackend("lazy"))
    recs = kb.backends()
    assert [r.name for r in recs] == ["lazy"] and loaded == []
    assert recs[0].status == "available" and loaded == [1]


def test_unsupported_optional_capability(fake):
    dev = kb.device("fake")
    with pytest.raises(kb.UnsupportedError, match="memory stats"):
        dev.memory_stats()
    a = kb.asarray(np.arange(3, dtype=np.int32), device=dev)
    assert not hasattr(a, "__cuda_array_interface__")


def test_import_is_cheap_and_lazy():
    import subprocess

    code = (
        "import sys, kernelbay as kb; kb.backends(); "
        "heavy = [m for m in ('numpy', 'jax', 'cuda', 'cuda.bindings', 'kernelbay_cpu', 'kernelbay_cuda', "
        "'kernelbay_tpu', 'kernelbay_pyref') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_reprobe_sees_a_changed_machine(add_backend, monkeypatch):
    from .conftest import UnavailableBackend

    state = {"up": False}

    class Flaky(UnavailableBackend):
        @kb.hookimpl
        def kernelbay_devices(self):
            if not state["up"]:
                raise kb.BackendUnavailableError("chip is off")
            return [kb.Device("flaky", 0)]

    add_backend(Flaky("flaky"))
    with pytest.raises(kb.BackendUnavailableError, match="chip is off"):
        kb.device("flaky")
    state["up"] = True
    with pytest.raises(kb.BackendUnavailableError):  # the probe's answer is kept
        kb.device("flaky")
    runtime.reprobe("flaky")
    assert str(kb.device("flaky")) == "flaky:0"


def test_remove_backend_unregisters_it(add_backend):
    add_backend(FakeBackend("gone"))
    add_backend(FakeBackend("stays"))
    assert str(kb.device("gone")) == "gone:0"
    runtime.remove_backend("gone")
    assert [r.name for r in kb.backends()] == ["stays"]
    assert all(name != "backend:gone" for name, _ in runtime.pm.list_name_plugin())
    with pytest.raises(kb.BackendNotInstalledError):
        kb.device("gone")


def test_binding_attributes_are_typed_as_their_hookspecs():
    # Binding declares each bound hook with the spec's signature so type checkers check the
    # core's calls; a hook added or changed in hookspecs.py without its Binding line fails here.
    import typing

    from kernelbay import _binding, graphs, hookspecs, streams, types

    ns = {**vars(_binding), **vars(types), "np": np, "Step": graphs.Step, "Stream": streams.Stream}
    ns["Event"] = streams.Event
    declared = typing.get_type_hints(_binding.Binding, globalns=ns)
    for hook in _binding.ALL_HOOKS:
        spec = typing.get_type_hints(getattr(hookspecs, hook), globalns=ns)
        ret = spec.pop("return")
        params, bound_ret = typing.get_args(declared[_binding._hook_attr(hook)])
        bound_ret = type(None) if bound_ret is None else bound_ret  # get_type_hints' spelling of None
        assert (list(params), bound_ret) == (list(spec.values()), ret), hook


class _Dist:
    def __init__(self, name):
        self.metadata = {"Name": name}
        self.version = "1.0"


class _EntryPoint:
    def __init__(self, name, dist, value, plugin):
        self.name, self.dist, self.value, self._plugin = name, _Dist(dist), value, plugin

    def load(self):
        return self._plugin


def _installed(monkeypatch, *eps):
    import importlib.metadata

    from kernelbay import _discovery

    monkeypatch.delenv("KERNELBAY_BACKENDS")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: list(eps))
    monkeypatch.setattr(_discovery, "_warned", set())
    runtime.reset()


def test_first_party_backend_wins_over_a_shadowing_distribution(monkeypatch, caplog):
    real, shadow = FakeBackend("cpu", priority=100), FakeBackend("cpu", priority=500)
    _installed(
        monkeypatch,
        _EntryPoint("cpu", "evil-cpu", "evil.plugin", shadow),
        _EntryPoint("cpu", "kernelbay_cpu", "kernelbay_cpu.plugin", real),
        _EntryPoint("ref", "kernelbay-pyref", "kernelbay_pyref.plugin", FakeBackend("ref", priority=0)),
    )
    with pytest.warns(RuntimeWarning, match=r"'cpu': evil-cpu \(evil.plugin\) also claims that name and is ignored"):
        recs = kb.backends()
    assert "kernelbay_cpu (the first-party backend) is used" in caplog.text
    assert [(r.name, r.distribution, r.status) for r in recs if r.name == "cpu"] == [
        ("cpu", "kernelbay_cpu", "available")
    ]
    assert str(kb.device()) == "cpu:0" and runtime.load("cpu").spec.priority == 100  # not the shadow, not ref
    runtime.reset()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        kb.backends()


def test_two_third_party_claimants_are_both_refused_and_default_does_not_fall_to_reference(monkeypatch):
    _installed(
        monkeypatch,
        _EntryPoint("twin", "kernelbay-twin-a", "a.plugin", FakeBackend("twin")),
        _EntryPoint("twin", "kernelbay-twin-b", "b.plugin", FakeBackend("twin")),
        _EntryPoint("ref", "kernelbay-pyref", "kernelbay_pyref.plugin", FakeBackend("ref", priority=0)),
    )
    assert {r.name: r.status for r in kb.backends()} == {"twin": "broken", "ref": "available"}
    with pytest.raises(kb.BackendBrokenError, match="kernelbay-twin-a.*kernelbay-twin-b"):
        kb.device("twin")
    with pytest.raises(kb.NoDeviceError, match="ref is a reference backend"):
        kb.device()


def test_two_first_party_copies_of_one_name_are_refused(monkeypatch):
    _installed(
        monkeypatch,
        _EntryPoint("cpu", "kernelbay-cpu", "kernelbay_cpu.plugin", FakeBackend("cpu")),
        _EntryPoint("cpu", "kernelbay-cpu", "kernelbay_cpu_old.plugin", FakeBackend("cpu")),
        _EntryPoint("cpu", "other", "other.plugin", FakeBackend("cpu")),
    )
    assert {r.name: r.status for r in kb.backends()} == {"cpu": "broken"}


class DirectBackend(FakeBackend):
    """A backend whose launch and allocate offer direct callables (hookspecs: *Direct*)."""

    def __init__(self, name: str = "direct", make_launch=None):
        super().__init__(name)
        self.direct_calls: list[str] = []
        backend = self

        def direct_launch(kernel, grid, block, args, shared_mem, stream):
            backend.direct_calls.append("launch")
            return kernel.handle(*args)

        def direct_allocate(device, nbytes):
            backend.direct_calls.append("allocate")
            return bytearray(nbytes)

        type(self).kernelbay_launch.kernelbay_direct = make_launch or (lambda: direct_launch)
        type(self).kernelbay_allocate.kernelbay_direct = lambda: direct_allocate

    @kb.hookimpl
    def kernelbay_launch(self, kernel, grid, block, args, shared_mem, stream):
        self.calls.append("launch")
        return kernel.handle(*args)

    @kb.hookimpl
    def kernelbay_allocate(self, device, nbytes):
        self.calls.append("allocate")
        return bytearray(nbytes)


def test_a_direct_callable_replaces_the_hook_after_the_probe_and_yields_to_wrappers(add_backend):
    be = add_backend(DirectBackend())
    k = kb.compile(kb.Source(lambda v: v + 1, lang="python", name="inc"), device="direct")  # probes
    assert k.launch(1, args=(1,)) == 2 and kb.buffer(8, "direct").nbytes == 8
    assert be.direct_calls == ["launch", "allocate"] and "launch" not in be.calls
    tracer = Tracer()
    kb.register(tracer)
    try:
        assert k.launch(1, args=(2,)) == 3  # the wrapper runs: through the hook, not the direct callable
        assert tracer.seen == [("inc", 1)] and be.calls.count("launch") == 1
    finally:
        kb.unregister(tracer)
    assert k.launch(1, args=(3,)) == 4
    assert be.direct_calls == ["launch", "allocate", "launch"]


@pytest.mark.parametrize("make", [lambda: None, lambda: 1 / 0, lambda: "not callable"])
def test_a_direct_factory_that_declines_or_fails_keeps_the_hook(add_backend, make, caplog):
    be = add_backend(DirectBackend("declines", make_launch=make))
    k = kb.compile(kb.Source(lambda v: v * 3, lang="python", name="triple"), device="declines")
    assert k.launch(1, args=(2,)) == 6
    assert be.calls.count("launch") == 1 and "launch" not in be.direct_calls
