"""A process that loaded torch's libgomp first: tcc's parallel loops run on a libgomp of
their own (passive), unless the user chose a wait policy (`cpu.runtime._private_gomp`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import torch, os, ctypes
import numpy as np
import compiler
import llvmlite.binding as llvm
k = compiler.define("def f(float(N) A) -> (B) {\\n B(i) = A(i) * 3\\n}",
                    options=compiler.Options(threads=2))
a = np.ones(1 << 20, np.float32)
assert k.info()["runtime"] == "gomp" and float(k(a)[0].sum()) == 3 * a.size
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libgomp" in l})
torch_lib = [m for m in maps if "torch" in m]
own = [m for m in maps if "torch" not in m]
launch = llvm.address_of_symbol("GOMP_parallel")
shared = ctypes.cast(ctypes.CDLL("libgomp.so.1").GOMP_parallel, ctypes.c_void_p).value
print(len(torch_lib), len(own), launch != shared)
"""


def _run(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def test_torch_first_gets_a_libgomp_of_its_own() -> None:
    torch_lib, own, private = _run(_env())
    if torch_lib == "0":
        pytest.skip("this torch does not load a libgomp.so.1 of its own")
    assert own == "1" and private == "True"  # a second runtime, and the launcher uses it


def test_a_chosen_wait_policy_shares_torch_s_libgomp() -> None:
    torch_lib, own, private = _run(_env(OMP_WAIT_POLICY="passive"))
    if torch_lib == "0":
        pytest.skip("this torch does not load a libgomp.so.1 of its own")
    assert own == "0" and private == "False"
