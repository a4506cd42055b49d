"""The SIMD shape the llvm backend tunes its code for: the vector width LLVM is asked to prefer
and the number of vector registers the CPU `dot` micro-kernel may fill.

LLVM's own choice is not the widest the CPU has: on Intel cores with AVX-512 (Skylake-X up to
Emerald Rapids) its tuning flag `prefer-256-bit` makes the loop vectoriser emit 256-bit `ymm`
code, a rule made for the frequency drop of early AVX-512 parts.  For kdsl's loops that halves
the work per instruction and, worse, a micro-kernel sized for 16 `zmm` accumulators then needs
32 `ymm` ones and spills them inside its FMA loop (measured on an Emerald Rapids core: matmul
2.1x, attention 1.4x, softmax 1.3x faster with 512-bit vectors, identical results).  So every
function of a module gets the attribute `"prefer-vector-width"` (what clang's
`-mprefer-vector-width` sets) from the table below.  `min-legal-vector-width` is left unset:
absent, it puts no limit on the legal vector types, which is what a 512-bit choice needs.

`choose(features, triple)` maps any CPU through `RULES` (first matching row wins); a row names
the LLVM features it needs and the profile they give.  Rationale of the rows:

- x86 with AVX-512F (and EVEX-512 not switched off, as on AVX10/256 parts): 512-bit vectors,
  32 registers (zmm0-31).
- x86 with AVX-512F but `-evex512`: 256-bit vectors, still 32 registers (ymm0-31 via EVEX).
- x86 with AVX2 or AVX: 256-bit, 16 registers (ymm0-15).
- x86 otherwise (SSE2 is baseline x86-64): 128-bit, 16 registers; LLVM's default width.
- AArch64 (NEON, also with SVE): LLVM's default width (no attribute; fixed 128-bit NEON or
  scalable SVE vectors are its call); blocks sized for 128-bit, 32 registers (v0-v31 / z0-z31).
- anything else: LLVM's default width; blocks for 128-bit, 16 registers.

`KDSL_LLVM_VECTOR_WIDTH` overrides the host's row: `auto` (default), `128`/`256`/`512`
(that preferred width, the host's register count), or `llvm` (no attribute and the
width-agnostic block table of kdsl/lowering/dot_cpu.py: LLVM's own choice, which is how
kdsl compiled before this table existed; handy for side-by-side measurements).
The chosen profile is part of the backend's `hash()`, so the disk cache never reuses code built
for another CPU or width.

Matrix units (`matrix_caps`): where LLVM's host features include AMX (`amx-tile` with
`amx-bf16` / `amx-int8`, Intel Sapphire Rapids and later) and Linux grants the process the
tile state (AMX's 8 KiB of tile registers are handed out per process, on request:
`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, Linux 5.16+), the backend offers the
lowering the capabilities "tile_dot", "tile_dot_bf16" and "tile_dot_int8": bfloat16 and int8
dots on the tile registers (kdsl/lowering/dot_tile.py, backends/llvm_amx.py).
`KDSL_LLVM_MATRIX=none` turns them off (every dot on the vector micro-kernel, whose float sums
are sequential fused multiply-adds); `auto` (default) uses what the host has.  They are part of
the backend's `hash()` too.
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass
from functools import lru_cache

from llvmlite import ir

ENV = "KDSL_LLVM_VECTOR_WIDTH"


@dataclass(frozen=True)
class SimdProfile:
    """vector_bits: the width code is tuned for (float32 lanes = vector_bits // 32; 0: not
    chosen, the lowering's width-agnostic defaults); vector_regs: architectural vector
    registers (0: unknown); prefer: the `prefer-vector-width` given to LLVM (None: LLVM's
    default); rule: the name of the RULES row (or override) it came from; scalef: vectors
    are scaled by powers of two in one instruction (AVX-512's `vscalefps`), so float32
    `exp`/`exp2` end in `llvm.ldexp` rather than in integer exponent arithmetic
    (backends/llvm_math.py)."""

    vector_bits: int
    vector_regs: int
    prefer: int | None
    rule: str
    scalef: bool = False

    def fn_attrs(self) -> dict[str, str]:
        """String attributes for every function LLVM compiles under this profile."""
        return {} if self.prefer is None else {"prefer-vector-width": str(self.prefer)}

    def key(self) -> str:
        """Identifies the profile in cache keys."""
        return (f"simd={self.vector_bits}x{self.vector_regs},prefer={self.prefer},{self.rule}"
                + (",scalef" if self.scalef else ""))


# (name, architecture, features that must be on, features that must be off, profile)
# architecture: "x86", "arm" or "" (any); see the module docstring for the reasons.
RULES: tuple[tuple[str, str, frozenset[str], frozenset[str], SimdProfile], ...] = tuple(
    (name, arch, frozenset(on), frozenset(off),
     SimdProfile(bits, regs, prefer, name, "avx512f" in on))
    for name, arch, on, off, bits, regs, prefer in (
        ("avx512", "x86", {"avx512f"}, {"evex512-off"}, 512, 32, 512),
        ("avx512-256", "x86", {"avx512f", "evex512-off"}, (), 256, 32, 256),
        ("avx2", "x86", {"avx2"}, (), 256, 16, 256),
        ("avx", "x86", {"avx"}, (), 256, 16, 256),
        ("sse", "x86", (), (), 128, 16, None),
        ("neon", "arm", (), (), 128, 32, None),
        ("other", "", (), (), 128, 16, None),
    ))

_ARCH = {"x86_64": "x86", "i686": "x86", "i386": "x86", "amd64": "x86", "aarch64": "arm",
         "arm64": "arm"}


def parse_features(features: str) -> frozenset[str]:
    """The enabled names of an LLVM feature string ("+avx2,-avx512f,..."); an explicit
    "-evex512" shows up as "evex512-off" (EVEX-512 is on by default where AVX-512F is)."""
    on = set()
    for f in features.split(","):
        f = f.strip()
        if f.startswith("+"):
            on.add(f[1:])
        elif f == "-evex512":
            on.add("evex512-off")
    return frozenset(on)


def arch_of(triple: str, features: frozenset[str] = frozenset()) -> str:
    """ "x86", "arm" or "" from a target triple (or, without one, from the feature names)."""
    head = triple.split("-", 1)[0].lower()
    if head in _ARCH:
        return _ARCH[head]
    if head:
        return ""
    if features & {"sse2", "avx", "avx2", "avx512f"}:
        return "x86"
    if features & {"neon", "sve", "fp-armv8"}:
        return "arm"
    return ""


def choose(features: str, triple: str = "") -> SimdProfile:
    """The profile of a CPU with LLVM feature string `features` and target `triple`."""
    on = parse_features(features)
    arch = arch_of(triple, on)
    for _, row_arch, need, avoid, profile in RULES:
        if row_arch in ("", arch) and need <= on and not avoid & on:
            return profile
    raise AssertionError("RULES ends with a row that matches every CPU")


def override(profile: SimdProfile, value: str) -> SimdProfile:
    """`profile` changed by a KDSL_LLVM_VECTOR_WIDTH value (see the module docstring)."""
    value = value.strip().lower()
    if value in ("", "auto"):
        return profile
    if value == "llvm":
        return SimdProfile(0, 0, None, "llvm-default", profile.scalef)
    if value in ("128", "256", "512"):
        return SimdProfile(int(value), profile.vector_regs, int(value), f"forced-{value}",
                           profile.scalef)
    raise ValueError(f"{ENV}={value!r}: expected auto, llvm, 128, 256 or 512")


@lru_cache(maxsize=1)
def _host() -> SimdProfile:
    import llvmlite.binding as llvm

    return choose(llvm.get_host_cpu_features().flatten(), llvm.get_process_triple())


@lru_cache(maxsize=8)
def _profile(env: str) -> SimdProfile:
    return override(_host(), env)


def profile() -> SimdProfile:
    """The profile the llvm backend compiles for now: the host's row, or the override."""
    return _profile(os.environ.get(ENV, ""))


MATRIX_ENV = "KDSL_LLVM_MATRIX"

# capability -> the LLVM host features it needs (all of them)
MATRIX_RULES: tuple[tuple[str, frozenset[str]], ...] = (
    ("tile_dot_bf16", frozenset({"amx-tile", "amx-bf16"})),
    ("tile_dot_int8", frozenset({"amx-tile", "amx-int8"})),
)
_SYS_ARCH_PRCTL = 158  # x86-64 Linux
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def matrix_units(features: str, permitted: bool) -> frozenset[str]:
    """The matrix-unit capabilities of a CPU with LLVM feature string `features`, in a process
    that may (`permitted`) use the tile registers: "tile_dot" plus one "tile_dot_<kind>" per
    kind of MATRIX_RULES, or none."""
    if not permitted:
        return frozenset()
    on = parse_features(features)
    caps = {cap for cap, need in MATRIX_RULES if need <= on}
    return frozenset(caps | {"tile_dot"}) if caps else frozenset()


@lru_cache(maxsize=1)
def tile_state_permitted() -> bool:
    """Ask Linux, once per process, for AMX's tile state (its permission is per process and
    covers every thread); False where it refuses or this is not x86-64 Linux."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


@lru_cache(maxsize=4)
def _matrix(env: str) -> frozenset[str]:
    value = env.strip().lower()
    if value == "none":
        return frozenset()
    if value not in ("", "auto"):
        raise ValueError(f"{MATRIX_ENV}={env!r}: expected auto or none")
    import llvmlite.binding as llvm

    features = llvm.get_host_cpu_features().flatten()
    if not any(f"+{f}" in features for _, need in MATRIX_RULES for f in need):
        return frozenset()  # (no syscall on CPUs without a matrix unit)
    return matrix_units(features, tile_state_permitted())


def matrix_caps() -> frozenset[str]:
    """The matrix-unit capabilities the llvm backend offers now (the host's, or none under
    KDSL_LLVM_MATRIX=none)."""
    return _matrix(os.environ.get(MATRIX_ENV, ""))


class _FnAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes plus `"key"="value"` string attributes (llvmlite only
    knows the enum ones)."""

    def __init__(self, base: ir.values.FunctionAttributes, strings: dict[str, str]):
        super().__init__(sorted(base))
        self.alignstack = base.alignstack
        self.personality = base.personality
        self.strings = dict(strings)

    def __bool__(self) -> bool:  # llvmlite prints no attributes for an empty set
        return bool(self.strings) or super().__len__() > 0

    def _to_list(self, ret_type):
        return super()._to_list(ret_type) + [f'"{k}"="{v}"' for k, v in
                                             sorted(self.strings.items())]


def apply(module: ir.Module, prof: SimdProfile) -> None:
    """Give every function defined in `module` the profile's string attributes (all of them:
    always-inlined helpers and the kernel alike, so inlining never mixes preferences)."""
    attrs = prof.fn_attrs()
    if not attrs:
        return
    for fn in module.functions:
        if fn.blocks:
            fn.attributes = _FnAttributes(fn.attributes, attrs)


__all__ = ["ENV", "MATRIX_ENV", "MATRIX_RULES", "RULES", "SimdProfile", "apply", "choose",
           "matrix_caps", "matrix_units", "override", "parse_features", "profile",
           "tile_state_permitted"]
