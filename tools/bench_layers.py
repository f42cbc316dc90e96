"""More benchmark cases for `tools.bench`: `--extra` (older cases: batched matmul, 1x1 and
group convolutions, pooling, the convolution's gradient kernels) and `--layers`, a suite
of float32 training layers other than the main suite's (depthwise and pointwise
convolutions, pooling, batch and RMS norms, an LSTM cell, an MLP layer, GELU, a row
logsumexp, global average pooling), to see how the CPU model does on defs it was not
tuned on. Each case has a NumPy and a PyTorch reference like the main suite's.
"""

from __future__ import annotations

from typing import Any

from tools.bench import CONV, MATMUL, Case, _conv_case, _f32

IGRAD = (
    "def conv_igrad(float(N, M, HO, WO) G, float(M, C, KH, KW) W1) -> (IG) {\n"
    "    IG(n, c, h + kh, w + kw) +=! G(n, m, h, w) * W1(m, c, kh, kw)\n}"
)
WGRAD = (
    "def conv_wgrad(float(N, C, H, W) I, float(N, M, HO, WO) G) -> (WG) {\n"
    "    WG(m, c, kh, kw) +=! G(n, m, h, w) * I(n, c, h + kh, w + kw)\n}"
)


def _igrad_numpy(g: Any, w: Any) -> Any:
    import numpy as np

    kh, kw = w.shape[2], w.shape[3]
    gp = np.pad(g, ((0, 0), (0, 0), (kh - 1, kh - 1), (kw - 1, kw - 1)))
    win = np.lib.stride_tricks.sliding_window_view(gp, (kh, kw), axis=(2, 3))
    return np.einsum("nmhwij,mcij->nchw", win, w[:, :, ::-1, ::-1], optimize=True)


def _igrad_torch(g: Any, w: Any) -> Any:
    import torch

    n, _, ho, wo = g.shape
    size = (n, w.shape[1], ho + w.shape[2] - 1, wo + w.shape[3] - 1)
    return torch.nn.grad.conv2d_input(size, w, g)


def _wgrad_numpy(i: Any, g: Any) -> Any:
    import numpy as np

    win = np.lib.stride_tricks.sliding_window_view(i, g.shape[2:], axis=(2, 3))
    return np.einsum("ncklhw,nmhw->mckl", win, g, optimize=True)


def _wgrad_torch(i: Any, g: Any) -> Any:
    import torch

    kh, kw = i.shape[2] - g.shape[2] + 1, i.shape[3] - g.shape[3] + 1
    return torch.nn.grad.conv2d_weight(i, (g.shape[1], i.shape[1], kh, kw), g)


def _grad_cases() -> tuple[Case, ...]:
    def igrad_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        ho = s["H"] - s["K"] + 1
        return _f32(rng, s["N"], s["M"], ho, ho), _f32(rng, s["M"], s["C"], s["K"], s["K"])

    def wgrad_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        ho = s["H"] - s["K"] + 1
        return _f32(rng, s["N"], s["C"], s["H"], s["H"]), _f32(rng, s["N"], s["M"], ho, ho)

    sizes = {"N": 32, "C": 4, "H": 56, "M": 16, "K": 3}
    small = {"N": 2, "C": 2, "H": 6, "M": 3, "K": 3}
    return (
        Case("conv2d igrad N32 C4 56^2 M16 3x3", IGRAD, sizes, small, igrad_in,
             _igrad_numpy, _igrad_torch),
        Case("conv2d wgrad N32 C4 56^2 M16 3x3", WGRAD, sizes, small, wgrad_in,
             _wgrad_numpy, _wgrad_torch),
    )  # fmt: skip


def _maxpool_numpy(x: Any) -> Any:
    n, c, h, w = x.shape
    return x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _group_conv_numpy(i: Any, w: Any) -> Any:
    import numpy as np

    kh, kw = w.shape[3], w.shape[4]
    win = np.lib.stride_tricks.sliding_window_view(i, (kh, kw), axis=(3, 4))
    return np.einsum("ngchwij,gmcij->ngmhw", win, w, optimize=True)


def _torch_group_conv(i: Any, w: Any) -> Any:
    import torch.nn.functional as F

    n, g, c, h, wd = i.shape
    out = F.conv2d(i.reshape(n, g * c, h, wd), w.reshape(-1, c, w.shape[3], w.shape[4]), groups=g)
    return out.reshape(n, g, w.shape[1], out.shape[2], out.shape[3])


