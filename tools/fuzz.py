"""Differential random-program testing of tcc (issue 43: no silent wrong result).

    python -m tools.fuzz --seeds 0:200 --jobs 2 [--grad] [--targets interp,llvm,...]
                         [--timeout 60] [--reduce] [--exact | --inexact] [--json FILE]

Each seed gives one random TC def together with its meaning (`tools.fuzz_gen`: the
generator chooses every range itself; `tools.fuzz_ir.evaluate` computes the outputs
with plain loops, sharing nothing with tcc). The def runs on every target
(`tools.fuzz_run.TARGETS`: interp, llvm at threads 1 and 2, llvm with random Options
from the autotuner's space, and for a fraction of seeds cuda-emulated), its shapes
through `compiler.infer_shapes`; with `--grad` (float64 programs) `vjp` on every
target against finite differences of the oracle and the jvp/vjp dot-product test
(`tools.fuzz_grad`). Data is exact (dyadic: any difference is a bug) for even seeds
and inexact (normal, compared within a rounding bound) for odd ones, unless
`--exact` / `--inexact`. Outcomes: ok, wrong, crash, rejected (a TCError on a valid
program), unsupported (README-listed), hang (the worker is killed after --timeout
and restarted; a target that kills its worker is a crash of that target). The summary
groups failures by signature; `--reduce` minimises one
program per signature (`tools.fuzz_reduce`) and prints it. Deterministic in the seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from multiprocessing.connection import wait

from tools.fuzz_run import TARGETS, Outcome

FAILURES = ("wrong", "crash", "hang", "rejected")


@dataclass(frozen=True)
class Config:
    targets: tuple = ("interp", "llvm", "llvm-t2", "llvm-rand", "cuda-emulated")
    grad: bool = False
    exact: bool | None = None  # None: by seed parity
    cuda_fraction: float = 0.2
    timeout: float = 60.0


def seed_targets(seed: int, cfg: Config) -> tuple:
    cuda = random.Random(seed * 31 + 7).random() < cfg.cuda_fraction
    return tuple(t for t in cfg.targets if t != "cuda-emulated" or cuda)


def program_for(seed: int, cfg: Config) -> tuple:
    from tools.fuzz_gen import generate

    exact = (seed % 2 == 0 if cfg.exact is None else cfg.exact) and not cfg.grad
    return generate(seed, exact=exact, grad=cfg.grad), exact


def check(p: object, seed: int, cfg: Config, exact: bool, targets: tuple) -> list[Outcome]:
    """Every outcome of program `p` (forward, and gradients with cfg.grad)."""
    from tools.fuzz_grad import check_gradients
    from tools.fuzz_ir import Invalid
    from tools.fuzz_run import check_forward

    try:
        outcomes = check_forward(p, seed, targets, exact)
        if cfg.grad:  # only where the forward run was right: one bug, one signature
            passed = {o.target for o in outcomes if o.kind == "ok"}
            outcomes += check_gradients(p, seed, tuple(t for t in targets if t in passed))
    except Invalid as e:
        return [Outcome("ok", "invalid", "", str(e))]
    return outcomes


def run_seed(seed: int, cfg: Config) -> dict:
    from tools.fuzz_ir import show_program

    p, exact = program_for(seed, cfg)
    outcomes = check(p, seed, cfg, exact, seed_targets(seed, cfg))
    return {
        "seed": seed,
        "text": show_program(p),
        "sizes": dict(p.sizes),
        "exact": exact,
        "outcomes": [dataclasses.asdict(o) for o in outcomes],
    }


def reduce_seed(seed: int, cfg: Config, sig: str) -> dict:
    from tools.fuzz_ir import show_program
    from tools.fuzz_reduce import reduce

    p, exact = program_for(seed, cfg)
    target = sig.split(":")[1]
    base = target.split("-", 1)[1] if target.startswith(("grad-", "jvp-")) else target
    targets = (base,) if base in TARGETS else seed_targets(seed, cfg)
    sub = dataclasses.replace(cfg, grad=cfg.grad and target.startswith(("grad-", "jvp-")))

    died = ":the process died" in sig  # then tried in forked children

    def still(c: object) -> bool:
        if died:
            return _kills_its_process(lambda: check(c, seed, sub, exact, targets), cfg.timeout)
        return any(o.signature == sig for o in check(c, seed, sub, exact, targets))

    small = reduce(p, still, budget_s=max(60.0, 2 * cfg.timeout))
    found = (
        [] if died else [o for o in check(small, seed, sub, exact, targets) if o.signature == sig]
    )
    detail = sig if died else found[0].detail if found else ""
    return {"seed": seed, "signature": sig, "text": show_program(small),
            "sizes": dict(small.sizes), "detail": detail}  # fmt: skip


def _kills_its_process(run, timeout: float) -> bool:  # noqa: ANN001
    """Does `run()` kill the process that runs it (a signal, an abort)? It runs in a
    forked child; a child past `timeout` seconds is killed and counts as not."""
    pid = os.fork()
    if pid == 0:  # the child: any exit of its own is a survival
        from tools import fuzz_run

        fuzz_run.ANNOUNCE.clear()  # the pipe to the parent is the worker's
        try:
            run()
        finally:
            os._exit(0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WIFSIGNALED(status) or os.WEXITSTATUS(status) != 0
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def _worker(conn: object) -> None:
    import warnings

    from tools import fuzz_run

    warnings.simplefilter("ignore")
    fuzz_run.ANNOUNCE.append(lambda target: conn.send({"running": target}))
    while True:
        task = conn.recv()
        if task is None:
            return
        kind, seed, cfg, sig = task
        if kind == "crash":  # a stand-in for a target that kills its process (tests/fuzz)
            fuzz_run.announce("llvm")
            os._exit(139)
        if kind == "sleep":  # a stand-in for a hanging program (tests/fuzz)
            time.sleep(seed)
            conn.send({"seed": seed})
            continue
        try:
            out = run_seed(seed, cfg) if kind == "run" else reduce_seed(seed, cfg, sig)
        except Exception as e:  # noqa: BLE001 - a tester bug is reported, not fatal
            out = {"seed": seed, "error": f"{type(e).__name__}: {e}"}
        conn.send(out)


class Pool:
    """Worker processes with a per-task time limit: a worker past it is killed
    (the task becomes a hang) and replaced."""

    def __init__(self, jobs: int) -> None:
        self.ctx = mp.get_context("spawn")
        self.slots = [self._start() for _ in range(jobs)]

    def _start(self) -> list:
        a, b = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(b,), daemon=True)
        proc.start()
        return [proc, a, None, 0.0, ""]  # process, connection, task, started, target

    def map(self, tasks: list, timeout: float, on_result) -> None:  # noqa: ANN001
        todo = list(reversed(tasks))
        while todo or any(s[2] is not None for s in self.slots):
            for s in self.slots:
                if s[2] is None and todo:
                    s[2], s[3], s[4] = todo.pop(), time.monotonic(), ""
                    s[1].send(s[2])
            busy = [s for s in self.slots if s[2] is not None]
            ready = wait([s[1] for s in busy], timeout=1.0)
            for s in busy:
                if s[1] in ready:
                    try:
                        result = s[1].recv()
                    except EOFError:  # the process died: a crash of the target it ran
                        s[0].join(timeout=10)  # its pipe may close before it is reaped
                        result = {"seed": s[2][1], "died": s[4] or "(tester)",
                                  "code": s[0].exitcode}  # fmt: skip
                        self._replace(s)
                    if "running" in result:
                        s[4] = result["running"]
                        continue
                    on_result(s[2], result)
                    s[2] = None
                elif time.monotonic() - s[3] > timeout:
                    task = s[2]
                    self._replace(s)
                    on_result(task, {"seed": task[1], "hang": True, "target": s[4]})
                    s[2] = None

    def _replace(self, s: list) -> None:
        s[0].kill()
        s[0].join()
        s[0], s[1] = self._start()[:2]

    def close(self) -> None:
        for s in self.slots:
            try:
                s[1].send(None)
            except (BrokenPipeError, OSError):
                pass
            s[0].join(timeout=5)
            if s[0].is_alive():
                s[0].kill()


def summarise(results: list) -> tuple[str, dict]:
    """The summary table, and the first seed of every failure signature."""
    per_target: dict = defaultdict(Counter)
    per_sig: dict = defaultdict(list)
    for r in results:
        if r.get("hang"):
            where = r.get("target") or "(program)"
            per_target[where]["hang"] += 1
            per_sig[f"hang:{where}:timeout"].append(r["seed"])
            continue
        if "died" in r:  # a crash that took the worker with it (a signal, an abort)
            per_target[r["died"]]["crash"] += 1
            code = r["code"] or 0
            how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            per_sig[f"crash:{r['died']}:the process died ({how})"].append(r["seed"])
            continue
        if "error" in r:
            per_target["(tester)"]["error"] += 1
            per_sig[f"tester:{r['error'][:80]}"].append(r["seed"])
            continue
        for o in r["outcomes"]:
            per_target[o["target"]][o["kind"]] += 1
            if o["kind"] in FAILURES:
                per_sig[o["signature"]].append(r["seed"])
    kinds = ("ok", "wrong", "crash", "rejected", "unsupported", "hang", "error")
    lines = [f"{'target':<18}" + "".join(f"{k:>12}" for k in kinds)]
    for t in sorted(per_target):
        lines.append(f"{t:<18}" + "".join(f"{per_target[t][k]:>12}" for k in kinds))
    lines.append("")
    lines.append(f"{len(per_sig)} failure signature(s):")
    for sig, seeds in sorted(per_sig.items(), key=lambda kv: -len(kv[1])):
        shown = ", ".join(map(str, seeds[:8])) + (" ..." if len(seeds) > 8 else "")
        lines.append(f"  {len(seeds):>4}  {sig}\n        seeds: {shown}")
    return "\n".join(lines), {s: tuple(v) for s, v in per_sig.items()}


def representatives(first: dict) -> dict:
    """One signature per failure across targets (the same message on interp, llvm, ...
    is one bug to minimise; a wrong value only where the same seeds fail), the first
    target in TARGETS order, with its first seed; hangs and tester errors have no
    reproducer to minimise. `first`: signature -> the seeds it failed on."""
    order = {t: i for i, t in enumerate(TARGETS)}
    best: dict = {}
    for sig, seeds in first.items():
        seed = seeds[0]
        if sig.startswith(("hang", "tester")):
            continue
        kind, target, rest = sig.split(":", 2)
        stage, base = "", target
        if target.startswith(("grad-", "jvp-")):
            stage, base = target.split("-", 1)
        key = (kind, stage, rest, tuple(seeds) if kind == "wrong" else ())
        rank = order.get(base, len(order))
        if key not in best or rank < best[key][0]:
            best[key] = (rank, sig, seed)
    return {sig: seed for _, sig, seed in best.values()}


def markdown(table: str, reductions: list) -> str:
    """The summary table and the minimised reproducers, as Markdown."""
    out = ["```", table, "```", ""]
    for r in sorted(reductions, key=lambda r: r.get("signature", "")):
        if "text" not in r:
            continue
        out += [f"### `{r['signature']}`", "", f"seed {r['seed']}, sizes {r['sizes']}", ""]
        out += ["```", r["text"].rstrip(), "```", "", "```", r["detail"].strip()[-1200:], "```", ""]
    return "\n".join(out)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM: leave through `finally` (which stops the workers), not abruptly."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0:100", help="A:B, the half-open range of seeds")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--grad", action="store_true", help="float64 programs, check gradients")
    ap.add_argument("--targets", default=",".join(Config.targets))
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per program")
    ap.add_argument("--reduce", action="store_true", help="minimise one program per signature")
    ap.add_argument("--cuda-fraction", type=float, default=0.2)
    ap.add_argument("--json", help="write every result (and reduction) to this file")
    ap.add_argument("--report", help="write the summary and reproducers as Markdown here")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--exact", dest="exact", action="store_true", default=None)
    mode.add_argument("--inexact", dest="exact", action="store_false")
    args = ap.parse_args(argv)
    a, b = (int(x) for x in args.seeds.split(":"))
    targets = tuple(t for t in args.targets.split(",") if t)
    unknown = set(targets) - set(TARGETS)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}; choose from {','.join(TARGETS)}")
    cfg = Config(targets, args.grad, args.exact, args.cuda_fraction, args.timeout)
    results: list = []
    started = time.monotonic()

    def progress(task: tuple, result: dict) -> None:
        results.append(result)
        bad = sum(
            1
            for r in results
            if r.get("hang") or "error" in r or "died" in r
            or any(o["kind"] in FAILURES for o in r.get("outcomes", ()))
        )  # fmt: skip
        print(f"\r[{len(results)}/{b - a}] {bad} failing, {time.monotonic() - started:.0f}s",
              end="", file=sys.stderr, flush=True)  # fmt: skip

    before = signal.signal(signal.SIGTERM, _terminated)  # `finally` then stops the workers
    pool = Pool(args.jobs)
    try:
        pool.map([("run", s, cfg, None) for s in range(a, b)], cfg.timeout, progress)
        print(file=sys.stderr)
        table, first = summarise(sorted(results, key=lambda r: r["seed"]))
        print(table)
        reductions: list = []
        if args.reduce and first:
            tasks = [("reduce", seed, cfg, sig) for sig, seed in representatives(first).items()]
            pool.map(tasks, max(120.0, 6 * cfg.timeout), lambda t, r: reductions.append(r))
            print("\nMinimised reproducers:")
            for r in sorted(reductions, key=lambda r: r.get("signature", "")):
                if "text" not in r:
                    print(f"\n# seed {r['seed']}: reduction failed {r}")
                    continue
                print(f"\n# {r['signature']}  (seed {r['seed']}, sizes {r['sizes']})")
                print(
                    r["text"] + f"# {r['detail'].strip().splitlines()[-1] if r['detail'] else ''}"
                )
    finally:
        pool.close()
        signal.signal(signal.SIGTERM, before)
    if args.report:
        with open(args.report, "w") as f:
            f.write(markdown(table, locals().get("reductions", [])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "reductions": locals().get("reductions", [])}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
