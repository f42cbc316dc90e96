"""`tcc gradcheck` input control (--seed, --positive, --range), integer inputs drawn
over the extent they index, and reports that say when a NaN or a tie makes the check
meaningless (compiler.inputs, compiler.gradcheck)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import OptionsError
from compiler.gradcheck import GradcheckError, tied_reductions
from compiler.inputs import index_extents, random_inputs

ROOT = Path(__file__).parents[2]

# a batch normalisation: rsqrt of the variance input is NaN where it is negative
BATCHNORM = """
def bn(float(N, C) I, float(C) var) -> (mean, O) {
    mean(c) +=! I(n, c) / float(N)
    O(n, c) = (I(n, c) - mean(c)) * rsqrt(var(c))
}
"""

# a min-distance def: Codes index L's second dimension (extent K)
MINDIST = """
def mindist(float(M, K) L, int32(N, M) Codes) -> (S, v) {
    S(n) +=! L(m, Codes(n, m))
    v min=! S(r_n)
}
"""


def tcc(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "def.tc"
    f.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "compiler", "gradcheck", str(f), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_batchnorm_nan_is_reported_as_meaningless(tmp_path: Path) -> None:
    r = tcc(tmp_path, BATCHNORM, "--shape", "I=4,3,var=3", "--range", "var=-2:-1")
    assert r.returncode == 1
    assert "analytic nan, numeric nan" in r.stderr
    assert "NaN elements: the def is undefined at these inputs" in r.stderr
    assert "not a wrong gradient" in r.stderr
    assert "Traceback" not in r.stderr


def test_batchnorm_with_positive_variance_passes(tmp_path: Path) -> None:
    for seed in ("0", "1", "2"):
        r = tcc(tmp_path, BATCHNORM, "--shape", "I=4,3,var=3", "--positive", "var", "--seed", seed)
        assert r.returncode == 0, r.stderr
        assert "gradcheck ok (bn)" in r.stdout


def test_min_distance_with_drawn_codes_passes(tmp_path: Path) -> None:
    r = tcc(tmp_path, MINDIST, "--shape", "L=3,5", "--shape", "Codes=4,3")
    assert r.returncode == 0, r.stderr


def test_min_distance_ties_are_reported_as_meaningless(tmp_path: Path) -> None:
    # every code 0: all S(n) are equal, so `v min=! S(r_n)` ties
    r = tcc(tmp_path, MINDIST, "--shape", "L=3,5,Codes=4,3", "--range", "Codes=0:1")
    assert r.returncode == 1
    assert "`v min=! S(r_n)` has ties at these inputs" in r.stderr
    assert "not a wrong gradient" in r.stderr


def test_kink_is_reported() -> None:
    # fmax of equal values: each side gets the full gradient (tcc's tie rule), while
    # the one-sided differences are the gradient and 0
    k = compiler.define("def f(double(N) A, double(N) B) -> (O) { O(i) = fmax(A(i), B(i)) }")
    a = np.array([0.3, -1.2, 2.0])
    with pytest.raises(GradcheckError, match="not differentiable at this point"):
        compiler.gradcheck(k, a, a.copy())
    compiler.gradcheck(k, a, a + 0.5)  # no tie: passes


def test_integer_subscripts_are_drawn_over_the_extent_they_index() -> None:
    k = compiler.define(MINDIST, target="interp")
    shapes = {"L": (3, 7), "Codes": (50, 3)}
    assert index_extents(k.ranged, shapes) == {"Codes": 7}
    codes = random_inputs(k.ranged, shapes, np.random.default_rng(0))["Codes"]
    assert codes.dtype == np.int32
    assert codes.min() >= 0 and codes.max() <= 6
    assert len(np.unique(codes)) == 7  # 150 draws cover all 7 values


def test_seed_positive_and_range_control_the_floats() -> None:
    k = compiler.define(BATCHNORM, target="interp")
    shapes = {"I": (40, 3), "var": (3,)}
    a = random_inputs(k.ranged, shapes, np.random.default_rng(0))
    b = random_inputs(k.ranged, shapes, np.random.default_rng(1))
    assert not np.array_equal(a["I"], b["I"])
    p = random_inputs(k.ranged, shapes, np.random.default_rng(0), positive=["var"])
    assert (p["var"] >= 0.5).all() and (p["var"] < 2).all()
    r = random_inputs(k.ranged, shapes, np.random.default_rng(0), ranges={"I": (3, 4)})
    assert (r["I"] >= 3).all() and (r["I"] < 4).all() and r["I"].dtype == np.float32
    with pytest.raises(OptionsError, match="'bogus' is not an input of def 'bn'"):
        random_inputs(k.ranged, shapes, np.random.default_rng(0), positive=["bogus"])
    with pytest.raises(OptionsError, match="empty range"):
        random_inputs(k.ranged, shapes, np.random.default_rng(0), ranges={"I": (1, 1)})


def test_tied_reductions_counts_ties_only_where_they_are() -> None:
    k = compiler.define(MINDIST, target="interp")
    L = np.arange(15, dtype=np.float32).reshape(3, 5)
    distinct = np.array([[0, 1, 2], [3, 4, 0]], dtype=np.int32)
    assert tied_reductions(k, (L, distinct)) == []
    same = np.zeros((2, 3), dtype=np.int32)
    (message,) = tied_reductions(k, (L, same))
    assert "(1 of 1 element(s) reached by more than one term)" in message


def test_library_gradcheck_report_names_the_tie() -> None:
    k = compiler.define(MINDIST, target="interp")
    L = np.random.default_rng(0).standard_normal((3, 5))
    with pytest.raises(GradcheckError, match="has ties at these inputs"):
        compiler.gradcheck(k, L, np.zeros((4, 3), dtype=np.int32))


def test_bad_range_flag_is_a_user_error(tmp_path: Path) -> None:
    r = tcc(tmp_path, MINDIST, "--shape", "L=3,5,Codes=4,3", "--range", "Codes=1")
    assert r.returncode == 1
    assert "bad --range 'Codes=1'" in r.stderr