def extra_cases() -> tuple[Case, ...]:
    import numpy as np

    def mm_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["M"], s["K"]), _f32(rng, s["K"], s["N"])

    def bmm_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return _f32(rng, s["B"], s["M"], s["K"]), _f32(rng, s["B"], s["K"], s["N"])

    def image(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (_f32(rng, s["N"], s["C"], s["H"], s["H"]),)

    def gconv_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        return (
            _f32(rng, s["N"], s["G"], s["C"], s["H"], s["H"]),
            _f32(rng, s["G"], s["M"], s["C"], 3, 3),
        )

    return (
        Case(
            "batched matmul 32x128^3",
            "def bmm(float(B, M, K) X, float(B, K, N) Y) -> (Z) {\n"
            "    Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)\n}",
            {"B": 32, "M": 128, "K": 128, "N": 128},
            {"B": 2, "M": 3, "K": 4, "N": 5},
            bmm_in,
            np.matmul,
            lambda a, b: a @ b,
        ),
        _conv_case("conv2d N32 C4 56^2 M16 1x1", 32, 4, 56, 16, 1),
        _conv_case("conv2d N32 C4 56^2 M16 3x3", 32, 4, 56, 16, 3),
        Case(
            "group conv N8 G4 C8 28^2 M8 3x3",
            "def gconv(float(N, G, C, H, W) I, float(G, M, C, KH, KW) W1) -> (O) {\n"
            "    O(n, g, m, h, w) +=! I(n, g, c, h + kh, w + kw) * W1(g, m, c, kh, kw)\n}",
            {"N": 8, "G": 4, "C": 8, "H": 28, "M": 8},
            {"N": 2, "G": 2, "C": 2, "H": 5, "M": 2},
            gconv_in,
            _group_conv_numpy,
            _torch_group_conv,
        ),
        Case(
            "maxpool 2x2/2 N32 C16 64^2",
            "def maxpool(float(N, C, H, W) I) -> (O) {\n"
            "    O(n, c, h, w) max=! I(n, c, 2 * h + kh, 2 * w + kw) where kh in 0:2, kw in 0:2\n}",
            {"N": 32, "C": 16, "H": 64},
            {"N": 2, "C": 2, "H": 6},
            image,
            _maxpool_numpy,
            lambda x: __import__("torch").nn.functional.max_pool2d(x, 2),
        ),
        Case(
            "exp-then-contract 256^3",
            "def expmm(float(M, K) A, float(K, N) B) -> (C) {\n"
            "    C(m, n) +=! exp(A(m, k)) * B(k, n)\n}",
            {"M": 256, "K": 256, "N": 256},
            {"M": 4, "K": 3, "N": 5},
            mm_in,
            lambda a, b: np.exp(a) @ b,
            lambda a, b: a.exp() @ b,
        ),
        # odd and skinny products (a classifier's last layer, a small batch): remainder
        # tiles, few rows or columns per register tile, little work per thread
        *(
            Case(
                f"matmul {m}x{k}x{n}",
                MATMUL,
                {"M": m, "K": k, "N": n},
                {"M": min(m, 5), "K": 3, "N": min(n, 4)},
                mm_in,
                np.matmul,
                lambda a, b: a @ b,
            )
            for m, k, n in ((300, 300, 7), (7, 300, 300), (129, 257, 65))
        ),
        *_grad_cases(),
    )


def _sigmoid(x: Any) -> Any:
    import numpy as np

    return 1 / (1 + np.exp(-x))


def _np_lstm(x: Any, hp: Any, cp: Any, wx: Any, wh: Any) -> Any:
    import numpy as np

    g = x @ wx.T + hp @ wh.T
    i, f, c, o = np.split(g, 4, axis=1)
    cn = _sigmoid(f) * cp + _sigmoid(i) * np.tanh(c)
    return _sigmoid(o) * np.tanh(cn)


def _torch_lstm(x: Any, hp: Any, cp: Any, wx: Any, wh: Any) -> Any:
    g = x @ wx.T + hp @ wh.T
    i, f, c, o = g.chunk(4, dim=1)
    cn = f.sigmoid() * cp + i.sigmoid() * c.tanh()
    return o.sigmoid() * cn.tanh()


def _np_batchnorm(x: Any, gamma: Any, beta: Any) -> Any:
    import numpy as np

    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * gamma[None, :, None, None] + beta[None, :, None, None]


def _np_pool(x: Any, op: str) -> Any:
    n, c, h, w = x.shape
    win = x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2)
    return win.max(axis=(3, 5)) if op == "max" else win.mean(axis=(3, 5))


