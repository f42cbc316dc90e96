"""The slow-shape families of `tools.bench`'s suite (issue 46): layers whose shapes
defeated the CPU model's tiles, each with a shape of the issue and one or two shapes
the model was not tuned on.

- a 1x1 convolution over a small map (`W` = 14 or 7: shorter than a register tile's
  16 lanes), written as the pointwise contraction it is;
- a first-layer convolution (`C` = 3 input channels, a 5x5 or 3x3 window);
- a batched matmul with a narrow output (the TC paper's TBMM, 26 wide);
- linear + relu, a 3-layer MLP (relu between the layers);
- a tensordot-like contraction over a channel pair at every pixel;
- a transposed convolution written as a user scatter (stride 2).

Each case has a NumPy and a PyTorch reference like the rest of the suite.
"""

from __future__ import annotations

from typing import Any

from tools.bench import CONV, CONV_T2, LINEAR_RELU, Case, _conv_case, _f32, _np_conv_transpose

CONV1X1 = (
    "def conv1x1(float(N, C, H, W) I, float(M, C) W1) -> (O) {\n"
    "    O(n, m, h, w) +=! I(n, c, h, w) * W1(m, c)\n}"
)
TBMM = (
    "def tbmm(float(B, N, M) X, float(B, K, M) Y) -> (Z) {\n"
    "    Z(b, n, k) +=! X(b, n, m) * Y(b, k, m)\n}"
)
MLP3 = (
    "def mlp3(float(B, I) X, float(H1, I) W1, float(H1) b1, float(H2, H1) W2, float(H2) b2,\n"
    "         float(O, H2) W3, float(O) b3) -> (Y1, Z1, Y2, Z2, Y3, Z3) {\n"
    "    Y1(n, o) +=! X(n, i) * W1(o, i)\n"
    "    Z1(n, o) = fmax(Y1(n, o) + b1(o), 0)\n"
    "    Y2(n, o) +=! Z1(n, i) * W2(o, i)\n"
    "    Z2(n, o) = fmax(Y2(n, o) + b2(o), 0)\n"
    "    Y3(n, o) +=! Z2(n, i) * W3(o, i)\n"
    "    Z3(n, o) = Y3(n, o) + b3(o)\n}"
)
TENSORDOT = (
    "def tensordot(float(N, C1, C2, H, W) I0, float(N, C2, C3, H, W) I1) -> (O) {\n"
    "    O(n, c1, c3, h, w) +=! I0(n, c1, c2, h, w) * I1(n, c2, c3, h, w)\n}"
)


def _torch_f() -> Any:
    import torch.nn.functional as F

    return F


def _conv1x1(name: str, n: int, c: int, hw: int, m: int) -> Case:
    def inputs(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["N"], s["C"], s["H"], s["H"]), _f32(rng, s["M"], s["C"])

    def numpy(i: Any, w: Any) -> Any:
        import numpy as np

        return np.einsum("nchw,mc->nmhw", i, w, optimize=True)

    return Case(name, CONV1X1, {"N": n, "C": c, "H": hw, "M": m},
                {"N": 2, "C": 3, "H": 5, "M": 4}, inputs, numpy,
                lambda i, w: _torch_f().conv2d(i, w[:, :, None, None]))  # fmt: skip


def _first_conv(name: str, n: int, hw: int, m: int, k: int) -> Case:
    case = _conv_case(name, n, 3, hw, m, k)
    return Case(case.name, CONV, case.sizes, {"N": 2, "C": 3, "H": 7, "M": 3, "K": k},
                case.inputs, case.numpy, case.torch)  # fmt: skip


def _tbmm(name: str, b: int, n: int, m: int, k: int) -> Case:
    def inputs(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["B"], s["N"], s["M"]), _f32(rng, s["B"], s["K"], s["M"])

    return Case(name, TBMM, {"B": b, "N": n, "M": m, "K": k},
                {"B": 2, "N": 3, "M": 5, "K": 4}, inputs,
                lambda x, y: x @ y.transpose(0, 2, 1),
                lambda x, y: x @ y.transpose(1, 2))  # fmt: skip


def _linear_relu(name: str, b: int, i: int, o: int) -> Case:
    import numpy as np

    def inputs(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["B"], s["I"]), _f32(rng, s["O"], s["I"]), _f32(rng, s["O"])

    return Case(name, LINEAR_RELU, {"B": b, "I": i, "O": o}, {"B": 3, "I": 5, "O": 4},
                inputs, lambda x, w, c: np.maximum(x @ w.T + c, 0),
                lambda x, w, c: _torch_f().linear(x, w, c).relu(), output=1)  # fmt: skip


