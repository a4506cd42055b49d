"""Where a CPU kernel spends its time, loop by loop of its machine code: a sampling profile of
llvm-backend kernels with Linux `perf`, mapped onto each JIT-compiled kernel's disassembly.

    python benchmarks/cpu_profile.py attention [--threads 1] [--secs 6] [--loops 12]
    python benchmarks/cpu_profile.py matmul --size 2048
    python benchmarks/cpu_profile.py --setup "x = rng.standard_normal((4096, 4096), np.float32)" \\
        --call "K.softmax(x, backend='llvm')"

The workload (a named library call, or `--setup`/`--call` Python with `K` = kdsl.kernels,
`np`, `rng`) is warmed up (compiled, autotuned) and then called in a loop while `perf record
-e cpu-clock` samples this process.  Each kernel alive in the llvm backend
(`kdsl.backends.llvm.LIVE`) is re-emitted as an object file by the same target machine and
disassembled with `objdump`; a sample counts for the kernel whose code holds its address and,
inside it, for the innermost loop (a backward branch's range) around it.  Printed: the share of
all samples per kernel, then its hottest loops with their size and instruction mix (an FMA
micro-kernel shows `vfmadd231ps` and `vbroadcastss`; packing that became scatters shows
`vscatter*`; a NaN-propagating max shows `vcmpunordps`).  `--annotate FILE` writes the whole
disassembly with a sample count per instruction.

Needs `perf` (with permission to sample this process: perf_event_paranoid <= 2 suffices for
one's own processes) and binutils' `objdump`; without them the script says which is missing
and exits.  Samples land on the instruction after the one that waits, so read a loop's total,
not single lines.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import machine_header

#: name -> (setup, call): the library calls of benchmarks/kernels.py at profiling sizes
WORKLOADS = {
    "matmul": ("a = rng.standard_normal((N, N), np.float32); "
               "b = rng.standard_normal((N, N), np.float32)",
               "K.matmul(a, b, backend='llvm')"),
    "attention": ("q, k, v = (rng.standard_normal((1, 8, N, 64), np.float32) for _ in range(3))",
                  "K.attention(q, k, v, backend='llvm')"),
    "mlp": ("x = rng.standard_normal((512, 2048), np.float32); "
            "wg, wu = (rng.standard_normal((2048, 5504), np.float32) / 45 for _ in range(2)); "
            "wd = rng.standard_normal((5504, 2048), np.float32) / 74",
            "K.mlp(x, wg, wu, wd, backend='llvm')"),
    "softmax": ("x = rng.standard_normal((N, N), np.float32)", "K.softmax(x, backend='llvm')"),
    "decode": ("q = rng.standard_normal((16, 32, 128), np.float32); "
               "kc, vc = (rng.standard_normal((512, 16, 8, 128), np.float32) for _ in range(2)); "
               "table = rng.permutation(512).astype(np.int32).reshape(16, 32); "
               "lens = np.full(16, 500, np.int32)",
               "K.decode_attention(q, kc, vc, table, lens, backend='llvm')"),
}
DEFAULT_SIZE = {"matmul": 2048, "attention": 1024, "softmax": 4096}


@dataclass
class Code:
    """One kernel's machine code: its name, where it lies and its instructions."""

    name: str
    start: int  # address of the grid function in this process
    size: int
    insns: list[tuple[int, str]]  # (offset from start, text)
    base: int  # the grid function's offset in the object (jump targets are object offsets)


def disassemble(name: str, address: int, obj: bytes, tmp: str) -> Code:
    """The grid function `<name>_grid` of an object file (the kernel body is inlined into it),
    placed at `address`."""
    path = os.path.join(tmp, f"{name}_{address:x}.o")
    with open(path, "wb") as f:
        f.write(obj)
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True,
                          text=True, check=True).stdout
    syms = [(int(m.group(1), 16), m.group(2))
            for m in re.finditer(r"^([0-9a-f]+) <(\S+)>:", text, re.M)]
    insns = [(int(m.group(1), 16), m.group(2).strip())
             for m in re.finditer(r"^\s+([0-9a-f]+):\s+(.*)$", text, re.M)]
    grid = dict((n, a) for a, n in syms)[f"{name}_grid"]
    end = min([a for a, _ in syms if a > grid] + [insns[-1][0] + 16])
    return Code(name, address, end - grid,
                [(o - grid, t) for o, t in insns if grid <= o < end], grid)


def loops(code: Code) -> list[tuple[int, int]]:
    """(first, last) offsets of the range of each backward branch (a loop)."""
    out = []
    for off, text in code.insns:
        m = re.match(r"j\w+\s+([0-9a-f]+)\b", text)
        if m and 0 <= int(m.group(1), 16) - code.base <= off:
            out.append((int(m.group(1), 16) - code.base, off))
    return out


def by_loop(code: Code, hits: Counter) -> Counter:
    """Samples per innermost loop ((first, last) offsets; None: outside every loop)."""
    ranges = loops(code)
    out: Counter = Counter()
    for off, _ in code.insns:
        around = [r for r in ranges if r[0] <= off <= r[1]]
        out[min(around, key=lambda r: r[1] - r[0]) if around else None] += hits[off]
    return out


