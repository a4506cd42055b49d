"""benchmarks/gpu_static.py reads SASS right: instruction classes, loops from backward
branches (cuobjdump's absolute targets and nvdisasm's labels), tensor-core FLOP; and NVRTC
cubins are whole ELF files that the CUDA tools read."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_static", ROOT / "benchmarks" / "gpu_static.py")
G = importlib.util.module_from_spec(_spec)
sys.modules["gpu_static"] = G  # dataclasses look their module up
_spec.loader.exec_module(G)

SASS = """
        Function : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LDGSTS.E.BYPASS.128 [R5], desc[UR4][R2.64] ;
        /*0030*/                   HGMMA.64x128x16.F32 R24, gdesc[UR8], R24 ;
        /*0040*/                   LDSM.16.M88.4 R8, [R9] ;
        /*0050*/               @P0 BRA 0x30 ;
        /*0060*/                   SHFL.BFLY PT, R3, R2, 0x1, 0x1f ;
        /*0070*/                   STL [R1], R3 ;
        /*0080*/                   EXIT ;
"""


def test_parse_classes_and_loop():
    fig = G.figures_from_sass("x", SASS, 10, 4)
    c = fig.counts
    assert (c["LDG.128"], c["LDGSTS"], c["HGMMA"], c["LDSM"], c["SHFL"], c["LDL/STL"]) == \
        (1, 1, 1, 1, 1, 1)
    assert fig.loop_instructions == 3  # 0x30..0x50
    assert fig.loop_mma_flop == 2 * 64 * 128 * 16 // 4  # one warp's share of the warpgroup op
    assert not fig.loop_has_inner


def test_label_targets_and_nested_loops():
    text = """
.L_x_0:
        /*0000*/                   HMMA.16816.F32 R0, R4, R8, R0 ;
.L_x_1:
        /*0010*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0020*/               @P1 BRA `(.L_x_1) ;
        /*0030*/               @P0 BRA `(.L_x_0) ;
"""
    fig = G.figures_from_sass("x", text, 0, 0)
    assert fig.loop_instructions == 4 and fig.loop_has_inner  # the outer loop: 0x00..0x30
    fig.step_flop = 4096
    assert fig.flop_per_instruction == 1024


def test_nvrtc_cubin_is_a_whole_elf(tmp_path):
    from kdsl.backends import cuda

    if not cuda.compiler_available():
        pytest.skip("neither NVRTC nor nvcc works here")
    cubin = cuda.compile_cubin('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1; }',
                               "sm_90")
    assert len(cubin) == cuda.elf_extent(cubin) > 0
    assert cuda.complete_elf(cubin[:-1]) == cubin  # a cubin one byte short is padded back
    try:
        tool = G.cuobjdump()
    except SystemExit:
        pytest.skip("cuobjdump / nvdisasm not installed (kdsl[sass])")
    if shutil.which("nvdisasm", path=str(Path(tool).parent)) is None:
        pytest.skip("nvdisasm not beside cuobjdump")
    instrs, _, _ = G.parse_sass(G.sass_of(cubin))
    assert any(op.startswith("STG") for _, op in instrs)