def _mlp3(name: str, b: int, i: int, h1: int, h2: int, o: int) -> Case:
    import numpy as np

    def inputs(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        def w(rows: int, cols: int) -> Any:
            return _f32(rng, rows, cols) * np.float32(1 / np.sqrt(cols))

        return (_f32(rng, s["B"], s["I"]), w(s["H1"], s["I"]), _f32(rng, s["H1"]),
                w(s["H2"], s["H1"]), _f32(rng, s["H2"]), w(s["O"], s["H2"]),
                _f32(rng, s["O"]))  # fmt: skip

    def numpy(x: Any, w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any) -> Any:
        z1 = np.maximum(x @ w1.T + b1, 0)
        z2 = np.maximum(z1 @ w2.T + b2, 0)
        return z2 @ w3.T + b3

    def torch(x: Any, w1: Any, b1: Any, w2: Any, b2: Any, w3: Any, b3: Any) -> Any:
        f = _torch_f()
        return f.linear(f.linear(f.linear(x, w1, b1).relu(), w2, b2).relu(), w3, b3)

    sizes = {"B": b, "I": i, "H1": h1, "H2": h2, "O": o}
    small = {"B": 3, "I": 5, "H1": 4, "H2": 6, "O": 2}
    return Case(name, MLP3, sizes, small, inputs, numpy, torch, output=5)


def _tensordot(name: str, n: int, c1: int, c2: int, c3: int, h: int, w: int) -> Case:
    def inputs(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (_f32(rng, s["N"], s["C1"], s["C2"], s["H"], s["W"]),
                _f32(rng, s["N"], s["C2"], s["C3"], s["H"], s["W"]))  # fmt: skip

    def numpy(a: Any, b: Any) -> Any:
        import numpy as np

        return np.einsum("nabhw,nbchw->nachw", a, b, optimize=True)

    def torch(a: Any, b: Any) -> Any:
        import torch

        return torch.einsum("nabhw,nbchw->nachw", a, b)

    sizes = {"N": n, "C1": c1, "C2": c2, "C3": c3, "H": h, "W": w}
    small = {"N": 2, "C1": 3, "C2": 2, "C3": 4, "H": 3, "W": 5}
    return Case(name, TENSORDOT, sizes, small, inputs, numpy, torch)


def _conv_t2(name: str, n: int, c: int, hw: int, m: int) -> Case:
    def inputs(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["N"], s["C"], s["H"], s["H"]), _f32(rng, s["C"], s["M"], 3, 3)

    return Case(name, CONV_T2, {"N": n, "C": c, "H": hw, "M": m},
                {"N": 2, "C": 2, "H": 5, "M": 3}, inputs, _np_conv_transpose,
                lambda i, w: _torch_f().conv_transpose2d(i, w, stride=2))  # fmt: skip


def shape_cases() -> tuple[Case, ...]:
    """The families of the module doc: the issue's shape first, then untuned ones."""
    return (
        _conv1x1("1x1 conv N4 C256 14^2 M512", 4, 256, 14, 512),
        _conv1x1("1x1 conv N8 C128 7^2 M256", 8, 128, 7, 256),
        _conv1x1("1x1 conv N2 C96 13^2 M40", 2, 96, 13, 40),
        _first_conv("conv C3 N4 64^2 M32 5x5", 4, 64, 32, 5),
        _first_conv("conv C3 N4 45^2 M24 3x3", 4, 45, 24, 3),
        _tbmm("tbmm B500 N26 M72 K26", 500, 26, 72, 26),
        _tbmm("tbmm B128 N19 M100 K33", 128, 19, 100, 33),
        _linear_relu("linear+relu 96x300->130", 96, 300, 130),
        _mlp3("MLP-3 128x512->256->256->64", 128, 512, 256, 256, 64),
        _mlp3("MLP-3 64x200->100->50->10", 64, 200, 100, 50, 10),
        _tensordot("tensordot N4 C64x16x8 14^2", 4, 64, 16, 8, 14, 14),
        _tensordot("tensordot N2 C32x7x5 9x11", 2, 32, 7, 5, 9, 11),
        _conv_t2("conv_t2 stride 2 N8 C32 16^2 M16", 8, 32, 16, 16),
        _conv_t2("conv_t2 stride 2 N4 C16 13^2 M8", 4, 16, 13, 8),
    )


__all__ = ["CONV1X1", "MLP3", "TBMM", "TENSORDOT", "shape_cases"]
