"""``scalar_bool = False``: the scalar checks for a language without bool parameters (OpenCL C).

pyref stands in for such a backend with a scalar kernel that has no bool parameter; every
other scalar check runs, and the bool ones say why they do not.
"""

from __future__ import annotations

import kernelbay as kb
import numpy as np
import pytest
from kernelbay.testing.conformance.scalars import ScalarTests


def scalars_without_bool(
    t,
    i,
    u,
    f,
    p0: np.int8,
    p1: np.int16,
    p2: np.int32,
    p3: np.int64,
    p4: np.uint8,
    p5: np.uint16,
    p6: np.uint32,
    p7: np.uint64,
    p8: np.float32,
    p9: np.float64,
):
    i[:4] = (p0, p1, p2, p3)
    u[:4] = (p4, p5, p6, p7)
    f[:2] = (p8, p9)


class TestNoBoolParameters(ScalarTests):
    backend = "pyref"
    scalar_bool = False

    def scalar_source(self) -> kb.Source:
        return kb.Source(scalars_without_bool, lang="python", name="scalars")


def test_the_declared_parameter_list_leaves_bool_out() -> None:
    names = [d.name for d in TestNoBoolParameters().scalar_params()]
    assert "bool" not in names and names[:2] == ["int8", "int16"] and len(names) == 10
    with pytest.raises(pytest.skip.Exception, match="scalar_bool = False"):
        TestNoBoolParameters()._position("bool")
