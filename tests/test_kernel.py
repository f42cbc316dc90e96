"""`compiler.kernel.define`: templates, call-time validation, out= and warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from compiler.diagnostics import OptionsError, ShapeError, TCError
from compiler.kernel import Kernel, TCWarning, define, substitute

MATMUL = """def mm(float(M, K) A, float(K, N) B) -> (C) {
    C(m, n) +=! A(m, k) * B(k, n) where m in 0:M, n in 0:N, k in 0:K
}"""
ACCUMULATE = """def acc(float(M, K) A, float(K, N) B) -> (C) {
    C(m, n) += A(m, k) * B(k, n) where m in 0:M, n in 0:N, k in 0:K
}"""
RNG = np.random.default_rng(1)


def rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def mm() -> Kernel:
    return define(MATMUL)


def test_define_and_call(mm: Kernel) -> None:
    a, b = rand(3, 4), rand(4, 5)
    (c,) = mm(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    assert mm.name == "mm" and mm.source == MATMUL and mm.ranged.name == "mm"
    assert mm.output_shapes(a, b) == {"C": (3, 5)}


def test_define_picks_a_def_by_name() -> None:
    source = MATMUL + "\ndef neg(float(N) X) -> (Y) { Y(i) = -X(i) where i in 0:N }"
    k = define(source, "neg")
    np.testing.assert_array_equal(k(np.arange(3, dtype=np.float32))[0], [0, -1, -2])
    with pytest.raises(TCError, match="2 defs"):
        define(source)
    with pytest.raises(TCError, match="no def named 'ng'"):
        define(source, "ng")


def test_wrong_number_of_inputs(mm: Kernel) -> None:
    with pytest.raises(ShapeError, match=r"takes 2 input\(s\) \(A, B\), got 1"):
        mm(rand(3, 4))


def test_wrong_rank(mm: Kernel) -> None:
    with pytest.raises(ShapeError, match="'A' is declared with rank 2.*rank 3"):
        mm(rand(3, 4, 1), rand(4, 5))


@pytest.mark.parametrize(
    ("dtype", "words"),
    [(np.float64, "dtype float64"), (np.int32, "dtype int32"), (np.float16, "dtype float16")],
)
def test_wrong_dtype_is_refused_with_a_hint(mm: Kernel, dtype: type, words: str) -> None:
    with pytest.raises(ShapeError, match=words) as err:
        mm(rand(3, 4).astype(dtype), rand(4, 5))
    assert err.value.diagnostics[0].hint == "convert it with A.astype(np.float32)"


def test_float_array_for_int_parameter() -> None:
    k = define("def f(int32(N) I) -> (O) { O(i) = I(i) * 2 where i in 0:N }")
    with pytest.raises(ShapeError, match="declared int32, got an array of dtype float32"):
        k(rand(3))
    with pytest.raises(ShapeError, match="declared int32, got an array of dtype int64"):
        k(np.arange(3))
    np.testing.assert_array_equal(k(np.arange(3, dtype=np.int32))[0], [0, 2, 4])


def test_mismatched_sizes(mm: Kernel) -> None:
    with pytest.raises(ShapeError) as err:
        mm(rand(3, 4), rand(5, 6))
    assert "K" in err.value.message


def test_non_contiguous_inputs_are_copied(mm: Kernel) -> None:
    a, b = rand(4, 3).T, rand(4, 10)[:, ::2]
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    np.testing.assert_allclose(mm(a, b)[0], a @ b, rtol=1e-5, atol=1e-6)


def test_python_scalars_for_zero_dimensional_inputs() -> None:
    k = define(
        "def axpy(float a, float(N) X, int32 s) -> (Y) { Y(i) = a * X(i) + s where i in 0:N }"
    )
    x = rand(4)
    np.testing.assert_allclose(k(2, x, 3)[0], 2 * x + 3, rtol=1e-6)
    np.testing.assert_allclose(k(0.5, x, np.int32(1))[0], 0.5 * x + 1, rtol=1e-6)
    zero_d = np.asarray(1.5, np.float32)  # a 0-d array stays 0-d
    np.testing.assert_allclose(k(zero_d, x, np.asarray(0, np.int32))[0], 1.5 * x, rtol=1e-6)
    with pytest.raises(ShapeError, match="declared int32, got float"):
        k(1.0, x, 2.5)
    with pytest.raises(ShapeError, match="must be a NumPy array, got list"):
        k(1.0, [1.0, 2.0], 1)


def test_out_accumulates_into_caller_data() -> None:
    k = define(ACCUMULATE)
    a, b = rand(3, 4), rand(4, 5)
    c = np.ones((3, 5), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when out= is given
        (result,) = k(a, b, out=(c,))
    assert result is c
    np.testing.assert_allclose(c, 1 + a @ b, rtol=1e-5, atol=1e-6)
    d = np.full((3, 5), 2, np.float32)
    k(a, b, out={"C": d})
    np.testing.assert_allclose(d, 2 + a @ b, rtol=1e-5, atol=1e-6)


def test_accumulating_without_out_warns_and_starts_at_zero() -> None:
    k = define(ACCUMULATE)
    a, b = rand(3, 4), rand(4, 5)
    with pytest.warns(TCWarning, match="accumulates into output 'C'"):
        (c,) = k(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_initialising_def_does_not_warn(mm: Kernel) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mm(rand(2, 2), rand(2, 2))


@pytest.mark.parametrize(
    ("out", "words"),
    [
        ((np.zeros((3, 4), np.float32),), r"shape \(3, 4\), expected \(3, 5\)"),
        ((np.zeros((3, 5), np.float64),), "dtype float64, expected float32"),
        ((), r"out= has 0 array\(s\)"),
        ({"D": np.zeros((3, 5), np.float32)}, "'D', which is not an output"),
        (np.zeros((3, 5), np.float32), "must be a tuple/list"),
    ],
)
def test_bad_out(mm: Kernel, out: object, words: str) -> None:
    with pytest.raises(ShapeError, match=words):
        mm(rand(3, 4), rand(4, 5), out=out)


def test_read_only_out_is_refused(mm: Kernel) -> None:
    c = np.zeros((3, 5), np.float32)
    c.flags.writeable = False
    with pytest.raises(ShapeError, match="read-only"):
        mm(rand(3, 4), rand(4, 5), out=(c,))


def test_constants_fill_placeholders() -> None:
    source = """def pad(float(N) A) -> (O) {{
        O(i) = A(i) * {scale} where i in 0:N - {cut}
    }}"""
    k = define(source, constants={"scale": 3, "cut": 1})
    a = rand(4)
    np.testing.assert_allclose(k(a)[0], 3 * a[:3], rtol=1e-6)


def test_substitute_escapes_and_errors() -> None:
    assert substitute("{{ {a} }}", {"a": 2}) == "{ 2 }"
    assert substitute("{x:.2f}", {"x": 0.5}) == "0.50"
    with pytest.raises(TCError, match=r"no value for placeholder '\{sh\}'") as err:
        substitute("def f() {{ {sh} }}", {"s": 1})
    assert err.value.span.text == "{sh}"
    with pytest.raises(TCError, match="constant 'unused' has no placeholder"):
        substitute("{a}", {"a": 1, "unused": 2})
    with pytest.raises(TCError, match="single '}'"):
        substitute("def f() }", {})
    with pytest.raises(TCError, match="is not a name"):
        substitute("{0}", {})


def test_template_source_without_constants_is_plain_tc() -> None:
    with pytest.raises(TCError):
        define("def f(float(N) A) -> (O) {{ O(i) = A(i) * {s} where i in 0:N }}")


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"target": "cuda", "options": object()}, "options= for a CUDA target must be"),
        ({"target": "tpu"}, "unknown target 'tpu'"),
        ({"options": object()}, "options= must be a compiler.options.Options"),
        ({"backward": 3}, "backward= names a def of the same source"),
    ],
)
def test_unsupported_define_arguments(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(OptionsError, match=words):
        define(MATMUL, **kwargs)  # type: ignore[arg-type]


def test_indirect_read_out_of_range_is_an_error() -> None:
    k = define(
        "def gather(float(V, D) E, int32(N) idx) -> (O) "
        "{ O(i, d) = E(idx(i), d) where i in 0:N, d in 0:D }"
    )
    e = rand(4, 2)
    np.testing.assert_array_equal(k(e, np.array([3, 1], np.int32))[0], e[[3, 1]])
    with pytest.raises(ShapeError, match="index -1 out of range for dimension 0 of 'E'"):
        k(e, np.array([0, -1], np.int32))


def test_kernel_larger_than_image_is_a_shape_error() -> None:
    conv = define("def conv(float(H) I, float(KH) K) -> (O) { O(h) +=! I(h + kh) * K(kh) }", "conv")
    assert conv(rand(5), rand(5))[0].shape == (1,)
    with pytest.raises(ShapeError, match=r"negative size -1 .*H - KH \+ 1"):
        conv(rand(3), rand(5))


def test_gradient_kernel_keeps_the_thread_count_not_the_schedule_knobs() -> None:
    from compiler.options import Options

    src = "def mm(double(M, K) A, double(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"
    given = Options(threads=1, fuse=False, register_tile=1, tile=(8, 8), vector_bits=128)
    k = define(src, options=given, cache=None)
    assert k.grad.options == Options(threads=1, fuse=False, vector_bits=128)
    assert k.grad.info()["threads"] == 1
    rng = np.random.default_rng(0)
    a, b, g = rng.random((5, 7)), rng.random((7, 3)), rng.random((5, 3))
    ga, gb = k.vjp(a, b, grad_outputs=(g,))
    np.testing.assert_allclose(ga, g @ b.T, rtol=1e-12)
    np.testing.assert_allclose(gb, a.T @ g, rtol=1e-12)
