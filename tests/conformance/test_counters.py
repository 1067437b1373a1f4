"""The suite's ``MemoryStats.counters`` check fails a backend whose counters break the contract.

pyref's device runs the suite's own check with its ``memory_stats`` replaced, for each broken
counter a backend could report; its real stats (no counters) pass.
"""

from __future__ import annotations

import itertools
from typing import Any

import kernelbay as kb
import pytest
from kernelbay.testing.conformance.memory import MemoryTests


class _Check(MemoryTests):
    backend = "pyref"


def _run(monkeypatch: pytest.MonkeyPatch, reports: list[dict[str, Any]] | None) -> None:
    device = kb.device("pyref")
    if reports is not None:
        seq = itertools.chain(reports, itertools.repeat(reports[-1]))
        monkeypatch.setattr(kb.Device, "memory_stats", lambda self: kb.MemoryStats(0, 0, 0, counters=next(seq)))
    _Check().test_memory_stats_counters(device)


def test_no_counters_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    _run(monkeypatch, None)  # pyref's own stats: an empty mapping
    _run(monkeypatch, [{}])


def test_counters_that_grow_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    _run(monkeypatch, [{"cross_stream_frees": 0, "waits": 3}, {"cross_stream_frees": 2, "waits": 3, "new_one": 1}])


@pytest.mark.parametrize(
    ("reports", "why"),
    [
        ([{"frees": -1}], "non-negative int"),
        ([{"frees": 1.5}], "float 1.5; a counter is a non-negative int"),
        ([{"frees": True}], "bool True"),
        ([{"frees": "3"}], "str '3'"),
        ([{"CrossStream": 1}], "not snake_case"),
        ([{"frees": 5}, {"frees": 4}], "went down from 5 to 4"),
        ([{"frees": 5}, {}], "disappeared"),
    ],
)
def test_broken_counters_fail_naming_the_rule(
    monkeypatch: pytest.MonkeyPatch, reports: list[dict[str, Any]], why: str
) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"\[rule: memory_stats counters\]") as info:
        _run(monkeypatch, reports)
    assert why in str(info.value)
