"""tcc layers as PyTorch custom operators (compiler.torch.ops): torch.compile without
graph breaks, torch.export, vmap by one batched call, the torch.func transforms, dtype
instantiation and DistributedDataParallel. References are torch's own operations."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import compiler.torch as tct  # noqa: E402
from compiler.diagnostics import OptionsError  # noqa: E402
from compiler.torch import Layer, TCLayer  # noqa: E402

MV = "def mv(float(M,K) A, float(K) x) -> (y) { y(m) +=! A(m, k) * x(k) }"
MV64 = "def mv(double(M,K) A, double(K) x) -> (y) { y(m) +=! A(m, k) * x(k) }"
MODEL = """
def conv(float(N, C, H, W) I, float(M, C, KH, KW) W1) -> (O) {
    O(n, m, h, w) +=! I(n, c, h + kh, w + kw) * W1(m, c, kh, kw)
}
def layernorm(float(B, D) X) -> (mean, var, Y) {
    mean(n) +=! X(n, d) / float(D)
    var(n) +=! (X(n, d) - mean(n)) * (X(n, d) - mean(n)) / float(D)
    Y(n, d) = (X(n, d) - mean(n)) / sqrt(var(n) + 1e-5)
}
def linear(float(B, I) X, float(O, I) W) -> (Y) { Y(n, o) +=! X(n, i) * W(o, i) }
"""


class _Net(torch.nn.Module):
    """conv -> flatten -> layernorm -> relu -> linear, all tcc layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = Layer(MODEL, "conv", params={"W1": (2, 1, 3, 3)})
        self.norm = Layer(MODEL, "layernorm")
        self.fc = Layer(MODEL, "linear", params={"W": (3, 18)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).flatten(1)
        _, _, h = self.norm(h)
        return self.fc(torch.relu(h))


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_torch_compile_fullgraph_has_no_graph_breaks_and_trains() -> None:
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(2, 1, 5, 5)
    explained = torch._dynamo.explain(net)(x)
    assert explained.graph_break_count == 0
    eager = net(x)
    eager.square().sum().backward()
    expected = _grads(net)
    net.zero_grad()
    compiled = torch.compile(net, fullgraph=True)
    out = compiled(x)
    torch.testing.assert_close(out, eager)
    out.square().sum().backward()
    for got, want in zip(_grads(net), expected, strict=True):
        torch.testing.assert_close(got, want)


def test_the_operator_is_what_the_graph_calls_and_its_name_is_stable() -> None:
    layer = tct.define(MV)
    again = tct.define(MV)
    assert layer.ops.qualname == again.ops.qualname
    assert layer.ops.qualname.startswith("tcc::mv_")
    assert tct.define(MV64).ops.qualname != layer.ops.qualname
    a, x = torch.randn(3, 4), torch.randn(4)
    torch.testing.assert_close(layer.op(a, x), a @ x)


def test_torch_export_of_a_model_with_a_tcc_layer_runs() -> None:
    torch.manual_seed(0)
    net = _Net()
    x = torch.randn(2, 1, 5, 5)
    program = torch.export.export(net, (x,))
    assert "torch.ops.tcc." in program.graph_module.code
    torch.testing.assert_close(program.module()(x), net(x))


def test_vmap_runs_one_native_call_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = tct.define(MV)
    calls: list[str] = []
    run = TCLayer.run

    def counting(self: TCLayer, tensors: object) -> object:
        calls.append(self.name)
        return run(self, tensors)

    monkeypatch.setattr(TCLayer, "run", counting)
    a, xs = torch.randn(3, 4), torch.randn(7, 4)
    (y,) = torch.func.vmap(layer, in_dims=(None, 0))(a, xs)
    torch.testing.assert_close(y, xs @ a.T)
    assert len(calls) == 1
    # batched along another dimension, both inputs batched
    a_b, x_b = torch.randn(5, 3, 4), torch.randn(4, 5)
    (y,) = torch.func.vmap(layer, in_dims=(0, 1))(a_b, x_b)
    torch.testing.assert_close(y, torch.einsum("bmk,kb->bm", a_b, x_b))


def test_func_transforms_match_torch_in_float64() -> None:
    layer = tct.define(MV64)
    a = torch.randn(3, 4, dtype=torch.float64)
    x = torch.randn(4, dtype=torch.float64)

    def f(v: torch.Tensor) -> torch.Tensor:
        return layer(a, v)[0]

    def loss(v: torch.Tensor) -> torch.Tensor:
        return (f(v).sin() ** 2).sum()

    def reference(v: torch.Tensor) -> torch.Tensor:
        return ((a @ v).sin() ** 2).sum()

    torch.testing.assert_close(torch.func.jacrev(f)(x), a)
    torch.testing.assert_close(torch.func.jacfwd(f)(x), a)
    torch.testing.assert_close(torch.func.grad(loss)(x), torch.func.grad(reference)(x))
    torch.testing.assert_close(torch.func.hessian(loss)(x), torch.func.hessian(reference)(x))
    # vmap of grad: per-example gradients
    xs = torch.randn(5, 4, dtype=torch.float64)
    torch.testing.assert_close(
        torch.func.vmap(torch.func.grad(loss))(xs), torch.func.vmap(torch.func.grad(reference))(xs)
    )


def test_a_float_def_instantiated_for_float64_gradchecks() -> None:
    layer = tct.define(MV, dtype=torch.float64)
    a = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert layer(a, x)[0].dtype == torch.float64
    assert torch.autograd.gradcheck(lambda a, x: layer(a, x)[0], (a, x))
    with pytest.raises(OptionsError, match="dtype="):
        tct.define(MV, dtype=torch.int32)


def test_module_double_instantiates_the_def_for_float64() -> None:
    torch.manual_seed(0)
    layer = Layer(MODEL, "linear", params={"W": (3, 4)}).double()
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert layer.W.dtype == torch.float64
    torch.testing.assert_close(layer(x), x @ layer.W.T)
    assert torch.autograd.gradcheck(layer, (x,))


def test_ddp_two_processes_follow_the_single_process_loss_curve() -> None:
    """examples/train_ddp.py: 2 gloo processes, each half the global batch."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parents[2] / "examples" / "train_ddp.py"
    run = subprocess.run(
        [sys.executable, str(script), "--world-size", "2", "--steps", "3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = re.findall(r"single process ([0-9.]+)  DDP x2 ([0-9.]+)", run.stdout)
    assert len(rows) == 3, run.stdout
    one = [float(a) for a, _ in rows]
    ddp = [float(b) for _, b in rows]
    assert ddp[-1] < ddp[0]  # it trains
    for a, b in zip(one, ddp, strict=True):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a))
