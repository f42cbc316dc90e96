"""cuda.cuda_report and tools.gpu_report: the loop-IR counts against isl's exact FLOPs
and the tensors' sizes, the parsers of ptxas -v and cuobjdump -sass on fixed texts,
occupancy and the roofline; the whole report on matmul where NVRTC, ptxas and cuobjdump
are installed (the cuda-dev extra)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from compiler.cuda.cuda_report import (
    H100,
    H200,
    Resources,
    Work,
    kernel_work,
    occupancy,
    parse_ptxas,
    parse_sass,
    roofline,
)
from compiler.frontend.check import check_def
from compiler.frontend.parser import parse
from compiler.poly.flops import count_flops
from compiler.poly.ranges import infer_ranges
from compiler.runtime.cuda import compile_cuda

ROOT = Path(__file__).resolve().parents[2]
MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) { C(m, n) +=! A(m, k) * B(k, n) }"

PTXAS = """ptxas info    : 1 bytes gmem
ptxas info    : Compiling entry function 'f_k0' for 'sm_90'
ptxas info    : Function properties for f_k0
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compiling entry function 'f_k1' for 'sm_90'
ptxas info    : Function properties for f_k1
    48 bytes stack frame, 40 bytes spill stores, 52 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem
"""

SASS = """
        Function : f_k0
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   LDG.E R3, desc[UR4][R6.64] ;
        /*0030*/                   FFMA R0, R2, R3, R0 ;
        /*0040*/                   IADD3 R4, R4, 0x4, RZ ;
        /*0050*/               @P0 BRA 0x10 ;
        /*0060*/                   STG.E desc[UR4][R8.64], R0 ;
        /*0070*/                   EXIT ;
        /*0080*/                   BRA 0x80;
        Function : f_k1
        /*0000*/                   MOV R0, RZ ;
        /*0010*/                   EXIT ;
"""


def _program(text: str):  # noqa: ANN202
    ranged = infer_ranges(check_def(parse(text).get(None)))
    return compile_cuda(ranged), ranged


@pytest.mark.parametrize("sizes", [{"M": 7, "K": 13, "N": 5}, {"M": 64, "K": 31, "N": 97}])
def test_plain_kernel_counts_the_defs_flops_and_tensor_bytes(sizes: dict[str, int]) -> None:
    program, ranged = _program(MATMUL)
    (plain,) = [k for k in program.gpu.kernels if not k.variant]
    work = kernel_work(plain.body, {b.name: b for b in program.gpu.buffers}, sizes)
    m, k, n = sizes["M"], sizes["K"], sizes["N"]
    assert work.flops == count_flops(ranged, sizes) == 2 * m * n * k
    assert work.bytes == 4 * (m * k + k * n + m * n)
    assert work.threads == m * n


def test_parsers_read_ptxas_and_sass() -> None:
    res = parse_ptxas(PTXAS)
    assert res["f_k0"] == Resources(32, 0, 0, 0, 0)
    assert res["f_k1"] == Resources(255, 40, 52, 4096, 48)
    mixes = parse_sass(SASS)
    hot = mixes["f_k0"]  # the loop 0x10..0x50, not the trailing self-branch
    assert (hot.instructions, hot.ffma, hot.global_loads) == (5, 1, 2)
    assert hot.loads_per_ffma == 2.0 and hot.ffma_share == pytest.approx(0.2)
    assert mixes["f_k1"].ffma == 0 and mixes["f_k1"].loads_per_ffma is None


def test_occupancy_from_registers_threads_and_shared() -> None:
    assert occupancy(Resources(32, 0, 0, 0, 0), 256, H100) == 1.0
    assert occupancy(Resources(128, 0, 0, 0, 0), 256, H100) == 0.25  # 2 blocks of 8 warps
    assert occupancy(Resources(32, 0, 0, 100 * 1024, 0), 256, H100) == 0.25  # shared: 2
    assert occupancy(Resources(16, 0, 0, 0, 0), 32, H100) == 0.5  # 32 blocks of 1 warp


def test_roofline_bounds_and_few_threads() -> None:
    many = H200.sms * 2048
    seconds, bound = roofline(Work(many, 0, int(4.8e9)), H200)
    assert bound == "memory" and seconds == pytest.approx(1e-3)
    seconds, bound = roofline(Work(many, int(67e9), 1), H200)
    assert bound == "compute" and seconds == pytest.approx(1e-3)
    seconds, bound = roofline(Work(1, 0, int(4.8e9)), H200)
    assert bound == "memory (too few threads)" and seconds > 100


HAS_TOOLS = importlib.util.find_spec("cuda") is not None and all(
    importlib.util.find_spec(m) is not None for m in ("nvidia",)
)


@pytest.mark.skipif(not HAS_TOOLS, reason="needs the cuda extra (NVRTC)")
def test_report_of_matmul(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Registers and spills come from NVRTC's own ptxas (a ptxas on PATH may be older
    than the NVRTC wheel and refuse its PTX); the SASS mix where cuobjdump is found."""
    from tools.gpu_report import ReportError, main, tool_path

    try:
        tool_path("cuobjdump")
        sass = True
    except ReportError:
        sass = False
    path = tmp_path / "mm.tc"
    path.write_text(MATMUL)
    assert main([str(path), "--shape", "A=512,256", "--shape", "B=256,384", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["def_flops"] == 2 * 512 * 256 * 384
    (row,) = out["kernels"]  # one kernel these sizes launch
    assert row["registers"] > 0 and row["spill_bytes"] == 0 and 0 < row["occupancy"] <= 1
    assert (row["hot_loop"]["ffma"] > 0) if sass else row["hot_loop"] is None
    assert row["flops"] == out["def_flops"] and row["estimate_ms"] > 0
    assert main([str(path), "--shape", "A=512,256", "--shape", "B=256,384"]) == 0
    assert ("no SASS instruction mix" in capsys.readouterr().out) is not sass
    assert main([str(path), "--shape", "A=512,256"]) == 1  # N unknown: a clear error
    assert "no --shape gives the size(s) N" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_TOOLS, reason="needs the cuda extra (NVRTC)")
def test_report_of_a_gradient_with_one_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--grad --loss Y`: the gradient without the other outputs' cotangents reads less
    (softmax: no `shifted_grad`); `--loss` without `--grad` is an error."""
    from tools.gpu_report import main

    path = ROOT / "examples" / "softmax.tc"
    shape = ["--shape", "X=256,512", "--json"]
    assert main([str(path), "--grad", *shape]) == 0
    every = json.loads(capsys.readouterr().out)["kernels"]
    assert main([str(path), "--grad", "--loss", "Y", *shape]) == 0
    one = json.loads(capsys.readouterr().out)["kernels"]
    assert sum(r["bytes"] for r in one) < sum(r["bytes"] for r in every)
    assert main([str(path), "--loss", "Y", *shape]) == 1
    assert "--loss needs --grad" in capsys.readouterr().err
