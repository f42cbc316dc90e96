"""Digests of the code tcc generates, to show that a change of the compiler's
internals (a refactor, a faster pass) leaves every generated program as it was.

    python -m tools.same_code --seeds 0:500 [--grad] --out a.json   # in one tree
    python -m tools.same_code --seeds 0:500 [--grad] --out b.json   # in the other
    python -m tools.same_code --diff a.json b.json

Run from a tree's root, the compiler of that tree is the one measured (as for
`tools.fuzz`). For each random program of `tools.fuzz_gen` (and, with `--corpus`, each
def of the shared corpus with sizes in its manifest) it records a digest of:
- the CPU code: the lowered Function after the CPU passes (what the JIT compiles), its
  run-time checks and notes, for `Options(threads=1)`, `Options(threads=2)` and the
  random `Options` that `tools.fuzz` draws for the program's seed;
- the CUDA C of the emulated target;
- with `--grad`, the printed gradient def and the CPU code of the gradient.

An error is recorded by its type and message, so that a change of which programs are
rejected shows too. Two runs agree when every digest is equal: then the differential
tester's results on one tree hold for the other's generated code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import warnings
from collections.abc import Iterator
from typing import Any


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _guarded(fn: Any) -> str:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- the error itself is the digest
        return f"error {type(e).__name__}: {str(e)[:200]}"


def _cpu(ranged: Any, options: Any) -> str:
    from compiler import pipeline
    from compiler.codegen.target import get_target
    from compiler.runtime.native import TARGET, prepare

    lowered = pipeline.lower(ranged, options)
    f = prepare(get_target(TARGET), lowered.function, options)
    checks = repr([(str(c.access), c.dim, c.write) for c in lowered.checks])
    return _digest(repr(f) + checks + repr(tuple(getattr(lowered, "notes", ()))))


def _cuda(ranged: Any) -> str:
    from compiler.runtime.cuda import cuda_source

    return _digest(cuda_source(ranged))


def digests(
    entry: str | None, text: str, sizes: dict[str, int], seed: int, grad: bool
) -> dict[str, str]:
    """Every digest of one def (the module doc)."""
    from compiler import pipeline
    from compiler.backward import gradient_ranged
    from compiler.frontend.printer import print_def
    from compiler.options import Options
    from compiler.tune.space import Space, SpaceContext

    out: dict[str, str] = {}
    try:
        ranged = pipeline.run(text, entry, upto="ranges")
    except Exception as e:  # noqa: BLE001
        return {"ranges": f"error {type(e).__name__}: {str(e)[:200]}"}
    space = Space.for_options(Options, SpaceContext.of(ranged, sizes, cores=2))
    rand = space.sample(random.Random(seed))
    variants = {"t1": Options(threads=1), "t2": Options(threads=2), "rand": rand}
    for name, options in variants.items():
        out[name] = _guarded(lambda o=options: _cpu(ranged, o))
    out["cuda"] = _guarded(lambda: _cuda(ranged))
    if grad:
        g: Any = None

        def gradient() -> str:
            nonlocal g
            g = gradient_ranged(ranged)
            return _digest(print_def(g.checked.definition))

        out["grad"] = _guarded(gradient)
        if g is not None:
            out["grad-t1"] = _guarded(lambda: _cpu(g, Options(threads=1)))
            out["grad-cuda"] = _guarded(lambda: _cuda(g))
    return out


def _programs(
    seeds: range, grad: bool
) -> Iterator[tuple[str, str | None, str, dict[str, int], int]]:
    from tools.fuzz_gen import generate
    from tools.fuzz_ir import show_program

    for s in seeds:
        p = generate(s, exact=not grad and s % 2 == 0, grad=grad)
        yield f"seed {s}", None, show_program(p), dict(p.sizes), s


def _corpus() -> Iterator[tuple[str, str | None, str, dict[str, int], int]]:
    from tools.corpus import DEFAULT_DIR, load_manifest  # the shared corpus

    for n, e in enumerate(load_manifest(DEFAULT_DIR)):
        if e.get("size_params") and not e.get("expected_error") and not e.get("template_values"):
            text = (DEFAULT_DIR / e["file"]).read_text(encoding="utf-8")
            yield f"corpus {e['file']}:{e['def']}", e["def"], text, dict(e["size_params"]), n


def _diff(a_path: str, b_path: str) -> int:
    try:
        with open(a_path) as fa, open(b_path) as fb:
            a, b = json.load(fa), json.load(fb)
    except (OSError, ValueError) as e:
        print(f"tools.same_code: cannot read the digests: {e}", file=sys.stderr)
        return 2
    differ = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    for k in differ[:50]:
        ka, kb = a.get(k, {}), b.get(k, {})
        parts = [v for v in sorted(set(ka) | set(kb)) if ka.get(v) != kb.get(v)]
        print(f"{k}: differs in {', '.join(parts) or 'presence'}")
    print(f"{len(a)} and {len(b)} programs, {len(differ)} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.same_code", description=__doc__)
    ap.add_argument("--seeds", default="0:0", help="A:B, the half-open range of fuzz seeds")
    ap.add_argument("--grad", action="store_true", help="float64 programs and their gradients")
    ap.add_argument("--corpus", action="store_true", help="also the shared corpus's defs")
    ap.add_argument("--out", help="write the digests (JSON) here")
    ap.add_argument("--diff", nargs=2, metavar=("A", "B"), help="compare two runs")
    args = ap.parse_args(argv)
    if args.diff:
        return _diff(*args.diff)
    if not args.out:
        ap.error("--out is required unless --diff is given")
    try:
        a, b = (int(x) for x in args.seeds.split(":"))
    except ValueError:
        ap.error(f"--seeds expects A:B, got {args.seeds!r}")
    jobs = list(_programs(range(a, b), args.grad))
    if args.corpus:
        jobs += list(_corpus())
    result = {}
    warnings.simplefilter("ignore")
    for i, (key, entry, text, sizes, seed) in enumerate(jobs):
        result[key] = digests(entry, text, sizes, seed, args.grad)
        if (i + 1) % 50 == 0:
            print(f"{i + 1}/{len(jobs)}", file=sys.stderr, flush=True)
    tmp = args.out + ".tmp"  # no half-written file
    with open(tmp, "w") as f:
        json.dump(result, f, indent=0, sort_keys=True)
    os.replace(tmp, args.out)
    print(f"{len(result)} programs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
