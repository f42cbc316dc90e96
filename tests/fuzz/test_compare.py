"""The tester's comparison (tools.fuzz_run.compare): an oracle value that the output's
float type cannot hold is compared within one unit in the last place of that type,
whatever bound the oracle derived (seeds 34870, 39629: a float32 product of seven
factors outgrowing 24 bits, a float32 sum of products below the smallest subnormal);
a representable one is still compared exactly."""

from __future__ import annotations

import numpy as np

from tools.fuzz_ir import Expected
from tools.fuzz_run import compare


def _expected(value: float, dtype: str = "float") -> Expected:
    return Expected(
        values={"O": np.array([value])},
        tol={"O": np.zeros(1)},
        stable={"O": np.ones(1, bool)},
        gap=1.0,
        dtypes={"O": dtype},
    )


def test_a_representable_value_is_compared_exactly() -> None:
    exp = _expected(1.5)
    assert compare("O", np.array([1.5], np.float32), exp) is None
    assert compare("O", np.array([np.nextafter(np.float32(1.5), 2)], np.float32), exp)


def test_an_unrepresentable_value_allows_one_ulp_of_the_output_type() -> None:
    want = 369.4729700088501  # not a float32
    below = np.float32(want)
    exp = _expected(want)
    assert compare("O", np.array([below], np.float32), exp) is None
    assert compare("O", np.array([np.nextafter(below, np.float32(400))], np.float32), exp) is None
    two_away = np.nextafter(np.nextafter(below, np.float32(400)), np.float32(400))
    assert compare("O", np.array([two_away], np.float32), exp) is not None


def test_a_value_below_float32s_smallest_subnormal_may_be_zero() -> None:
    exp = _expected(7.52524275652894e-47)
    assert compare("O", np.array([0.0], np.float32), exp) is None
    assert compare("O", np.array([1e-40], np.float32), exp) is not None


def test_double_outputs_keep_the_oracles_bound() -> None:
    exp = _expected(0.1, "double")
    assert compare("O", np.array([0.1]), exp) is None
    assert compare("O", np.array([np.nextafter(0.1, 1.0)]), exp) is not None
