"""TC sources shared by the torch tests (our own text, in TC's training-layer style)."""

from __future__ import annotations

CONV = """
def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {
    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)
}
def conv_grad(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(N, M, HO, WO) O_grad)
    -> (float(N, C, H, W) I_grad, float(M, C, KH, KW) W1_grad) {
    I_grad(n, c, h, w) +=! O_grad(n, m, h - kh, w - kw) * W1(m, c, kh, kw)
        where h in 0:H, w in 0:W, kh in 0:KH, kw in 0:KW, h - kh in 0:HO, w - kw in 0:WO
    W1_grad(m, c, kh, kw) +=! O_grad(n, m, h, w) * I(n, c, h + kh, w + kw)
}
"""

# Two outputs: `tmp` is a temporary (the convolution before the bias); the backward
# def takes the gradient of O only, so the layer passes reorder_function.
CONV_BIAS = """
def conv_bias(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(M) B) -> (tmp, O) {
    tmp(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)
    O(n, m, h, w) = tmp(n, m, h, w) + B(m)
}
def conv_bias_grad(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(M) B,
                   float(N, M, HO, WO) O_grad)
    -> (float(N, C, H, W) I_grad, float(M, C, KH, KW) W1_grad, float(M) B_grad) {
    I_grad(n, c, h, w) +=! O_grad(n, m, h - kh, w - kw) * W1(m, c, kh, kw)
        where h in 0:H, w in 0:W, kh in 0:KH, kw in 0:KW, h - kh in 0:HO, w - kw in 0:WO
    W1_grad(m, c, kh, kw) +=! O_grad(n, m, h, w) * I(n, c, h + kh, w + kw)
    B_grad(m) +=! O_grad(n, m, h, w)
}
"""

# An integer input (a per-element scale) and an integer output.
SCALE = """
def scale(float(N) A, int32(N) K) -> (O, Kc) {
    O(i) = A(i) * float(K(i))
    Kc(i) = K(i) + 1
}
"""


def as_double(source: str) -> str:
    """The same defs with every float declared double (for float64 gradchecks)."""
    return source.replace("float(", "double(")
