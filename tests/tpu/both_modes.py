"""Run a test module twice: in Pallas's interpret mode and under JAX's TPU interpreter.

A test module imports both names: ``from .both_modes import _interp, _interpret``. The autouse
fixture takes effect in each module that holds it; ``_interp()`` is the ``interpret=`` argument
a direct ``pallas_call`` needs to run as kernelbay does in the current mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True, scope="module", params=["1", "tpu"], ids=["interpret", "tpu-interpreter"])
def _interpret(request: Any) -> Iterator[str]:
    from kernelbay_tpu.testing import interpret_mode

    with interpret_mode(request.param):
        yield request.param


def _interp() -> Any:
    from kernelbay_tpu._driver import state

    return state.interpret_arg
