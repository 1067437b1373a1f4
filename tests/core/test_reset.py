"""Runtime.reset() leaves nothing behind: no binding, default stream or device choice of the old
runtime is used afterwards."""

from __future__ import annotations

import pickle

import kernelbay as kb
import numpy as np
import pytest
from kernelbay._plugins import runtime

from .conftest import FakeBackend


def test_default_stream_after_reset_calls_the_new_backend(add_backend):
    old = FakeBackend()
    add_backend(old)
    dev = kb.device("fake")
    dev.default_stream.synchronize()
    assert old.calls == ["sync"]

    runtime.reset()
    new = FakeBackend()
    add_backend(new)
    dev2 = kb.device("fake")
    dev2.default_stream.synchronize()
    dev2.synchronize()
    assert new.calls == ["sync", "sync"]
    assert old.calls == ["sync"], "the old plugin object was called after reset"
    # The default stream is the new runtime's own, also when asked through the old device.
    assert dev.default_stream is dev2.default_stream
    assert dev2.default_stream._binding is runtime.bindings["fake"]


def test_a_device_from_before_the_reset_reaches_the_new_backend(add_backend):
    old = FakeBackend()
    add_backend(old)
    dev = kb.device("fake")
    runtime.reset()
    new = FakeBackend()
    add_backend(new)
    dev.synchronize()
    dev.default_stream.synchronize()
    assert old.calls == [] and new.calls == ["sync", "sync"]


def test_reset_forgets_default_device_choices_and_extensions(add_backend):
    add_backend(FakeBackend())
    kb.device()
    assert runtime.default_devices

    class Ext:
        @kb.hookimpl(wrapper=True)
        def kernelbay_synchronize(self, device, stream):
            return (yield)

    kb.register(Ext())
    runtime.reset()
    assert runtime.default_devices == {} and runtime.extensions == [] and runtime.bindings == {}


def test_a_removed_backend_is_not_reached_through_its_devices(add_backend):
    add_backend(FakeBackend())
    dev = kb.device("fake")
    runtime.remove_backend("fake")
    with pytest.raises(kb.BackendNotInstalledError):
        dev.synchronize()


def test_hand_made_and_unpickled_devices_find_their_backend(add_backend):
    fake = FakeBackend()
    add_backend(fake)
    kb.Device("fake", 0).synchronize()
    dev = pickle.loads(pickle.dumps(kb.device("fake")))
    dev.synchronize()
    assert fake.calls == ["sync", "sync"]
    a = kb.asarray(np.arange(3, dtype=np.float32), device="fake")
    b = pickle.loads(pickle.dumps(a))
    assert b.device == a.device and b.numpy().tolist() == [0.0, 1.0, 2.0]
