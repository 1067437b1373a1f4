"""Run the corpus of real public CUDA kernels on every backend present (issue #24).

Each case compiles the upstream device code unchanged and compares against a numpy reference.
A case listed in known_failures.py for a backend is a strict expected failure (a fix shows up
as XPASS). On a GPU machine the cuda result is also compared with the cpu result.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kernelbay.errors import CompileError

from tests.corpus.all_cases import CASES
from tests.corpus.cases import Case, run_case
from tests.corpus.known_failures import KNOWN_FAILURES


def _backend_present(name: str) -> str | None:
    """Return None when ``name`` has a device here, else the reason it is skipped."""
    import kernelbay as kb

    try:
        kb.device(name)
    except Exception as exc:
        return f"no {name} device here: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


BACKENDS = ("cpu", "cuda")


def _params() -> list[Any]:
    out: list[Any] = []
    for backend in BACKENDS:
        for case in CASES:
            marks = []
            reason = KNOWN_FAILURES.get(backend, {}).get(case.id)
            if reason is not None:
                # only a compile error or a missing API may be "known": a mismatch or crash still fails
                marks.append(pytest.mark.xfail(reason=reason, strict=True, raises=(CompileError, NotImplementedError)))
            out.append(pytest.param(backend, case, id=f"{backend}-{case.id}", marks=marks))
    return out


def test_known_failures_name_real_cases() -> None:
    ids = {c.id for c in CASES}
    assert len(ids) == len(CASES), "duplicate case ids"
    for backend, entries in KNOWN_FAILURES.items():
        assert backend in BACKENDS, backend
        stale = set(entries) - ids
        assert not stale, f"known_failures.py lists cases that do not exist: {sorted(stale)}"


@pytest.mark.parametrize(("backend", "case"), _params())
def test_corpus_case(backend: str, case: Case) -> None:
    skip = _backend_present(backend)
    if skip is not None:
        pytest.skip(skip)
    run_case(case, backend)


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.id not in KNOWN_FAILURES["cuda"] and c.id not in KNOWN_FAILURES["cpu"]],
    ids=lambda c: c.id,
)
def test_cuda_matches_cpu(case: Case) -> None:
    for backend in ("cuda", "cpu"):
        skip = _backend_present(backend)
        if skip is not None:
            pytest.skip(skip)
    on_cuda = run_case(case, "cuda")
    on_cpu = run_case(case, "cpu")
    for i, got in on_cuda.items():
        want = on_cpu[i]
        skip = case.order_dependent.get(i, ())
        if skip:  # thread-order results: each run checked their properties already
            keep = np.ones(got.size, bool)
            keep[list(skip)] = False
            got, want = got.reshape(-1)[keep], want.reshape(-1)[keep]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{case.id}: argument {i}")