def _np_depthwise(i: Any, w: Any) -> Any:
    import numpy as np

    win = np.lib.stride_tricks.sliding_window_view(i, w.shape[1:], axis=(2, 3))
    return np.einsum("nchwij,cij->nchw", win, w, optimize=True)


def _gelu(x: Any, tanh: Any) -> Any:
    return 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


LSTM = (
    "def lstm_cell(float(B, I) X, float(B, H) Hp, float(B, H) Cp, float(G, I) Wx,"
    " float(G, H) Wh) -> (Gt, C, Hn) {\n"
    "    Gt(b, g) +=! X(b, i) * Wx(g, i)\n"
    "    Gt(b, g) += Hp(b, j) * Wh(g, j)\n"
    "    C(b, h) = Cp(b, h) / (1 + exp(-Gt(b, H + h))) + tanh(Gt(b, 2 * H + h))"
    " / (1 + exp(-Gt(b, h))) where h in 0:H\n"
    "    Hn(b, h) = tanh(C(b, h)) / (1 + exp(-Gt(b, 3 * H + h)))\n}"
)
BATCHNORM = (
    "def batchnorm(float(N, C, H, W) X, float(C) gamma, float(C) beta) -> (mean, var, Y) {\n"
    "    mean(c) +=! X(n, c, h, w) / (N * H * W)\n"
    "    var(c) +=! (X(n, c, h, w) - mean(c)) * (X(n, c, h, w) - mean(c)) / (N * H * W)\n"
    "    Y(n, c, h, w) = (X(n, c, h, w) - mean(c)) * rsqrt(var(c) + 1e-5) * gamma(c) + beta(c)\n}"
)
RMSNORM = (
    "def rmsnorm(float(N, D) X, float(D) G) -> (ms, Y) {\n"
    "    ms(n) +=! X(n, d) * X(n, d) / D\n"
    "    Y(n, d) = X(n, d) * rsqrt(ms(n) + 1e-6) * G(d)\n}"
)
LOGSUMEXP = (
    "def logsumexp(float(N, D) X) -> (mx, s, L) {\n"
    "    mx(n) max=! X(n, d)\n"
    "    s(n) +=! exp(X(n, d) - mx(n))\n"
    "    L(n) = log(s(n)) + mx(n)\n}"
)
MLP = (
    "def mlp_tanh(float(B, I) X, float(O, I) W, float(O) b) -> (Y, Z) {\n"
    "    Y(n, o) +=! X(n, i) * W(o, i)\n"
    "    Z(n, o) = tanh(Y(n, o) + b(o))\n}"
)


