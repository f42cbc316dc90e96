"""Never serial where the work is parallel (issue 44): at moderate sizes, every phase of
every example, its gradient and a fixed sample of the corpus runs on at least
`min(work / WORK_PER_THREAD, MIN_THREADS)` threads, where `work` is the phase's loop
nest's iteration count, unless it runs on one thread for a reason that says it is
sequential (`GpuKernel.reason`, printed in `--emit cuda`'s launch comment).

The threads of a kernel are the iterations of its grid and block loops at the sizes
(not the launched threads: a band of 4 in a block of 256 is 4); a phase's are the most
any of its kernels that run at the sizes has (a split reduction's first pass)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler import loops as L
from compiler.backward import grad
from compiler.cuda.gpu_lower import lower_gpu
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.loops import eval_expr
from compiler.poly.ranges import infer_ranges
from compiler.runtime.cuda import compile_cuda

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.tc"))
CORPUS = Path("/work/shared/corpus/tc")
WORK_PER_THREAD = 64
MIN_THREADS = 1024
SEQUENTIAL = (
    "not one associative",
    "no parallel loop",
    "no loop",
    "each output's reduction is not",
)
SAMPLE_EVERY = 4  # the corpus entries tested: every 4th kernel entry by file name


def _example_sizes(names: tuple[str, ...]) -> dict[str, int]:
    """24 for every size, 3 for a kernel extent (a name starting with K)."""
    return {n: 3 if n.startswith("K") else 24 for n in names}


def _cases() -> list[tuple[str, str, str | None, dict[str, int] | None]]:
    found: list[tuple[str, str, str | None, dict[str, int] | None]] = []
    for path in EXAMPLES:
        text = path.read_text()
        found.append((path.stem, text, None, None))
        found.append((f"{path.stem}_grad", grad(text, None), None, None))
    manifest = CORPUS / "manifest.json"
    if manifest.exists():
        entries = [e for e in json.loads(manifest.read_text()) if e.get("size_params")]
        entries = [e for e in entries if e.get("category") == "kernel"]
        entries.sort(key=lambda e: (e["file"], e["def"]))
        for e in entries[::SAMPLE_EVERY]:
            text = (CORPUS / e["file"]).read_text()
            name = f"corpus_{Path(e['file']).stem}_{e['def']}"
            found.append((name, text, e["def"], dict(e["size_params"])))
    return found


def _work(stmt: L.Stmt, env: dict[str, int]) -> int:
    """The iterations of `stmt`'s deepest loop path (outer variables at their lower
    bound: exact for rectangular nests, a fair measure for the rest)."""
    if isinstance(stmt, L.For):
        try:
            lo, hi = int(eval_expr(stmt.lo, env)), int(eval_expr(stmt.hi, env))
        except Exception:  # noqa: BLE001 - a bound reading a buffer: count one
            return _work(stmt.body, env)
        trips = max(0, -(-(hi - lo) // stmt.step))
        return trips * _work(stmt.body, {**env, stmt.var: lo}) if trips else 0
    if isinstance(stmt, L.Block):
        return max((_work(s, env) for s in stmt.stmts), default=1)
    if isinstance(stmt, L.If):
        other = 0 if stmt.otherwise is None else _work(stmt.otherwise, env)
        return max(_work(stmt.then, env), other)
    if isinstance(stmt, (L.Local, L.Alloc)):
        return _work(stmt.body, env)
    if isinstance(stmt, L.Let):
        try:
            env = {**env, stmt.var: int(eval_expr(stmt.value, env))}
        except Exception:  # noqa: BLE001 - a value reading a buffer
            pass
        return _work(stmt.body, env)
    return 1


def _threads(stmt: L.Stmt, env: dict[str, int]) -> int:
    """The iterations of the grid and block loops at `stmt`'s root (1: none), through
    the serial band loops outside them."""
    if isinstance(stmt, L.Let):
        return _threads(stmt.body, {**env, stmt.var: int(eval_expr(stmt.value, env))})
    if isinstance(stmt, L.For) and stmt.kind in (L.LoopKind.GPU_BLOCK, L.LoopKind.GPU_THREAD):
        lo, hi = int(eval_expr(stmt.lo, env)), int(eval_expr(stmt.hi, env))
        trips = max(0, -(-(hi - lo) // stmt.step))
        if stmt.kind is L.LoopKind.GPU_THREAD:  # the innermost mapped loop
            return trips
        return trips * _threads(stmt.body, {**env, stmt.var: lo})
    if isinstance(stmt, L.For):  # a band loop beyond z: every thread runs it
        return _threads(stmt.body, {**env, stmt.var: int(eval_expr(stmt.lo, env))})
    return 1


def _launched(program: object, kernel: object, env: dict[str, int]) -> int:
    """The threads a kernel runs: its mapped loops' trips, or, for the shared-memory
    tiling (`cuda.cuda_shared`, whose body the emitter writes: a block's threads share
    a tile of outputs), every thread of its launch."""
    if kernel.variant == "shared":  # type: ignore[attr-defined]
        x, y, z = program.grid(kernel, env)  # type: ignore[attr-defined]
        return x * y * z * kernel.block  # type: ignore[attr-defined]
    return _threads(kernel.body, dict(env))  # type: ignore[attr-defined]


CASES = _cases()


@pytest.mark.parametrize(("name", "text", "entry", "sizes"), CASES, ids=[c[0] for c in CASES])
def test_no_phase_runs_on_fewer_threads_than_its_work(
    name: str, text: str, entry: str | None, sizes: dict[str, int] | None
) -> None:
    ranged = infer_ranges(check_def(parse(text).get(entry)))
    program = compile_cuda(ranged)
    env = sizes or _example_sizes(program.gpu.size_params)
    env = {n: env.get(n, 24) for n in program.gpu.size_params}
    phases = lower_gpu(ranged).phases
    for p, phase in enumerate(phases):
        work = _work(phase, dict(env))
        running = [k for k in program.gpu.kernels if k.phase == p and program.grid(k, env)[0]]
        if not running or work == 0:
            continue
        reasons = [k.reason for k in running]
        if any(r.startswith(SEQUENTIAL) for r in reasons):
            continue
        threads = max(_launched(program, k, env) for k in running)
        want = min(-(-work // WORK_PER_THREAD), MIN_THREADS)
        names = [k.name for k in running]
        assert threads >= want, f"{name} phase {p}: {threads} threads for {work} iterations {names}"


def test_a_one_thread_kernel_says_why_in_its_launch_comment() -> None:
    ranged = infer_ranges(check_def(parse("def t(float(N) A) -> (s) { s +=! A(i) }").get(None)))
    source = compile_cuda(ranged).source
    assert "(one thread: a short reduction: too few iterations to split across blocks" in source


def test_gradient_under_a_sizes_only_condition_runs_mapped_and_right() -> None:
    """The stride-2 convolution's input gradient sits under `H >= KH && W >= KW` and its
    band's lower bounds are selects: mapped (not one thread), each thread writes its own
    element (a select bound once took the thread index into one branch only)."""
    import numpy as np

    from compiler.kernel import define

    src = (ROOT / "examples" / "strided_conv.tc").read_text().replace("float(", "double(")
    rng = np.random.default_rng(0)
    i, w1 = rng.standard_normal((3, 2, 11, 7)), rng.standard_normal((5, 2, 3, 2))
    ref = define(src)
    (o,) = ref(i, w1)
    seed = rng.standard_normal(o.shape)
    got = define(src, target="cuda-emulated")
    for want, have in zip(ref.vjp(i, w1, grad_outputs=[seed]),
                          got.vjp(i, w1, grad_outputs=[seed]), strict=True):  # fmt: skip
        np.testing.assert_allclose(have, want, rtol=1e-12, atol=1e-12)
    program = got.grad._native
    sizes = {"N": 3, "C": 2, "H": 11, "W": 7, "M": 5, "KH": 3, "KW": 2}
    running = [k for k in program.gpu.kernels if program.grid(k, sizes)[0]]
    assert all(k.mode == "parallel" for k in running)
    assert any(k.when is not None and "I_grad" in {n.buffer.name for n in L.walk(k.body)
               if isinstance(n, L.Store)} for k in running)  # fmt: skip
