"""The core's C fronts of ``kb.buffer``, ``kb.empty``, ``Buffer.close`` and ``Buffer.__del__``
give what their Python twins give -- the buffer or array, the error (type and message), the
counters and frees -- for every spelling and error case, and run no Python frame of the core on
their path (support.py says how both paths are run and compared).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import kernelbay as kb
import numpy as np
import pytest
from kernelbay import _fronts, memory
from kernelbay.memory import Buffer

from .support import both, python_frames

BUFFER_CASES: dict[str, Callable[[kb.Device], Any]] = {
    "positional": lambda d: kb.buffer(16, d),
    "keywords": lambda d: kb.buffer(nbytes=16, device=d),
    "zero bytes": lambda d: kb.buffer(0, d),
    "device by name": lambda d: kb.buffer(16, "counted"),
    "default device": lambda d: kb.buffer(16),
    "numpy int": lambda d: kb.buffer(np.int64(16), d),
    "bool": lambda d: kb.buffer(True, d),
    "negative": lambda d: kb.buffer(-1, d),
    "float": lambda d: kb.buffer(16.0, d),
    "too large": lambda d: kb.buffer((1 << 48) + 1, d),
    "huge": lambda d: kb.buffer(1 << 70, d),
    "bad device": lambda d: kb.buffer(16, 5),
    "unknown device": lambda d: kb.buffer(16, "nosuch"),
    "extra argument": lambda d: kb.buffer(16, d, 1),
    "unknown keyword": lambda d: kb.buffer(16, devic=d),
    "nothing": lambda d: kb.buffer(),
    "empty": lambda d: kb.empty(4, "float32", d),
    "empty default dtype": lambda d: kb.empty(4, device=d),
    "empty numpy dtype": lambda d: kb.empty(4, np.int16, d),
    "empty dtype object": lambda d: kb.empty(4, np.dtype("uint8"), d),
    "empty 2-d": lambda d: kb.empty((2, 3), "float64", d),
    "empty zero": lambda d: kb.empty(0, "float32", d),
    "empty keywords": lambda d: kb.empty(shape=3, dtype="int32", device=d),
    "empty default device": lambda d: kb.empty(4, "float32"),
    "empty negative": lambda d: kb.empty(-1, "float32", d),
    "empty bool shape": lambda d: kb.empty(True, "float32", d),
    "empty too large": lambda d: kb.empty(1 << 46, "float64", d),
    "empty object dtype": lambda d: kb.empty(4, object, d),
    "empty unknown dtype": lambda d: kb.empty(4, "float33", d),
    "empty unhashable dtype": lambda d: kb.empty(4, [("a", "i4")], d),
    "empty extra argument": lambda d: kb.empty(4, "float32", d, 1),
}


@pytest.mark.parametrize("case", list(BUFFER_CASES))
def test_buffer_and_empty_give_the_python_paths_result_or_error(case, dev):
    front, python = both(lambda: BUFFER_CASES[case](dev))
    assert front == python


@pytest.mark.parametrize("case", ["positional", "keywords", "empty", "empty default dtype", "empty keywords"])
def test_buffer_and_empty_run_no_python_frame_of_the_core(case, dev, be):
    kept = [BUFFER_CASES[case](dev)]  # the dtype seen once: the front serves the memo's dtypes
    be.direct.clear()
    assert python_frames(lambda: kept.append(BUFFER_CASES[case](dev))) == []
    assert be.direct == ["allocate"]


@pytest.mark.parametrize("path", ["front", "python"])
def test_close_frees_once_counts_and_marks_closed(path, dev, be):
    _fronts.use(path == "front")
    for make in (lambda: kb.buffer(16, dev), lambda: kb.zeros(4, "int32", dev)):
        buf = make()
        n = memory.closes
        be.direct.clear()
        buf.close()
        buf.close()
        assert buf.closed and memory.closes == n + 1 and be.direct == ["free"]
        with pytest.raises(kb.UseAfterFreeError, match="was used after close"):
            buf.checked_handle()
        with make() as b2:
            pass
        assert b2.closed and memory.closes == n + 2
    if path == "front":
        b3 = kb.buffer(8, dev)
        assert python_frames(b3.close) == []


@pytest.mark.parametrize("path", ["front", "python"])
def test_a_buffer_collected_unclosed_is_freed_once_and_a_closed_one_costs_no_frame(path, dev, be):
    _fronts.use(path == "front")
    n = memory.closes
    be.direct.clear()
    b = kb.buffer(16, dev)
    del b
    gc.collect()
    assert be.direct == ["allocate", "free"] and memory.closes == n  # a collection is not a close()
    closed = kb.buffer(16, dev)
    closed.close()
    assert python_frames(closed.__del__) == ([] if path == "front" else ["__del__"])


@pytest.mark.parametrize("self", [object(), None, 3])
def test_close_of_an_object_that_is_not_a_buffer_is_the_python_paths_error(self, dev):
    front, python = both(lambda: Buffer.close(self))
    assert front == python and front[:2] == ("raised", AttributeError)
    front, python = both(lambda: Buffer.__del__(self))
    assert front == python and front[:2] == ("raised", AttributeError)


def test_a_backend_without_direct_callables_runs_the_python_functions(add_backend, fake, be, dev):
    fdev = kb.device("fake")
    kept: list[kb.Buffer] = []
    assert python_frames(lambda: kept.append(kb.buffer(8, fdev))) == ["buffer"]
    assert python_frames(kept[0].close) == ["close"] and fake.freed == 1
