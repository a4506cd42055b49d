"""GPU code quality without a GPU: the same kernel text compiled by kdsl and by Triton for one
architecture (default sm_90), read as SASS, side by side.

    python benchmarks/gpu_static.py [--arch sm_90] [--json out.json] [--keep DIR]

For each kernel (benchmarks/static_kernels.py: the tutorial matmul in fp16 with 128x128x64
tiles and 8 warps, 3 stages; a fused fp16 softmax over 4096 columns) it prints registers,
spill traffic (LDL/STL instructions and ptxas's spill bytes), the instruction mix (HMMA / HGMMA
tensor-core instructions, LDSM = ldmatrix, LDGSTS = cp.async, LDG/STG by width, SHFL, BAR) and,
for a kernel with a K loop, the **K loop**: the outermost loop that holds tensor-core
instructions, its static instruction count and the tensor-core FLOP per issued instruction
(2 * BLOCK_M * BLOCK_N * BLOCK_K / num_warps, a warp's share of one K step, over the loop's
instructions).  A loop body with inner loops executes some instructions several times, so for
such a body the count is a lower bound and FLOP/instruction an upper bound (marked `<=`).

Triton is optional (a benchmark dependency, `pip install triton`): without it only kdsl's
column is printed.  SASS comes from `cuobjdump -sass` with its `nvdisasm` (the
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels of the `sass` extra, or beside nvcc).  Needs no GPU: both compilers run ahead of time (NVRTC or nvcc for kdsl,
`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` for Triton).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# FLOP per warp-level instruction.  HMMA.16816: one m16n8k16 product per warp.  HGMMA.64xNx16:
# one warpgroup (4 warps) product of 64 x N x 16, issued by each of its warps.
MMA_FLOP = {
    "HMMA.16816": 2 * 16 * 8 * 16,
    "HMMA.1688": 2 * 16 * 8 * 8,
    "IMMA.16832": 2 * 16 * 8 * 32,
}
_HGMMA = re.compile(r"HGMMA\.64x(\d+)x(\d+)")


@dataclass
class Case:
    name: str
    kernel: str                   # function in benchmarks/static_kernels.py
    args: list[tuple[str, Any]]   # (Triton signature type, kdsl argument)
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    dot_shape: tuple[int, int, int] | None = None  # BLOCK_M, BLOCK_N, BLOCK_K of the K loop


def cases() -> list[Case]:
    f16 = np.zeros(16, np.float16)
    n = 4096
    return [
        Case("matmul fp16 128x128x64 w8 s3", "tutorial_matmul",
             [("*fp16", f16), ("*fp16", f16), ("*fp16", f16)]
             + [("i32", n)] * 3 + [("i32", n), ("i32", 1), ("i32", n), ("i32", 1),
                                   ("i32", n), ("i32", 1)],
             dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8), 8, 3, (128, 128, 64)),
        Case("softmax fp16 4096 cols w8", "fused_softmax",
             [("*fp16", f16), ("*fp16", f16), ("i32", n), ("i32", n), ("i32", n)],
             dict(BLOCK_SIZE=4096), 8, 1),
    ]


@dataclass
class Figures:
    compiler: str
    registers: int = 0
    spill_bytes: int = 0
    instructions: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    loop_instructions: int = 0
    loop_mma_flop: int = 0
    loop_has_inner: bool = False
    error: str = ""

    step_flop: int = 0  # FLOP per warp per K step: 2 * BLOCK_M * BLOCK_N * BLOCK_K / warps

    @property
    def flop_per_instruction(self) -> float:
        """FLOP per warp per K step / K-loop instructions: exact for a loop without inner
        loops, an upper bound otherwise (inner loops run their instructions several times)."""
        flop = self.step_flop or self.loop_mma_flop
        return flop / self.loop_instructions if self.loop_instructions else 0.0


# ----------------------------------------------------------------------------- SASS reading

def _tool_dirs() -> list[Path]:
    """Folders that may hold cuobjdump and nvdisasm, newest toolkit first: the
    nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels, beside nvcc, then Triton's bundle
    (CUDA 12.8: it cannot read CUDA 13 cubins)."""
    dirs = []
    try:
        import nvidia
        dirs += [Path(p) / "cu13" / "bin" for p in nvidia.__path__]
    except ImportError:
        pass
    if nvcc := shutil.which("nvcc"):
        dirs.append(Path(os.path.realpath(nvcc)).parent)
    try:
        import triton
        dirs.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin")
    except ImportError:
        pass
    return dirs


def cuobjdump() -> str:
    for d in _tool_dirs():
        if (d / "cuobjdump").exists() and (d / "nvdisasm").exists():
            return str(d / "cuobjdump")
    if tool := shutil.which("cuobjdump"):
        return tool
    raise SystemExit("cuobjdump and nvdisasm not found: pip install nvidia-cuda-cuobjdump "
                     "nvidia-cuda-nvdisasm (kdsl[sass])")


def sass_of(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        tool = cuobjdump()
        env = dict(os.environ, PATH=f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True,
                              check=True, env=env).stdout
    finally:
        os.unlink(f.name)


_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")
_TARGET = re.compile(r"^\s*(0x[0-9a-f]+|`?\(\.L_x_\d+\))")
_LABEL = re.compile(r"^\s*\.L_x_(\d+):")

CLASSES = {  # name -> predicate on the opcode
    "HMMA": lambda op: op.startswith("HMMA"),
    "HGMMA": lambda op: op.startswith("HGMMA"),
    "LDSM": lambda op: op.startswith("LDSM"),
    "LDGSTS": lambda op: op.startswith("LDGSTS"),
    "UTMALDG": lambda op: op.startswith("UTMALDG"),
    "LDG.128": lambda op: op.startswith("LDG.") and ".128" in op,
    "LDG.64": lambda op: op.startswith("LDG.") and ".64" in op,
    "LDG.other": lambda op: op.startswith("LDG.") and ".128" not in op and ".64" not in op,
    "STG.128": lambda op: op.startswith("STG.") and ".128" in op,
    "STG.other": lambda op: op.startswith("STG.") and ".128" not in op,
    "LDS": lambda op: op.startswith("LDS") and not op.startswith("LDSM"),
    "STS": lambda op: op.startswith("STS"),
    "SHFL": lambda op: op.startswith("SHFL"),
    "BAR": lambda op: op.startswith("BAR"),
    "LDL/STL": lambda op: op.startswith(("LDL", "STL")),
}


def _mma_flop(op: str) -> int:
    if m := _HGMMA.match(op):
        return 2 * 64 * int(m.group(1)) * int(m.group(2)) // 4
    return next((f for k, f in MMA_FLOP.items() if op.startswith(k)), 0)


def parse_sass(text: str) -> tuple[list[tuple[int, str]], dict[str, int], list[tuple[int, int]]]:
    """(instructions as (address, opcode), label -> address, loops as (start, end) address
    ranges of backward branches) of the first kernel in cuobjdump output."""
    instrs: list[tuple[int, str]] = []
    labels: dict[str, int] = {}
    branches: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        if m := _LABEL.match(line):
            pending.append(m.group(1))
            continue
        m = _LINE.search(line)
        if not m:
            continue
        addr, op, rest = int(m.group(1), 16), m.group(3), m.group(4)
        for lab in pending:
            labels[lab] = addr
        pending.clear()
        if op == "NOP":
            continue
        instrs.append((addr, op))
        if op.startswith("BRA") and (t := _TARGET.search(rest)):
            branches.append((addr, t.group(1)))
    # a target is an absolute address (cuobjdump) or a label (nvdisasm)
    targets = [(a, int(t, 16) if t.startswith("0x") else labels.get(t.strip("`()").removeprefix(
        ".L_x_"))) for a, t in branches]
    loops = [(t, a) for a, t in targets if t is not None and t < a]
    return instrs, labels, loops


def figures_from_sass(compiler: str, text: str, registers: int, spill_bytes: int) -> Figures:
    instrs, _, loops = parse_sass(text)
    fig = Figures(compiler, registers=registers, spill_bytes=spill_bytes,
                  instructions=len(instrs))
    fig.counts = {k: sum(1 for _, op in instrs if pred(op)) for k, pred in CLASSES.items()}
    mma_loops = [(s, e) for s, e in loops
                 if any(_mma_flop(op) for a, op in instrs if s <= a <= e)]
    if mma_loops:
        # the K loop: the outermost loop holding tensor-core instructions (one K step per
        # iteration; a persistent kernel's tile loop would hold it, none of these has one)
        s, e = max(mma_loops, key=lambda r: r[1] - r[0])
        body = [op for a, op in instrs if s <= a <= e]
        fig.loop_instructions = len(body)
        fig.loop_mma_flop = sum(_mma_flop(op) for op in body)
        fig.loop_has_inner = any(s <= s2 and e2 <= e and (s2, e2) != (s, e) for s2, e2 in loops)
    return fig


# ------------------------------------------------------------------------------ compilers

def _kernel_modules():
    from kdsl.porting import port_source

    src = (ROOT / "benchmarks" / "static_kernels.py").read_text()
    folder = Path(tempfile.mkdtemp(prefix="kdsl-static-"))
    path = folder / "kdsl_static_kernels.py"
    path.write_text(port_source(src))
    import importlib.util
    spec = importlib.util.spec_from_file_location("kdsl_static_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def compile_kdsl(case: Case, arch: str, keep: Path | None) -> Figures:
    from kdsl.backends import cuda

    try:
        fn = getattr(_kernel_modules(), case.kernel)
        ck = fn.compile(*[a for _, a in case.args], backend="cuda", num_warps=case.num_warps,
                        num_stages=case.num_stages, **case.constexprs)
        cubin = cuda.compile_cubin(ck.source, arch)
        usage = cuda.resource_usage(ck.source, arch)
    except Exception as e:  # a compile failure is a figure too
        return Figures("kdsl", error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    text = sass_of(cubin)
    if keep:
        (keep / f"{case.kernel}.kdsl.cu").write_text(ck.source)
        (keep / f"{case.kernel}.kdsl.sass").write_text(text)
    return figures_from_sass("kdsl", text, usage.get("registers", 0),
                             usage.get("spill_stores", 0) + usage.get("spill_loads", 0))


def compile_triton(case: Case, arch: str, keep: Path | None) -> Figures | None:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        return None
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "triton_static_kernels", ROOT / "benchmarks" / "static_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, case.kernel)
    names = fn.arg_names
    sig = {names[i]: t for i, (t, _) in enumerate(case.args)}
    sig.update({k: "constexpr" for k in case.constexprs})
    # what Triton's launcher would specialise: an int equal to 1 becomes a constant, 16-byte
    # aligned pointers and ints divisible by 16 get the divisibility attribute (kdsl's launcher
    # specialises the last two alike)
    consts = dict(case.constexprs)
    for i, (t, a) in enumerate(case.args):
        if t.startswith("i") and a == 1:
            sig[names[i]], consts[names[i]] = "constexpr", 1
    attrs = {(i,): [["tt.divisibility", 16]] for i, (t, a) in enumerate(case.args)
             if t.startswith("*") or (isinstance(a, int) and a % 16 == 0)}
    try:
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
        cc = int(arch.removeprefix("sm_").rstrip("a"))
        k = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                           options={"num_warps": case.num_warps, "num_stages": case.num_stages})
    except Exception as e:
        return Figures("triton", error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    text = sass_of(k.asm["cubin"])
    if keep:
        (keep / f"{case.kernel}.triton.sass").write_text(text)
        (keep / f"{case.kernel}.triton.ptx").write_text(k.asm["ptx"])
    from kdsl.backends import cuda

    ptx = k.asm["ptx"]
    target = re.search(r"\.target\s+(sm_\w+)", ptx)
    try:
        usage = cuda.resource_usage(ptx, target.group(1) if target else arch)
    except Exception:
        usage = {}
    regs = usage.get("registers", 0)
    spills = usage.get("spill_stores", 0) + usage.get("spill_loads", 0)
    return figures_from_sass("triton", text, regs, spills)


# ---------------------------------------------------------------------------------- table

def _row(fig: Figures, case: Case) -> list[str]:
    if fig.error:
        return [fig.compiler, f"error: {fig.error}"]
    c = fig.counts
    loop = "-"
    if fig.loop_instructions:
        bound = "<=" if fig.loop_has_inner else ""
        loop = f"{fig.loop_instructions} ({bound}{fig.flop_per_instruction:.0f} FLOP/instr)"
    return [fig.compiler, str(fig.registers), f"{c['LDL/STL']} ({fig.spill_bytes} B)",
            str(fig.instructions), loop, str(c["HMMA"]), str(c["HGMMA"]), str(c["LDSM"]),
            str(c["LDGSTS"] + c["UTMALDG"]), f"{c['LDG.128']}/{c['LDG.64']}/{c['LDG.other']}",
            f"{c['STG.128']}/{c['STG.other']}", str(c["SHFL"]), str(c["BAR"])]


HEADER = ["compiler", "regs", "LDL/STL (spill B)", "instrs", "K loop instrs", "HMMA", "HGMMA",
          "LDSM", "cp.async/TMA", "LDG 128/64/other", "STG 128/other", "SHFL", "BAR"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--keep", help="write the CUDA source and both SASS listings here")
    args = ap.parse_args(argv)
    keep = Path(args.keep) if args.keep else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[dict]] = {}
    print(f"# static GPU code comparison for {args.arch} (no GPU needed)\n")
    for case in cases():
        figs = [compile_kdsl(case, args.arch, keep)]
        tri = compile_triton(case, args.arch, keep)
        if tri is not None:
            figs.append(tri)
        if case.dot_shape:
            bm, bn, bk = case.dot_shape
            for f in figs:
                f.step_flop = 2 * bm * bn * bk // case.num_warps
        print(f"## {case.name}\n")
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for f in figs:
            print("| " + " | ".join(_row(f, case)) + " |")
        ok = [f for f in figs if not f.error and f.loop_instructions]
        if len(ok) == 2 and ok[1].flop_per_instruction:
            print(f"\nkdsl / Triton tensor-core FLOP per K-loop instruction: "
                  f"{ok[0].flop_per_instruction / ok[1].flop_per_instruction:.2f}x")
        print()
        out[case.name] = [dict(asdict(f), flop_per_instruction=f.flop_per_instruction)
                          for f in figs]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
