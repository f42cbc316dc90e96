"""Train a small CNN written in TC inside PyTorch, and compare it with torch.nn.

    python examples/train_tc_model.py [--steps 300] [--plot examples/train_tc_model.png]

The model: conv 3x3 (+bias) -> relu -> 2x2 max-pool -> linear -> cross-entropy, on
synthetic 8x8 images with 2 channels and 3 classes (each class a fixed random
pattern plus noise). Every layer is a TC def run by `compiler.torch` (conv and
linear are `compiler.torch.Layer`s holding their weights as nn.Parameters; relu,
max-pool and cross-entropy are `compiler.torch.define` training layers); the
gradients come from tcc's reverse-mode AD. The same model is built from torch.nn
layers, started from the same weights and trained by the same SGD optimiser on the
same batches; the script prints both loss curves' endpoints and their largest
difference, and plots them if matplotlib is installed (`pip install -e '.[plot]'`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import compiler.torch as tct  # noqa: E402
from compiler.options import Options  # noqa: E402
from compiler.progress import Progress  # noqa: E402

CONV = """
def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1, float(M) B) -> (O) {
    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)
    O(n, m, h, w) = O(n, m, h, w) + B(m)
}
"""
RELU = """
def relu(float(N, M, H, W) X) -> (Y) {
    Y(n, m, h, w) = fmax(X(n, m, h, w), 0)
}
"""
MAXPOOL = """
def maxpool(float(N, M, H, W) X) -> (Y) {
    Y(n, m, h, w) max=! X(n, m, 2 * h + kh, 2 * w + kw) where kh in 0:2, kw in 0:2
}
"""
LINEAR = """
def linear(float(N, M, H, W) X, float(K, M, H, W) Wl, float(K) Bl) -> (L) {
    L(n, k) +=! X(n, m, h, w) * Wl(k, m, h, w)
    L(n, k) = L(n, k) + Bl(k)
}
"""
# Mean cross-entropy with one-hot targets T, stabilised by the row maximum.
CROSS_ENTROPY = """
def cross_entropy(float(N, K) L, float(N, K) T) -> (mx, s, loss) {
    mx(n) max=! L(n, k)
    s(n) +=! exp(L(n, k) - mx(n))
    loss() +=! T(n, k) * (mx(n) + log(s(n)) - L(n, k)) / N
}
"""

N, C, HW, M, K = 64, 2, 8, 4, 3


class TCNet(nn.Module):
    """The model, every layer a TC def."""

    def __init__(self, options: Options) -> None:
        super().__init__()
        kw = {"options": options}
        self.conv = tct.Layer(CONV, params={"W1": (M, C, 3, 3), "B": (M,)}, **kw)
        self.relu = tct.define(RELU, training=True, **kw)
        self.pool = tct.define(MAXPOOL, training=True, **kw)
        self.linear = tct.Layer(LINEAR, params={"Wl": (K, M, 3, 3), "Bl": (K,)}, **kw)
        self.xent = tct.define(CROSS_ENTROPY, training=True, **kw)

    def forward(self, images: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        (x,) = self.relu(self.conv(images))
        (x,) = self.pool(x)
        return self.xent(self.linear(x), onehot)[2]


class TorchNet(nn.Module):
    """The same model from torch.nn, with the TC model's starting weights."""

    def __init__(self, tc: TCNet) -> None:
        super().__init__()
        self.conv = nn.Conv2d(C, M, 3)
        self.linear = nn.Linear(M * 9, K)
        with torch.no_grad():
            self.conv.weight.copy_(tc.conv.W1)
            self.conv.bias.copy_(tc.conv.B)
            self.linear.weight.copy_(tc.linear.Wl.reshape(K, -1))
            self.linear.bias.copy_(tc.linear.Bl)

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv(images)), 2)
        return F.cross_entropy(self.linear(x.flatten(1)), labels)


def make_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """N images of C x 8 x 8: a class pattern plus noise, and their labels."""
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(K, C, HW, HW, generator=g)
    labels = torch.arange(N) % K
    images = patterns[labels] + 2.5 * torch.randn(N, C, HW, HW, generator=g)
    return images, labels


def train(
    model: nn.Module,
    target: torch.Tensor,
    images: torch.Tensor,
    steps: int,
    progress: Progress | None = None,
    label: str = "",
) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        loss = model(images, target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress is not None:
            progress.update(f"{label} step", step + 1, steps)
    return losses


def compare(
    steps: int, seed: int = 0, threads: int | None = 1, progress: Progress | None = None
) -> tuple[list[float], list[float]]:
    """Train both models from the same weights; return the two loss curves."""
    torch.manual_seed(seed)
    images, labels = make_data(seed)
    tc_model = TCNet(Options(threads=threads))
    torch_model = TorchNet(tc_model)
    onehot = F.one_hot(labels, K).float()
    return (
        train(tc_model, onehot, images, steps, progress, "TC model"),
        train(torch_model, labels, images, steps, progress, "torch.nn model"),
    )


def plot(tc_losses: list[float], torch_losses: list[float], path: Path) -> bool:
    """Plot both curves to `path`; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=80)
    ax.plot(tc_losses, label="TC layers (tcc, llvm)")
    ax.plot(torch_losses, "--", label="torch.nn layers")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--plot", type=Path, default=Path(__file__).with_suffix(".png"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    with Progress("train_tc_model") as progress:  # a spinner on a terminal only
        tc_losses, torch_losses = compare(args.steps, progress=progress)
    elapsed = time.perf_counter() - start
    diff = max(abs(a - b) for a, b in zip(tc_losses, torch_losses, strict=True))
    print(f"{args.steps} steps in {elapsed:.1f} s (both models, compilation included)")
    print(
        f"loss: TC {tc_losses[0]:.4f} -> {tc_losses[-1]:.6f}, "
        f"torch.nn {torch_losses[0]:.4f} -> {torch_losses[-1]:.6f}"
    )
    print(f"max |TC - torch.nn| over the curve: {diff:.3g}")
    if plot(tc_losses, torch_losses, args.plot):
        print(f"plot written to {args.plot}")
    else:
        print("matplotlib is not installed: plot skipped (pip install -e '.[plot]')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