def layer_cases() -> tuple[Case, ...]:
    """`--layers`: training layers beyond the main suite (module doc)."""
    import numpy as np

    def f32(*names: Any) -> Any:
        def make(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
            return tuple(_f32(rng, *(s[n] if isinstance(n, str) else n for n in shape))
                         for shape in names)  # fmt: skip

        return make

    def torch_f() -> Any:
        import torch.nn.functional as F

        return F

    def lstm_in(rng: Any, s: dict[str, int]) -> tuple[Any, ...]:
        b, i, h = s["B"], s["I"], s["H"]
        scale = np.float32(1 / np.sqrt(i + h))
        return (_f32(rng, b, i), _f32(rng, b, h), _f32(rng, b, h),
                _f32(rng, 4 * h, i) * scale, _f32(rng, 4 * h, h) * scale)  # fmt: skip

    def rows_logsumexp(x: Any) -> Any:
        m = x.max(axis=1)
        return np.log(np.exp(x - m[:, None]).sum(axis=1)) + m

    return (
        Case("depthwise conv N8 C64 56^2 3x3",
             "def dwconv(float(N, C, H, W) I, float(C, KH, KW) W1) -> (O) {\n"
             "    O(n, c, h, w) +=! I(n, c, h + kh, w + kw) * W1(c, kh, kw)\n}",
             {"N": 8, "C": 64, "H": 56}, {"N": 2, "C": 3, "H": 5},
             f32(("N", "C", "H", "H"), ("C", 3, 3)), _np_depthwise,
             lambda i, w: torch_f().conv2d(i, w[:, None], groups=w.shape[0])),
        Case("pointwise conv N8 C64 28^2 M128", CONV,
             {"N": 8, "C": 64, "H": 28, "M": 128, "K": 1}, {"N": 2, "C": 3, "H": 4, "M": 5, "K": 1},
             _conv_case("", 1, 1, 1, 1, 1).inputs, _conv_case("", 1, 1, 1, 1, 1).numpy,
             _conv_case("", 1, 1, 1, 1, 1).torch),
        Case("maxpool 2x2/2 N16 C64 56^2",
             "def maxpool(float(N, C, H, W) I) -> (O) {\n"
             "    O(n, c, h, w) max=! I(n, c, 2 * h + kh, 2 * w + kw) where kh in 0:2, kw in 0:2\n}",
             {"N": 16, "C": 64, "H": 56}, {"N": 2, "C": 2, "H": 5},
             f32(("N", "C", "H", "H")), lambda x: _np_pool(x, "max"),
             lambda x: torch_f().max_pool2d(x, 2)),
        Case("avgpool 2x2/2 N16 C64 56^2",
             "def avgpool(float(N, C, H, W) I) -> (O) {\n"
             "    O(n, c, h, w) +=! I(n, c, 2 * h + kh, 2 * w + kw) / 4 where kh in 0:2, kw in 0:2\n}",
             {"N": 16, "C": 64, "H": 56}, {"N": 2, "C": 2, "H": 5},
             f32(("N", "C", "H", "H")), lambda x: _np_pool(x, "avg"),
             lambda x: torch_f().avg_pool2d(x, 2)),
        Case("global avgpool N32 C256 14^2",
             "def gap(float(N, C, H, W) I) -> (O) {\n    O(n, c) +=! I(n, c, h, w) / (H * W)\n}",
             {"N": 32, "C": 256, "H": 14}, {"N": 2, "C": 3, "H": 4},
             f32(("N", "C", "H", "H")), lambda x: x.mean(axis=(2, 3)),
             lambda x: x.mean(dim=(2, 3))),
        Case("batchnorm (train) N16 C64 28^2", BATCHNORM, {"N": 16, "C": 64, "H": 28},
             {"N": 2, "C": 3, "H": 4}, f32(("N", "C", "H", "H"), ("C",), ("C",)), _np_batchnorm,
             lambda x, g, b: torch_f().batch_norm(x, None, None, g, b, training=True),
             output=2),
        Case("rmsnorm 512x1024", RMSNORM, {"N": 512, "D": 1024}, {"N": 3, "D": 5},
             f32(("N", "D"), ("D",)),
             lambda x, g: x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * g,
             lambda x, g: x * (x * x).mean(1, keepdim=True).add(1e-6).rsqrt() * g, output=1),
        Case("logsumexp 512x1000", LOGSUMEXP, {"N": 512, "D": 1000}, {"N": 3, "D": 5},
             f32(("N", "D")), rows_logsumexp, lambda x: x.logsumexp(1), output=2),
        Case("LSTM cell B64 I256 H256", LSTM, {"B": 64, "I": 256, "H": 256},
             {"B": 2, "I": 3, "H": 4}, lstm_in, _np_lstm, _torch_lstm, output=2),
        Case("MLP tanh 256x1024->1024", MLP, {"B": 256, "I": 1024, "O": 1024},
             {"B": 3, "I": 5, "O": 4}, f32(("B", "I"), ("O", "I"), ("O",)),
             lambda x, w, b: np.tanh(x @ w.T + b),
             lambda x, w, b: torch_f().linear(x, w, b).tanh(), output=1),
        Case("GELU (tanh) 2^20", "def gelu(float(N) X) -> (Y) {\n"
             "    Y(i) = 0.5 * X(i) * (1 + tanh(0.7978845608 * (X(i) + 0.044715 * X(i) * X(i) * X(i))))\n}",
             {"N": 1 << 20}, {"N": 7}, f32(("N",)), lambda x: _gelu(x, np.tanh),
             lambda x: torch_f().gelu(x, approximate="tanh")),
    )  # fmt: skip
