"""Train a small model of tcc layers with DistributedDataParallel (gloo, CPU processes).

    python examples/train_ddp.py [--world-size 2] [--steps 5]

Each process holds a replica of the model: a tcc linear layer, a tcc layernorm and a
second tcc linear layer, written in TC and differentiated by tcc. DDP splits the global
batch between the processes and averages the gradients, so the loss curve (the mean
loss over the global batch at each step) is the one a single process computes on the
whole batch; the script prints both and their largest difference.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

TC = """
def linear(float(B, I) X, float(O, I) W, float(O) b) -> (Y) {
    Y(n, o) +=! X(n, i) * W(o, i)
    Y(n, o) = Y(n, o) + b(o)
}
def layernorm(float(B, D) X) -> (mean, var, Y) {
    mean(n) +=! X(n, d) / float(D)
    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(D)
    Y(n, d) = (X(n, d) - mean(n)) / sqrt(var(n) + 1e-5)
}
"""
GLOBAL_BATCH, FEATURES, HIDDEN = 8, 6, 5


class Model(nn.Module):
    """linear -> layernorm -> tanh -> linear, each a tcc layer."""

    def __init__(self) -> None:
        super().__init__()
        from compiler.torch import Layer

        self.fc1 = Layer(TC, "linear", params={"W": (HIDDEN, FEATURES), "b": (HIDDEN,)})
        self.norm = Layer(TC, "layernorm")
        self.fc2 = Layer(TC, "linear", params={"W": (1, HIDDEN), "b": (1,)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, _, h = self.norm(self.fc1(x))
        return self.fc2(torch.tanh(h))


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch (the same in every process)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(GLOBAL_BATCH, FEATURES, generator=g)
    return x, x.sum(1, keepdim=True).sin()


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> list[float]:
    """SGD on the mean squared error of (x, y); the loss at each step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in losses]


def single_process(steps: int) -> list[float]:
    torch.manual_seed(0)
    x, y = data()
    return train(Model(), x, y, steps)


def _worker(rank: int, world_size: int, init_file: str, steps: int, out: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    try:
        torch.manual_seed(0)  # the same initial weights in every process (DDP also broadcasts)
        model = nn.parallel.DistributedDataParallel(Model())
        x, y = data()
        shard = GLOBAL_BATCH // world_size
        part = slice(rank * shard, (rank + 1) * shard)
        losses = torch.tensor(train(model, x[part], y[part], steps), dtype=torch.float64)
        dist.all_reduce(losses)  # equal shards: the mean of the means is the global mean
        if rank == 0:
            torch.save((losses / world_size).tolist(), out)
    finally:
        dist.destroy_process_group()


def distributed(world_size: int, steps: int) -> list[float]:
    """The global-batch loss curve of `world_size` DDP processes."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out = os.path.join(tmp, "init"), os.path.join(tmp, "losses.pt")
        mp.spawn(_worker, args=(world_size, init_file, steps, out), nprocs=world_size, join=True)
        return torch.load(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    ddp = distributed(args.world_size, args.steps)
    one = single_process(args.steps)
    for step, (a, b) in enumerate(zip(one, ddp, strict=True)):
        print(f"step {step}: single process {a:.6f}  DDP x{args.world_size} {b:.6f}")
    print(f"largest difference: {max(abs(a - b) for a, b in zip(one, ddp, strict=True)):.2e}")


if __name__ == "__main__":
    main()