def _mix(insns: list[str], top: int = 7) -> str:
    ops = Counter(t.split()[0] for t in insns)
    return " ".join(f"{op} {n}" for op, n in ops.most_common(top))


def profile(setup: str, call: str, secs: float, freq: int) -> tuple[list[int], int, float]:
    """Warm the workload up, then sample this process for `secs` while calling it: (sampled
    instruction addresses, calls made, seconds per call)."""
    import kdsl.kernels as K

    ns = {"K": K, "np": np, "rng": np.random.default_rng(0)}
    exec(setup, ns)
    run = compile(call, "<call>", "eval")
    eval(run, ns)
    eval(run, ns)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        rec = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq),
                                "-p", str(os.getpid()), "-o", data, "--", "sleep", str(secs)],
                               stderr=subprocess.PIPE)
        time.sleep(0.3)  # perf attaches
        calls, t0 = 0, time.perf_counter()
        while rec.poll() is None:
            eval(run, ns)
            calls += 1
        per_call = (time.perf_counter() - t0) / max(calls, 1)
        if rec.returncode:
            raise SystemExit(f"perf record failed: {rec.stderr.read().decode().strip()}")
        ips = subprocess.run(["perf", "script", "-i", data, "-F", "ip"], capture_output=True,
                             text=True, check=True).stdout.split()
    return [int(x, 16) for x in ips], calls, per_call


def report(ips: list[int], loops_shown: int, annotate: str | None) -> None:
    from kdsl.backends import llvm

    total = len(ips)
    with tempfile.TemporaryDirectory() as tmp:
        codes = [disassemble(h.name, h.address, llvm.object_code(h.opt_ir), tmp)
                 for h in list(llvm.LIVE)]
    hits: dict[int, Counter] = {id(c): Counter() for c in codes}
    for ip in ips:
        for c in codes:
            if c.start <= ip < c.start + c.size:
                hits[id(c)][ip - c.start] += 1
                break
    ranked = sorted(codes, key=lambda c: -sum(hits[id(c)].values()))
    notes = []
    for c in ranked:
        n = sum(hits[id(c)].values())
        if not n:
            continue
        print(f"\n{c.name} (code at {c.start:#x}, {c.size} bytes): {n / total:.1%} of "
              f"{total} samples")
        inner = by_loop(c, hits[id(c)])
        print(f"  {'loop':>15s} {'share':>6s} {'instr':>5s}  instruction mix")
        for key, cnt in inner.most_common(loops_shown):
            if not cnt:
                break
            if key is None:
                print(f"  {'(no loop)':>15s} {cnt / total:6.1%}")
                continue
            body = [t for o, t in c.insns if key[0] <= o <= key[1]]
            print(f"  {key[0]:#7x}-{key[1]:#7x} {cnt / total:6.1%} {len(body):5d}  {_mix(body)}")
        if annotate:
            notes += [f"== {c.name}"] + [f"{o:#8x} {hits[id(c)][o]:7d}  {t}" for o, t in c.insns]
    if annotate:
        with open(annotate, "w") as f:
            f.write("\n".join(notes) + "\n")
        print(f"\nper-instruction samples written to {annotate}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", nargs="?", choices=sorted(WORKLOADS))
    ap.add_argument("--size", type=int, help="N of the named workload (matmul N^3, ...)")
    ap.add_argument("--setup", default="", help="Python run once (K, np, rng are defined)")
    ap.add_argument("--call", default="", help="Python expression called in the loop")
    ap.add_argument("--threads", type=int, help="KDSL_NUM_THREADS for the run")
    ap.add_argument("--secs", type=float, default=6.0)
    ap.add_argument("--freq", type=int, default=5000, help="samples per second")
    ap.add_argument("--loops", type=int, default=10, help="hottest loops shown per kernel")
    ap.add_argument("--annotate", help="write per-instruction sample counts to this file")
    args = ap.parse_args()
    missing = [t for t in ("perf", "objdump") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"cpu_profile: {' and '.join(missing)} not found (Linux perf and "
                         "binutils are needed)")
    if args.workload:
        setup, call = WORKLOADS[args.workload]
        setup = f"N = {args.size or DEFAULT_SIZE.get(args.workload, 0)}\n{setup}"
    elif args.call:
        setup, call = args.setup, args.call
    else:
        raise SystemExit("cpu_profile: name a workload or give --call")
    if args.threads:
        os.environ["KDSL_NUM_THREADS"] = str(args.threads)
    print(machine_header())
    ips, calls, per_call = profile(setup, call, args.secs, args.freq)
    print(f"{call}: {calls} calls in {args.secs:g} s, {per_call * 1e3:.2f} ms per call, "
          f"KDSL_NUM_THREADS={os.environ.get('KDSL_NUM_THREADS', 'default')}")
    report(ips, args.loops, args.annotate)


if __name__ == "__main__":
    main()
