"""Padding is the CPU schedule's, not the gradient's (`compiler/cpu/pad.py`): the
gradient def that `--grad`, `compiler.grad`, `Kernel.grad_source` show and that higher
orders differentiate has no pads and no size splits; the loops hold the pad as a
zero-filled scratch `Alloc` (no parameter, no output) and the size-chosen versions; and
the gradients stay right on every target, in both size regimes of a split, checked
against float64 finite differences."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import loops as L
from compiler import pipeline
from tests.codegen.kit import EVERY_TARGET
from tests.codegen.kit import find as _find

ROOT = Path(__file__).resolve().parents[2]
CONV_BIAS = (ROOT / "examples" / "conv2d.tc").read_text()
CONV = (
    "def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)\n}"
)
# a transposed convolution: its scatter becomes a clamped gather the CPU pads
TCONV = (
    "def tconv(float(N, M, HO, WO) G, float(M, C, KH, KW) W1) -> (IG) {\n"
    "    IG(n, c, h + kh, w + kw) +=! G(n, m, h, w) * W1(m, c, kh, kw)\n}"
)
# correlation-shaped: its input gradient is padded for some sizes, clamped for others
WGRAD = (
    "def wgrad(float(N, C, H, W) I, float(N, M, HO, WO) G) -> (WG) {\n"
    "    WG(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw)\n}"
)


def _tcc(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_printed_gradient_is_the_gathered_def_without_pads() -> None:
    text = compiler.grad(CONV_BIAS)
    header, *stmts, _end = text.strip().splitlines()
    assert header.split("->")[1].split("{")[0].strip() == (
        "(float(N, C, H, W) I_grad, float(M, C, KH, KW) W1_grad, float(M) B_grad)"
    )
    assert [s.split("(")[0].strip() for s in stmts] == ["B_grad", "I_grad", "W1_grad"]
    assert "kh in max(0, y + KH - H):min(KH, y + 1)" in stmts[1]
    assert "_pad" not in text
    assert _tcc(str(ROOT / "examples" / "conv2d.tc"), "--grad") == text


def test_kernel_gradients_have_the_printed_outputs_and_no_pad_at_second_order() -> None:
    k = compiler.define(CONV_BIAS)
    g = k.grad
    assert [t.name for t in g.ranged.checked.outputs] == ["I_grad", "W1_grad", "B_grad"]
    assert "_pad" not in k.grad_source and "_pad" not in g.grad_source
    assert "_pad" not in _tcc(str(ROOT / "examples" / "conv2d.tc"), "--grad", "--order", "2")
    params = [t.name for t in g.grad.ranged.checked.tensors]
    assert not [p for p in params if "_pad" in p]


def test_the_loops_allocate_the_pad_and_keep_both_size_versions() -> None:
    f = pipeline.run(CONV_BIAS, upto="lower", grad=True).function
    assert [b.name for b in f.buffers] == ["I", "W1", "B", "O_grad", "I_grad", "W1_grad", "B_grad"]
    (pad,) = [a for a in _find(f.body, L.Alloc) if a.buffer.name == "O_grad_pad"]
    assert pad.buffer.role is L.Role.TEMP
    # written by its copy, read by the padded gather, both inside the Alloc
    assert any(s.buffer.name == "O_grad_pad" for s in _find(pad.body, L.Store))
    assert any(r.buffer.name == "O_grad_pad" for r in _find(pad.body, L.Load))
    # the clamped version, for the other sizes, reads O_grad itself
    clamped = [
        s
        for s in f.body.stmts  # type: ignore[attr-defined]
        if isinstance(s, L.If) and any(r.buffer.name == "O_grad" for r in _find(s, L.Load))
    ]
    assert clamped
    text = _tcc(str(ROOT / "examples" / "conv2d.tc"), "--grad", "--emit", "loops")
    assert "alloc temp float32 O_grad_pad[N, M, H + KH - 1, W + KW - 1] {" in text
    assert "O_grad_pad[i0, i1, i2, i3] = " in text  # the copy
    assert text.count("if (2 * H + 2 * W + 4 >= 3 * KH + 3 * KW)") >= 2  # copy, padded
    assert "O_grad_pad" not in text.splitlines()[0]  # not a parameter


def _arrays(rng: np.random.Generator, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    return [rng.standard_normal(s) for s in shapes]


# (def, input shapes): odd sizes; the WGRAD pair lies on both sides of its size split
# (X = HO + WO against 2 D, D = H - HO + 1 + W - WO + 1: 4 <= 20 pads, 11 > 6 clamps)
CASES = {
    "conv2d+bias": (CONV_BIAS, [(1, 3, 5, 4), (2, 3, 3, 2), (2,)]),
    "conv2d": (CONV, [(2, 1, 5, 3), (3, 1, 2, 3)]),
    "transposed conv": (TCONV, [(1, 2, 3, 2), (2, 3, 3, 2)]),
    "correlation, padded": (WGRAD, [(1, 2, 7, 5), (1, 1, 2, 2)]),
    "correlation, clamped": (WGRAD, [(1, 1, 7, 5), (1, 2, 6, 5)]),
}


def test_the_correlation_cases_take_each_version() -> None:
    # the CPU loops of WGRAD's gradient: the sizes of "correlation, padded" run the
    # copy into WG_grad_pad and the padded gather (the Ifs on "padding pays", the
    # copy's condition), those of "correlation, clamped" neither
    from compiler.backward import gradient_ranged
    from compiler.loops import versions as V

    k = compiler.define(WGRAD)
    f = pipeline.lower(gradient_ranged(k.ranged)).function
    ifs = _find(f.body, L.If)
    copy = next(s for s in ifs if any(t.buffer.name == "WG_grad_pad" for t in _find(s, L.Store)))
    points = {id(p): n for n, p in enumerate(V.choice_points(f))}
    pays = [(points[id(s)], True) for s in ifs if s.cond == copy.cond and id(s) in points]
    assert len(pays) >= 2  # the copy, then the padded gather (in each loop order)
    for case, padded in (("correlation, padded", True), ("correlation, clamped", False)):
        (n, c, h, w), (_, m, ho, wo) = CASES[case][1]
        sizes = {"N": n, "C": c, "H": h, "W": w, "M": m, "HO": ho, "WO": wo}
        taken = V.branches(f, sizes)  # (of the points these sizes reach)
        assert (pays[0] in taken) == padded, case  # the copy
        assert any(b in taken for b in pays[1:]) == padded, case  # a padded gather


@pytest.mark.parametrize(("target", "options"), EVERY_TARGET)
@pytest.mark.parametrize("case", list(CASES))
def test_gradcheck_on_every_target(case: str, target: str, options: object) -> None:
    src, shapes = CASES[case]
    k = compiler.define(src, target=target, options=options)
    compiler.gradcheck(k, *_arrays(np.random.default_rng(len(case)), *shapes))


@pytest.mark.parametrize(("target", "options"), EVERY_TARGET)
def test_second_order_gradcheck_of_conv2d(target: str, options: object) -> None:
    rng = np.random.default_rng(3)
    k = compiler.define(CONV_BIAS, target=target, options=options)
    i, w1, b = _arrays(rng, (1, 2, 4, 5), (2, 2, 3, 2), (2,))
    (o,) = k(*(a.astype(np.float32) for a in (i, w1, b)))
    compiler.gradcheck(k.grad, i, w1, b, rng.standard_normal(o.shape))
